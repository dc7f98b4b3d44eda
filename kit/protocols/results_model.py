"""A kind's results table as one typed model: its results module builds it and writes it
(results/<name>.json), and its view, headline, plot rows, the bundle's headline and report, `kit verify`'s
recompute, `kit compare` and the launcher read it through the same model, never by string key.

Each kind's table is a `Results` subclass (in its package's results.py) whose fields are declared in the order
its results module writes them; a table is written with the fields that were set
(`model_dump(exclude_unset=True)`), so the bytes are those the dict-based writers of earlier releases produced:
`kit verify` recomputes a bundled run's results and compares them byte for byte
(tests/protocols/test_results_model.py holds the fixtures' files against their models). Every model keeps keys it
does not declare (``extra="allow"``): a table of an earlier or later kit reads back unchanged.

A table read from a file (a bundle, a run folder) is untrusted: `Results.of(data, source)` refuses a wrong shape
with one line naming the file and the field (`NotResults`), never a traceback. What all kinds share is here: the
table's name, run and files, a rate's interval, an exact McNemar test, and a comparison of two passes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Self, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kit.core.errors import ConfigError
from kit.core.packaged_yaml import validated

Number = Union[int, float]  # pydantic's smart union keeps each number's JSON type: 0 stays 0, 0.0 stays 0.0
Count = Annotated[int, Field(ge=0)]  # a count: an int, never a bool, a string or a float that reads as one
JsonObject = dict[str, Any]  # a block kept as written (statistics a kind writes but nothing reads field by field)


class NotResults(ConfigError):
    """A results table that is not of its kind's shape: one line naming the file and the field."""


def _place(loc: tuple[object, ...], _data: object) -> str:
    return ".".join(str(part) for part in loc) or "the top level"


def field_alias(name: str) -> Any:
    """A field written under a Python keyword (`pass`): `pass_: str = field_alias("pass")`."""
    return Field(alias=name)


class Part(BaseModel):
    """A part of a results table: declared keys typed, in the order written; any other key kept as read. Strict:
    a value of another JSON type is refused, never converted (`true` is no count, `"3"` no number)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, strict=True)

    def to_json(self) -> JsonObject:
        """The part as plain JSON values, with exactly the keys that were set or read, in their written order."""
        return self.model_dump(mode="python", exclude_unset=True, by_alias=True)

    @classmethod
    def of(cls, data: object, source: str = "results table") -> Self:
        """`data` (a parsed JSON object, or already this model) as this model; NotResults naming `source` and
        the first field of the wrong shape otherwise."""
        if isinstance(data, cls):
            return data
        return validated(cls, data, source, _place, "the file is not one this kit's results module wrote",
                         error=NotResults)


class Results(Part):
    """What every kind's results table starts with: its `table` name (one per kind: kit.protocols.kinds.for_table),
    the run it was computed from and the results files it was written to (name -> path in the run folder)."""

    table: str
    run_id: str | None = None
    files: dict[str, str] = {}

    def not_ok(self) -> list[tuple[str, str, str]]:
        """(name, status, reason) of each session or pass of the run that did not end OK and says why (the
        launcher's status lines); none where the kind's table lists none."""
        return []


def said_not_ok(rows: Iterable[tuple[str, str | None, str | None]]) -> list[tuple[str, str, str]]:
    """Of (name, status, reason) rows, those that did not end OK and say why (`Results.not_ok`)."""
    return [(name, status, reason) for name, status, reason in rows if status is not None and status != "OK" and reason]


class Interval(Part):
    """A rate k/n with its 95% interval (kit.stats.RateInterval.to_json())."""

    rate: Number | None = None
    lo: Number | None = None
    hi: Number | None = None
    k: Count | None = None
    n: Count | None = None
    method: str | None = None


class McNemar(Part):
    """An exact McNemar test (kit.stats.McNemarResult.to_json()): the discordant counts and the two-sided p."""

    b: Count
    c: Count
    p: Number | None = None


class Identity(Part):
    """Exact identity of two passes: episodes, log-probability records and their values (RQ1)."""

    episodes: Count
    episodes_identical: Count
    logprob_records: Count
    tokens_identical: Count
    logprobs_identical: Count


class EpisodeVerdict(Part):
    """Whether one episode diverged between two passes, how, and where first (kit.record.divergence)."""

    diverged: bool
    kind: str | None = None
    request_index: Count | None = None
    token_index: Count | None = None


class Comparison(Part):
    """Episode divergence of one pass against another (grid kinds), or why they were not compared (`skipped`).
    The fields of both writers (kit.protocols.grid.results, kit.protocols.passes) in the order they write them."""

    passes: list[str] = []
    skipped: str | None = None
    compared_on: str | None = None  # set where the comparison was made on token strings (kit.record.divergence)
    episodes: Count = 0
    diverged: Count = 0
    rate: Number | None = None
    interval: Interval | None = None
    kinds: dict[str, Count] = {}
    status: dict[str, Count] = {}  # episode -> 1 where it diverged, else 0 (kit.protocols.passes)
    first_request_index: list[Count | None] = []
    first_token_index: list[Count] = []
    per_episode: dict[str, EpisodeVerdict] = {}
    identity: Identity | None = None

    @model_validator(mode="after")
    def _counted(self) -> Self:
        if self.compared and not {"episodes", "diverged"} <= self.model_fields_set:
            raise ValueError("a comparison made needs its episodes and diverged counts")
        return self

    @property
    def compared(self) -> bool:
        """False where the two passes were not compared (one not OK)."""
        return "skipped" not in self.model_fields_set


class VoidPass(Part):
    """A pass not analysed (not OK, or its records missing): its status and why."""

    pass_: str = field_alias("pass")
    status: str | None = None
    reason: str | None = None

