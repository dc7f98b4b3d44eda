"""What a protocol kind is: everything the kit needs to know about one kind, registered in one place.

A kind is the value of `protocol:` in a protocol file (`reset`, `grid`, ...); a protocol's own name is
its file's (`sentinel.yaml` is a protocol named `sentinel` of kind `grid`). Everything about a kind lives
in its package `kit/protocols/<kind>/`, whose `protocol.py` ends with one `KIND = Kind(...)` that says:

- `model`: the pydantic model its files validate against (a `spec.ProtocolBase` with
  `protocol: Literal["<name>"]`);
- `prepare(protocol, inputs) -> Prepared`: the plan shown before the run and kept in the manifest;
- `run(protocol, prepared, ctx)`: drives the engines; every request becomes one record in
  `records/<pass>.jsonl` (`kit.record.files.RecordWriter`), every pass ends OK or VOID in the manifest;
- `results(run_dir) -> Results`: reads the run folder's files only, writes `results/` through the kind's typed
  model and returns that model (its `table` is `table`; its JSON values, `to_json()`, are what was written, with
  the results files in `files`).
  The runner calls it at the end of a run and `kit verify` calls it again on the bundle's raw records
  (`kit.bundle.recompute`), so both see the same numbers;
- `results_model`: that model, a `kit.protocols.results_model.Results` subclass (in its results.py): every
  reader of a table (the console, the launcher, `kit analyze`, the bundle's headline) parses it once, with
  `Kind.read(table)`, and hands the model to the functions below (one-line `NotResults` for a table of
  another shape);
- `render(results)`: the typed table as `kit run` prints it and the launcher's results screen shows it
  (`Lazy("kit.protocols.<name>.view:<function>")`); `note(run_dir, results)`: a line printed under it, or None;
  `plot_rows(results)`: the rows the launcher's results screen plots as divergence rates with intervals;
- `headline(results, h)`: reads its typed table into `h`, a `kit.protocols.headline.Headline` (the verdict,
  the controls and its table a reviewer reads first in `kit show` and the bundle's report);
- `record`: the record class its passes write (a `kit.record.model.RequestRecord` with a `TITLE`, the heading of
  its table in docs/records.md); a kind whose passes write another kind's records names that kind's class and
  comes after it in the registry (kit.protocols.kinds.record_classes: a BFCL pass writes the grid's);
- `engine_rules`: engine name -> rule, for the engines that run only the kinds that name them
  (kit.engines.registry `kinds_opt_in`, vLLM): the kind runs on such an engine only if it names it, and its
  rule `(protocol, starts_servers)` raises ConfigError for what that engine cannot serve in this protocol
  (`starts_servers`: the kit starts the servers, rather than reaching them by --engine-url). Whether a kind
  runs on an engine is asked in one place: kit.protocols.kinds.serves;
- `launcher`: what the launcher's catalog says about it and how its setup form sizes a run (`Launcher`);
- `analysis`: how `kit analyze` reads a run folder of this kind (`Analysis`), or None if it does not;
- `from_files`: False for a kind whose run folders are imported (`harness`): protocol files cannot ask for it.
- `arm_fixes(protocol)`: the fixes of each of its arms (kit.launch.llamacpp.fixes), or None where it has none: the
  runner then refuses `--fix` for it and checks every arm's fixes against the run's engine before writing;
- `imported_from`: the importer that makes its run folders (`determinism-harness`), or None: `kit verify`
  then holds the files an imported run folder keeps against its manifest (kit.bundle.imported).

How to add a kind
-----------------
1. Make the package `kit/protocols/<name>/`: `protocol.py` (the model, `prepare`, `run` and
   `KIND = Kind(...)` at its bottom), `results.py` (its `Results` model and `results(run_dir)`), `view.py`
   (the renderer, reading the model) and an
   `__init__.py` that imports nothing (a caller that only reads the kind's records or results then loads
   none of the machinery `protocol.py` runs with). Keep registering cheap: name the renderer with
   `Lazy("kit.protocols.<name>.view:<function>")`, and import `kit.stats` inside the functions that
   compute (`tests/test_import_cost.py` keeps `import kit.run.runner` free of scipy, matplotlib, textual, ...).
2. Register it: add `"<name>": "kit.protocols.<name>.protocol"` to `KINDS` in `kit/protocols/kinds.py`, the one
   registry of kinds (lazy: the module is imported when its kind is first looked up). A package outside
   the kit registers its kinds instead with an entry point of the group `kit.kinds` in its own
   pyproject.toml, `[project.entry-points."kit.kinds"]` `<name> = "<its package>"`, and touches no file of
   the kit (docs/architecture.md, "How to add").
3. Add `protocols/<file>.yaml` with `protocol: <name>` (the file's own name is the protocol's name; runs
   and records carry both: docs/protocols.md).
The record classes, docs/records.md's tables (`python -m kit.protocols.record_docs`) and the tests' lists of
kinds come from the registry. `tests/protocols/test_kinds.py` shows a toy kind going through all of it;
`tests/protocols/test_add_a_kind.py` adds one from a package of its own and runs `kit run`, `kit analyze`,
`kit bundle`, `kit verify` and `kit show` on it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.protocols.procedure import Prepared, RunContext, RunInputs
from kit.protocols.results_model import JsonObject, Results
from kit.protocols.spec import Overrides, ProtocolBase
from kit.record.model import RequestRecord

FileData = dict[str, Any]  # a protocol file as YAML reads it, before validation
Table = JsonObject  # a results table as `results` returns it (its JSON values, as written)
PlotRow = tuple[str, int, int, float, float]  # label, diverged, total, 95% interval low and high


@dataclass(frozen=True)
class Lazy:
    """A function named "module:name", imported on its first call: a kind names its console renderer
    this way, so registering it loads no terminal library."""

    target: str

    def resolve(self) -> Callable[..., Any]:
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


@dataclass(frozen=True)
class Number:
    """A number the launcher's setup form asks for: its label and hint, the protocol key it overrides
    (dotted, e.g. `workload.items`; None: shown but overriding nothing), its default where the file
    has no value (the model's default) or how to read it off the file, and the highest value allowed
    (the lowest is 1)."""

    label: str
    key: str | None
    default: int | Callable[[FileData], int]
    high: int = 100_000
    placeholder: str = ""

    def value(self, data: FileData) -> int:
        """The file's own number: the form's starting value."""
        if callable(self.default):
            return self.default(data)
        if self.key is None:
            return self.default
        node: Any = data
        for part in self.key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return self.default if node is None else node

    def override(self, number: int) -> Overrides:
        """`{"workload": {"items": 7}}` for key `workload.items`."""
        if self.key is None:
            raise ValueError(f"the form's {self.label!r} overrides no protocol key")
        *outer, last = self.key.split(".")
        nested: Overrides = {last: number}
        for part in reversed(outer):
            nested = {part: nested}
        return nested


@dataclass(frozen=True)
class CpuEstimate:
    """A rough duration of a protocol file on the embedded CPU engine (two cores), stated before anything runs:
    what it counts ("16 requests") and how long; printed as "16 requests, about 40 s on a CPU"."""

    what: str
    seconds: float

    def __str__(self) -> str:
        return f"{self.what}, about {rough_duration(self.seconds)} on a CPU"


@dataclass(frozen=True)
class Launcher:
    """What the launcher's catalog says about a kind (what it measures, what it needs, a rough CPU
    duration from the file) and the numbers its setup form asks for: the run's size, and where the kind
    has them, its repeats (sessions, histories) and an answer length."""

    measures: str
    needs: str
    estimate: Callable[[FileData], CpuEstimate] | None  # "16 requests, about 40 s on a CPU"; None: duration unknown
    size: Number
    repeats: Number | None = None
    max_tokens: Number | None = None
    started_engine_only: bool = False  # True: only an engine the kit starts itself (not --engine-url)

    def numbers(self) -> dict[str, Number]:
        """The form's numbers by the Setup field that holds them (size, repeats, max_tokens)."""
        found = {"size": self.size, "repeats": self.repeats, "max_tokens": self.max_tokens}
        return {name: number for name, number in found.items() if number is not None}


@dataclass(frozen=True)
class Analysis:
    """How `kit analyze` reads a run folder of a kind (kit.analysis.collect): as a folder of the findings
    family `family` ("reset", "grid", "sweep" or "harness", kit.analysis.findings; a grid folder whose
    manifest carries `sweep` is a sweep cell). A run whose manifest lists `cells` is always read as one grid
    folder per cell; `family=None` says a folder of this kind is read only that way.

    A kind whose findings are its own results table names it `table` (family: the kind's name): a function
    of the run folder that reads it only and returns the table `results` would write. `kit analyze` keeps
    each run's table in findings.json under `kinds.<kind>` and prints it with the kind's `render`."""

    family: str | None
    table: Callable[[Path], Table] | None = None


@dataclass(frozen=True)
class Kind:
    """One protocol kind: its model, its procedure, its records, its results, its console view, the engines
    it runs on, its launcher entry and its analysis entry. See the module docstring for what each must do."""

    name: str
    model: type[ProtocolBase]
    prepare: Callable[[Any, RunInputs], Prepared]
    run: Callable[[Any, Prepared, RunContext], None]
    results: Callable[[Path], Results | Table]  # its typed table (a kind not yet typed: the table's JSON values)
    table: str  # the `"table"` name of what `results` returns
    render: Callable[[Results], Any]  # a rich renderable
    launcher: Launcher
    analysis: Analysis | None
    record: type[RequestRecord] = RequestRecord  # the record class its passes write (kit.record.model)
    # engines that run only the kinds naming them (vLLM) -> what each refuses in one of its protocols (kinds.serves)
    engine_rules: Mapping[str, Callable[[Any, bool], None]] = field(default_factory=dict)
    note: Callable[[Path, Results], str | None] | None = None  # a line under its rendered table, or None
    plot_rows: Callable[[Results], list[PlotRow]] | None = None  # its rows of the launcher's divergence plot
    from_files: bool = True  # False: its run folders are imported (kit import), never run from a protocol file
    imported_from: str | None = None  # its run folders' importer (`kit import NAME`): kit verify holds the files
    # they keep in records/imported/ against the manifest and makes their records again (kit.bundle.imported)
    headline: Callable[[Results, Any], None] | None = None  # reads its table into a bundle's Headline (view.py)
    # its arms' fixes (remedy: kit.launch.llamacpp.fixes.Applied per arm), or None: a kind with arms of its own refuses
    # `kit run --fix`, and each arm's fixes are checked against the run's engine before the run folder exists
    arm_fixes: Callable[[Any], list[Any]] | None = None
    units: bool = False  # True: its procedure hands its units to ctx.executor.map, so it runs on Ray (docs/ray.md)
    results_model: type[Results] = Results  # its results table's model (a kind without one: the shared fields)

    def read(self, table: Results | Table, source: str = "results table") -> Results:
        """`table` (as `results` returned it, or as read from a file) as this kind's model, parsed once for its
        view, note, plot rows and headline: NotResults naming `source` and the field of a table of another shape."""
        return self.results_model.of(table, source)


def rough_duration(seconds: float) -> str:
    """A duration as the launcher states estimates: "40 s", "12 min", "3 h"."""
    if seconds < 90:
        return f"{max(1, round(seconds / 10) * 10):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"
