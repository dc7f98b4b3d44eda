"""The published values `kit compare` checks a run against, loaded from kit/compare/paper.yaml and
validated entry by entry: a value that names an unknown quantity, a count that does not round to the
printed percent, an interval that does not hold its point, a duplicate row, all fail on load.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kit.compare.measures import CONDITION_NAMES, MEASURES, ROWS, SCALE_KEYS, TABLES, TREND, Kind, Section
from kit.core.errors import ConfigError
from kit.engines import registry
from kit.core.packaged_yaml import read_yaml, validated

REFERENCES = {"paper": "paper.yaml"}
FORMATS = ("F32", "BF16", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_1", "Q4_0", "Q3_K_M", "Q2_K")
ROUNDING = 0.05 + 1e-9  # a printed percent is its count to one decimal (half a unit either way)

ScaleKey = Literal["episodes", "items", "histories", "sessions"]
ConditionKey = Literal["prompt_cache", "order", "workload", "reference"]
assert set(get_args(ScaleKey)) == set(SCALE_KEYS) and set(get_args(ConditionKey)) == set(CONDITION_NAMES)


class PublishedValue(BaseModel):
    """One published number: a rate (percent, and k of n where known), a paired difference or slope
    (points, with interval), an odds ratio (with interval), or a p-value (with its alternative)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    quantity: str
    kind: Kind
    value: float | None = None
    lo: float | None = None
    hi: float | None = None
    k: int | None = Field(default=None, ge=0)
    n: int | None = Field(default=None, ge=1)
    alternative: Literal["two-sided", "greater", "less"] | None = None
    conditions: dict[ConditionKey, str] = Field(default_factory=dict)
    scale: dict[ScaleKey, int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _shape(self) -> PublishedValue:
        if (self.k is None) != (self.n is None):
            raise ValueError("give both k and n, or neither")
        if self.k is not None and self.n is not None and self.k > self.n:
            raise ValueError(f"k={self.k} exceeds n={self.n}")
        if self.kind == "rate":
            self._rate()
        elif self.kind == "p_value":
            if self.value is None or not 0.0 <= self.value <= 1.0 or self.alternative is None:
                raise ValueError("a p_value needs value in [0, 1] and its alternative")
            if self.lo is not None or self.hi is not None or self.k is not None:
                raise ValueError("a p_value has no interval or counts")
        else:
            if self.value is None or self.lo is None or self.hi is None:
                raise ValueError(f"a {self.kind} needs value, lo and hi")
            if self.k is not None:
                raise ValueError(f"a {self.kind} has no counts")
            if self.kind == "odds_ratio" and self.lo <= 0:
                raise ValueError("an odds ratio interval lies above 0")
        if self.lo is not None and self.hi is not None and not self.lo <= self.point <= self.hi:
            raise ValueError(f"interval [{self.lo}, {self.hi}] does not hold the value {self.point}")
        if any(v <= 0 for v in self.scale.values()):
            raise ValueError("scale values are positive counts")
        return self

    def _rate(self) -> None:
        if self.value is None and self.k is None:
            raise ValueError("a rate needs value (percent) or k and n")
        if self.alternative is not None:
            raise ValueError("a rate has no alternative")
        if (self.lo is None) != (self.hi is None):
            raise ValueError("give both lo and hi, or neither")
        for name in ("value", "lo", "hi"):
            number = getattr(self, name)
            if number is not None and not 0.0 <= number <= 100.0:
                raise ValueError(f"{name}={number} is not a percent in [0, 100]")
        if (self.value is not None and self.k is not None and self.n is not None
                and abs(100.0 * self.k / self.n - self.value) > ROUNDING):
            raise ValueError(f"{self.k}/{self.n} = {100.0 * self.k / self.n:.3f}% does not round to the printed "
                             f"{self.value}%")

    @property
    def point(self) -> float:
        """The published value in its unit: the printed percent of a rate (its count where none is
        printed), the difference, slope, odds ratio or p."""
        if self.value is not None:
            return float(self.value)
        return 100.0 * self.k / self.n  # type: ignore[operator]


class PublishedRow(BaseModel):
    """One row of a published table: the configuration it was measured on and its values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[A-Za-z0-9_./+-]+$")
    table: Literal["III", "IV", "V", "VI", "VII"]
    part: Literal["rows", "trend"] = ROWS
    row: str = Field(min_length=1)
    model: str = Field(min_length=1)
    format: str
    engine: str  # an engine's label (kit.engines.registry): llama.cpp, vLLM
    scale: dict[ScaleKey, int]
    conditions: dict[ConditionKey, str] = Field(default_factory=dict)
    source: str = Field(min_length=1)
    values: list[PublishedValue] = Field(min_length=1)

    @model_validator(mode="after")
    def _known(self) -> PublishedRow:
        labels = [engine.label for engine in registry.ENGINES.values()]
        if self.engine not in labels:
            raise ValueError(f"engine {self.engine!r} is not an engine's label: one of {', '.join(labels)}")
        formats = self.format.split("+")
        if any(f not in FORMATS for f in formats) or (len(formats) > 1) != (self.part == TREND):
            raise ValueError(f"format {self.format!r}: a row names one of {', '.join(FORMATS)}; a trend joins "
                             "two or more with +")
        if not self.scale or any(v <= 0 for v in self.scale.values()):
            raise ValueError("scale names the paper's positive counts (episodes, items, histories, sessions)")
        known = MEASURES[self.section]
        seen = set()
        for value in self.values:
            if value.quantity not in known:
                raise ValueError(f"quantity {value.quantity!r} is not one of Table {self.table} {self.part}: "
                                 f"{', '.join(known)}")
            if value.kind != known[value.quantity].kind:
                raise ValueError(f"{value.quantity} is a {known[value.quantity].kind}, not a {value.kind}")
            if value.quantity in seen:
                raise ValueError(f"quantity {value.quantity!r} given twice")
            seen.add(value.quantity)
        if not re.match(rf"^{self.table}/", self.id):
            raise ValueError(f"id {self.id!r} starts with its table ({self.table}/)")
        return self

    @property
    def section(self) -> Section:
        return (self.table, self.part)

    @property
    def short_model(self) -> str:
        """The model as the paper's tables write it (Qwen2.5-7B)."""
        return re.sub(r"-Instruct$", "", self.model)

    def conditions_of(self, value: PublishedValue) -> dict[ConditionKey, str]:
        return {**self.conditions, **value.conditions}

    def scale_of(self, value: PublishedValue) -> dict[ScaleKey, int]:
        return {**self.scale, **value.scale}


class Reference(BaseModel):
    """A set of published rows (one paper)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    paper: str = Field(min_length=1)
    rows: list[PublishedRow] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Reference:
        ids, configurations = set(), set()
        for row in self.rows:
            if row.id in ids:
                raise ValueError(f"row id {row.id!r} used twice")
            ids.add(row.id)
            key = (row.section, row.model, row.format, row.engine, tuple(sorted(row.conditions.items())),
                   tuple(sorted(row.scale.items())))
            if key in configurations:
                raise ValueError(f"row {row.id!r} repeats the configuration of another row")
            configurations.add(key)
        missing = [t for t in TABLES if not any(r.table == t for r in self.rows)]
        if missing:
            raise ValueError(f"no rows for Table {', '.join(missing)}")
        return self

    def section_rows(self, section: Section) -> list[PublishedRow]:
        return [row for row in self.rows if row.section == section]

    @property
    def sections(self) -> list[Section]:
        return [s for s in MEASURES if self.section_rows(s)]


def _where(loc: tuple[Any, ...], data: Any) -> str:
    """`rows[12] (V/llamacpp-qwen7b-F16).values[1]` from a pydantic error location."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = ""
            if isinstance(node, list) and 0 <= item < len(node) and isinstance(node[item], dict):
                label = f" ({node[item]['id']})" if "id" in node[item] else ""
            parts.append(f"[{item}]{label}")
        else:
            parts.append(("." if parts else "") + str(item))
        node = node[item] if isinstance(node, (list, dict)) and _has(node, item) else None
    return "".join(parts) or "(top level)"


def _has(node: Any, item: Any) -> bool:
    return (isinstance(node, list) and isinstance(item, int) and 0 <= item < len(node)) or (
        isinstance(node, dict) and item in node)


def parse_reference(data: Any, origin: str) -> Reference:
    """Validate parsed YAML; a ConfigError names the file, the entry and what is wrong with it."""
    return validated(Reference, data, origin, _where, "fix that entry of the published values")


def load_reference(name: str = "paper", path: Path | None = None) -> Reference:
    """The packaged reference `name` (kit/compare/paper.yaml), or the YAML file at `path`."""
    if path is None and name not in REFERENCES:
        raise ConfigError(f"unknown reference {name!r}", f"use one of: {', '.join(REFERENCES)}")
    return parse_reference(*read_yaml("kit.compare", REFERENCES.get(name, ""), path, "reference"))
