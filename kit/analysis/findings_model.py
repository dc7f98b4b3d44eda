"""findings.json as one typed model: `kit analyze` writes it, `kit compare`, the tables, the figures and
the bundle read it. This module is the only place that reads or writes the file's shape.

Every section is a pydantic model whose fields are declared in the order `kit analyze` writes them, and
a file is written with the fields that were set (`model_dump(exclude_unset=True)`), so the bytes are
those the dict-based writer of earlier releases produced for the same records: the bundle's `kit verify`
recomputes findings.json and compares it with the bundled one. Each model keeps keys it does not
declare (``extra="allow"``): a findings.json of an earlier or later kit reads and writes back unchanged,
and a key a release adds (see kit.bundle.recompute_analysis.ADDED_SINCE) may be absent.

Numbers are ``int | float`` (pydantic's smart union keeps each one's JSON type: 0 stays 0, 0.0 stays 0.0).
The statistics blocks (kit.stats ``to_json()``: bootstrap, permutation test, intervals) stay plain JSON
objects: their keys are the stats dataclasses'. The rows of Tables III–VII are kept as written and read
through typed views (`TableIIIRow` ... `TableVIIRow`, `Row.of(table)`): the tables, `kit compare` and the
bundle read a row's declared fields, so a row of another shape is refused where it is read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Self, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kit.core.atomic_file import write_text_atomic

SCHEMA = "kit.findings/1"
FILE = "findings.json"  # in the folder `kit analyze --out` names (default: analysis/ inside the first run)
TABLE_NAMES = ("III", "IV", "V", "VI", "VII")

Number = Union[int, float]
JsonObject = dict[str, Any]


class Section(BaseModel):
    """A part of findings.json: declared keys typed, any other key kept as read."""

    model_config = ConfigDict(extra="allow", validate_assignment=False)

    def to_json(self) -> JsonObject:
        """The section as plain JSON values, with exactly the keys that were set or read."""
        return self.model_dump(mode="python", exclude_unset=True)


class SettingsEntry(Section):
    """kit.analysis.findings.Settings as written (``workers``: the analyst's machine, not compared)."""

    seed: int
    block_bootstrap_replicates: int
    sweep_replicates: int
    cluster_replicates: int
    workers: int = 0
    harness_thresholds: list[Number] | None = None  # absent in findings of kits before harness imports


class RunEntry(Section):
    """One run folder analysed (a sweep cell `run/cell` counts as its run)."""

    run: str
    path: str | None = None
    kind: str
    format: str | None = None
    model: str | None = None
    engine: str | None = None  # absent in older findings
    prompt_cache: str | None = None  # absent in older findings
    sweep: JsonObject | None = None  # {"format", "history"} for a sweep cell
    ok_passes: list[str] = []


class Table(Section):
    """One of Tables III–VII: its rows, kept as written (their typed views below: `TableIIIRow.of(table)`),
    and why rows are missing."""

    rows: list[JsonObject] = []
    skipped: list[JsonObject] = []


class Row(BaseModel):
    """A typed view of one row of Tables III–VII, as the tables, `kit compare` and the bundle read it: the keys
    `kit analyze` writes that readers rely on are declared (those every row has without a default); any other
    key is kept. The file keeps the row as written: a view is read, never written back."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @classmethod
    def of(cls, table: Table, strict: bool | None = None) -> list[Self]:
        """The table's rows read as this view; ValidationError (a ValueError) naming a row that is not one.
        `strict`: no value converted to its field's type (a count written 3.0 or "3" is refused, not read as 3)."""
        return [cls.model_validate(row, strict=strict) for row in table.rows]


class TableIIIRow(Row):
    """Run-to-run cache-on divergence of one grid run (kit.analysis.grid_findings.table_iii)."""

    model: str
    format: str
    prompt_cache: str
    order: str
    run: str
    k: int
    n: Number
    rate: Number
    lo: Number
    hi: Number


class TableIVRow(Row):
    """One reset run: per-session counts (lists, one per OK session) and the items identical in all of them
    (kit.analysis.bridge_findings.table_iv_row)."""

    run: str
    model: str
    format: str
    sessions: list[Any]
    items: list[Number]
    recompute_reproduces: list[Number]
    hit_reproduces: list[Number]
    paths_differ: list[Number]
    cache_caused: list[Number] | None = None  # items whose paths differ while each reproduced (absent before)
    across_sessions: JsonObject


class TableVRow(Row):
    """Episode-level divergence of one grid run: path (cache on vs off) and, where run, each arm's run-to-run
    (`off_*`, `on_*`), each k, n, rate, lo, hi (kit.analysis.grid_findings.table_v)."""

    engine: str
    model: str
    format: str
    n: Number
    prompt_cache: str
    run: str
    compared_on: str | None = None  # absent in findings of earlier kits
    path_k: Number
    path_n: Number
    path_rate: Number
    path_lo: Number
    path_hi: Number
    off_k: Number | None = None
    off_n: Number | None = None
    off_rate: Number | None = None
    off_lo: Number | None = None
    off_hi: Number | None = None
    on_k: Number | None = None
    on_n: Number | None = None
    on_rate: Number | None = None
    on_lo: Number | None = None
    on_hi: Number | None = None


class TableVIRow(Row):
    """One weight format of a replicated sweep (kit.analysis.sweep_findings.table_vi)."""

    format: str
    canonical_k: int | None = None
    canonical_n: int | None = None
    canonical_rate: Number | None = None
    mean: Number
    sd: Number
    min: Number
    max: Number
    lo: Number
    hi: Number
    is_reference: bool
    diff: Number  # against the reference format (the reference's own: 0)
    diff_lo: Number
    diff_hi: Number
    above_reference: Number
    histories: Number
    episodes: Number
    diverged_per_history: list[Any] = []


class TableVIIRow(Row):
    """One bridge session (kit.analysis.bridge_findings.table_vii_row): path determinism, cache-attributable
    path divergence, and correctness with the exact McNemar test (or why correctness was not computed)."""

    run: str
    session: str | None = None
    model: str
    format: str
    source: str | None = None
    n: Number
    recompute_reproduces: Number
    hit_reproduces: Number
    attributable_items: Number | None = None
    paths_differ: Number | None = None
    path_divergence: JsonObject | None = None
    correctness_skipped: str | None = None
    correct_recompute: Number | None = None
    correct_hit: Number | None = None
    flips: Number | None = None
    mcnemar: JsonObject | None = None


class MechanismBlock(Section):
    """The mechanism findings of one source (grid, sweep or reset): kit.analysis.mechanism.summarize."""

    formats: list[str] = []
    near_tie_below: Number | None = None
    per_format: dict[str, JsonObject] = {}
    top_k: Union[int, list[int], None] = None
    skipped: str | None = None
    near_tie_share: JsonObject | None = None
    delta_margin_mean: JsonObject | None = None
    skipped_runs: list[JsonObject] = []


class GridRun(Section):
    """One grid run's comparisons (kit.analysis.grid_findings.grid_run_findings)."""

    run: str
    engine: str | None = None
    model: str | None = None
    format: str | None = None
    cache_ram: Any = None
    passes: list[str] = []
    top_logprobs: int | None = None
    comparisons: dict[str, JsonObject] = {}
    outcomes: Any = None
    flips: Any = None


class GridTrend(Section):
    """The trend over formats per model from grid runs (Table V's logistic fits)."""

    models: dict[str, JsonObject] = {}
    skipped: list[JsonObject] = []


class SweepCell(Section):
    """One sweep folder's path divergence: its cache-on pass against its cache-off reference."""

    run: str | None = None
    skipped: str | None = None  # why the cell has no divergence (then nothing below is set)
    passes: list[str] = []
    indicators: list[int] = []
    diverged: int = 0
    n: int = 0
    first_request_index: list[int] = []


class SweepFindings(Section):
    """Table VI and Fig. 2 from the sweep cells (kit.analysis.sweep_findings)."""

    formats: list[str] = []
    histories: list[int] = []
    cells: dict[str, SweepCell] = {}
    skipped: list[JsonObject] = []
    canonical: dict[str, JsonObject] = {}
    skipped_table: str | None = None  # why there is no two-way bootstrap (then nothing below is set)
    random_histories: list[int] = []
    episodes: int = 0
    scores: list[Number] = []
    per_history_rates: dict[str, list[Number]] = {}
    per_history_counts: dict[str, list[int]] = {}
    episodes_changing_status: dict[str, int] = {}
    bootstrap: JsonObject = {}
    permutation: JsonObject = {}


class Findings(Section):
    """findings.json (schema kit.findings/1)."""

    schema_: str = Field(SCHEMA, alias="schema")
    created: str | None = None
    settings: SettingsEntry | None = None  # always written by `kit analyze`; `kit compare` needs none
    runs: list[RunEntry] = []
    skipped_inputs: list[JsonObject] = []
    excluded_passes: list[JsonObject] = []
    tables: dict[str, Table] = {}
    mechanism: dict[str, MechanismBlock] = {}
    comparability: Any = None
    grid: list[GridRun] | None = None
    grid_trend: GridTrend | None = None
    sweep: SweepFindings | None = None
    harness: list[JsonObject] | None = None
    kinds: dict[str, list[JsonObject]] | None = None  # per kind whose findings are its own table (Analysis.table)
    files: dict[str, Any] | None = None
    timings_seconds: dict[str, Number] | None = None

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def to_json(self) -> JsonObject:
        return self.model_dump(mode="python", exclude_unset=True, by_alias=True)

    def table(self, name: str) -> Table:
        """Table `name`; an empty one when these findings have none."""
        return self.tables.get(name) or Table()

    def runs_of_kind(self, kind: str) -> list[RunEntry]:
        return [r for r in self.runs if r.kind == kind]

    def text(self) -> str:
        """findings.json's text: indented JSON, non-ASCII kept, a final newline (the bytes earlier releases
        wrote, which `kit verify` recomputes)."""
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"

    def write(self, path: Path) -> None:
        """Replace `path` with these findings, atomically."""
        write_text_atomic(path, self.text())


ROW_VIEWS: dict[str, type[Row]] = {"III": TableIIIRow, "IV": TableIVRow, "V": TableVRow, "VI": TableVIRow,
                                   "VII": TableVIIRow}  # each table's typed row view, by table name


class NotFindings(ValueError):
    """A JSON value that is not a findings.json of this kit's schema; the message says what is wrong."""


def from_json(data: Any) -> Findings:
    """Findings from a parsed findings.json; NotFindings (one line) when it has not the shape."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        schema = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise NotFindings(f"not a kit findings file (schema {schema!r}, expected {SCHEMA})")
    try:
        return Findings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the top level"
        raise NotFindings(f"{where}: {first['msg']} ({exc.error_count()} problem(s))") from None


def read(path: Path) -> Findings:
    """findings.json at `path`; OSError when it cannot be read, NotFindings when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:
        raise NotFindings(f"not valid JSON ({type(exc).__name__})") from None
    return from_json(data)
