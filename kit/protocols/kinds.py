"""The protocol kinds the kit knows (runs, and imports: `harness`): one package each, kit/protocols/<kind>/,
whose registration (`KIND`, kit.protocols.kind) is listed once here: `KINDS`, the one registry of kinds.
A package outside the kit adds its own kinds under the entry-point group `kit.kinds` (`ENTRY_POINTS`), each
naming the module that holds its `KIND`: `toy = "toy_kind"` in its pyproject.toml's
`[project.entry-points."kit.kinds"]` (docs/architecture.md, "How to add").
The registry (kit.core.plugs.Registry, the one kind of registry the kit has) is lazy: it names each kind's `protocol` module (whose package imports nothing, so reading a kind's
records or results loads none of its running machinery), and imports it when its kind is first looked up,
so `kit run reset` loads the reset kind only (tests/test_import_cost.py), and reads the entry points only
when it is asked for a name the kit does not ship, or for all its names. Its names cost nothing; going
through its kinds (`values()`, `items()`) loads them all.

Everything that depends on a kind looks it up in `KINDS`: loading protocol files, the runner (prepare,
run, and the results at the end of a run), whether a kind runs on an engine (`serves`, `refuse_unserved`),
`kit analyze` (kit.analysis.collect), `kit verify` (kit.bundle.recompute), the console (kit.app.console.results_view,
results_note), the launcher (kit.tui.catalog, kit.tui.form, its divergence plot), the record classes
(`record_classes`: what a record is checked against, and docs/records.md's tables). A protocol file's own
name (`sentinel`) and its kind (`grid`) differ: docs/protocols.md lists them. To add a kind, see
kit/protocols/kind.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from kit.core.errors import ConfigError, KitError
from kit.core.plugs import Plug, Registry
from kit.engines.registry import DEFAULT, ENGINES, EngineKind
from kit.record.manifest import Manifest
from kit.record.model import RequestRecord, validate
from kit.protocols import spec
from kit.protocols.kind import Kind
from kit.protocols.results_model import Results

ENTRY_POINTS = "kit.kinds"  # the entry-point group of the kinds a package outside the kit registers


KIND_PLUG = Plug(Kind, "kind", ENTRY_POINTS, "KIND", "Kind(name={name!r}, ...)` (kit.protocols.kind)")

KINDS: Registry[Kind] = Registry(KIND_PLUG, {
    "reset": "kit.protocols.reset.protocol",
    "grid": "kit.protocols.grid.protocol",
    "pinning": "kit.protocols.pinning.protocol",
    "sweep": "kit.protocols.sweep.protocol",
    "flag_order": "kit.protocols.flag_order.protocol",
    "harness": "kit.protocols.harness.protocol",
    "ladder": "kit.protocols.ladder.protocol",
    "watch": "kit.protocols.watch.protocol",
    "remedy": "kit.protocols.remedy.protocol",
})


def record_classes(names: Iterable[str] | None = None) -> dict[str, type[RequestRecord]]:
    """The record class of each procedure, by the `protocol` its records carry: each kind's `record`, under
    the name of the first kind (in registry order) that registers it. A kind whose passes write another kind's
    records registers that kind's class and comes after it in `KINDS`: every BFCL pass writes `grid` records,
    whatever its kind (`sweep`, `flag_order`), and a remedy's arms `reset` ones. `names`: of these kinds only
    (docs/records.md: `KINDS.shipped`); by default of every kind (which loads them all)."""
    classes: dict[str, type[RequestRecord]] = {}
    for name in KINDS if names is None else names:
        record = KINDS[name].record
        if record not in classes.values():
            classes[name] = record
    return classes


def validate_record(record: dict[str, Any]) -> RequestRecord:
    """Check a record (as read) against the class of its procedure (`protocol`, `record_classes`; one no kind
    registers: `RequestRecord`). Raises pydantic's ValidationError naming each field that does not fit."""
    return validate(record, record_classes().get(str(record.get("protocol")), RequestRecord))


class _FileModels(Mapping[str, type[spec.ProtocolBase]]):
    """Kind name -> the model its protocol files validate against, for the kinds a protocol file can ask for
    (not `harness`, whose run folders are imported): a file's own kind is looked up alone; listing them (the
    error for an unknown kind) loads them all."""

    def __getitem__(self, name: str) -> type[spec.ProtocolBase]:
        kind = KINDS[name]
        if not kind.from_files:
            raise KeyError(name)
        return kind.model

    def __iter__(self) -> Iterator[str]:
        return (name for name, kind in KINDS.items() if kind.from_files)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def models() -> Mapping[str, type[spec.ProtocolBase]]:
    """The models protocol files validate against: every kind a protocol file can ask for (not `harness`,
    whose run folders are imported)."""
    return _FileModels()


def load(name_or_path: str, overrides: spec.Overrides | None = None) -> tuple[spec.ProtocolBase, Path, str]:
    """Load and validate a protocol of any known kind: (protocol, file, sha256 of the file)."""
    return spec.load(name_or_path, models(), overrides)


def parse_text(text: str, source: str, overrides: spec.Overrides | None = None) -> spec.ProtocolBase:
    """Validate protocol YAML held as text (e.g. the copy a run folder's manifest keeps)."""
    return spec.parse(spec.merge(yaml.safe_load(text), overrides or {}), source, models())


def of(protocol: spec.ProtocolBase) -> Kind:
    """The kind of a validated protocol."""
    return KINDS[protocol.protocol]


def named(name: object, where: str) -> Kind:
    """The kind a manifest names; `where` (the run folder) goes into the error if this kit has none such."""
    if not isinstance(name, str) or name not in KINDS:
        raise KitError(f"{where}: protocol kind {name!r} is not one this kit knows",
                       f"this kit knows {', '.join(KINDS)}; use the kit version that made the run")
    return KINDS[name]


def of_run(run_dir: Path) -> Kind:
    """The kind of a run folder, from its manifest: how `kit verify` reaches the entry the runner used
    (`of`) at the end of the run; `kit analyze` reaches it by `named` for each folder or cell it reads."""
    return named(Manifest.load(run_dir).run.protocol.kind, str(run_dir))


def serves(kind: Kind, engine: EngineKind) -> bool:
    """Whether `kit run --engine NAME` runs protocols of `kind` on `engine`, the one place this is asked: an engine
    that runs protocols runs every kind a protocol file can ask for, or where it runs only the kinds that name it
    (`kinds_opt_in`, vLLM), those whose `engine_rules` name it."""
    return engine.runs and kind.from_files and (not engine.kinds_opt_in or engine.name in kind.engine_rules)


def served_on(engine: EngineKind) -> list[str]:
    """The kinds `engine` serves (`serves`), in registry order; none where it runs none."""
    return [name for name, kind in KINDS.items() if serves(kind, engine)]


def refuse_unserved(protocol: spec.ProtocolBase, engine: EngineKind, *, starts_servers: bool) -> None:
    """What `engine` cannot serve, refused before the run folder exists: a kind it does not run (`kit check URL
    --kind NAME` covers pinning on a running server), and what the kind's own rule for the engine refuses."""
    kind = of(protocol)
    if not serves(kind, engine):
        served = served_on(engine)
        runs = f"it serves {', '.join(served[:-1])} and {served[-1]}" if len(served) > 1 else (
            f"it serves {served[0]}" if served else "it runs no protocols")
        default = ENGINES[DEFAULT]
        raise ConfigError(f"{kind.name} protocols do not run on {engine.label} ({runs}; `kit check URL --kind "
                          f"{engine.name}` checks a running server's cache states)",
                          f"drop --engine {engine.name} to run it on {default.label}")
    rule = kind.engine_rules.get(engine.name)
    if rule is not None:
        rule(protocol, starts_servers)


def for_table(table: object) -> Kind | None:
    """The kind whose `results` made this table (by its `"table"` name, one per kind; its model, or a JSON object as
    read), or None (anything else). The kinds already loaded are asked first: a run's own table at its end loads
    no other kind."""
    name = table.table if isinstance(table, Results) else table.get("table") if isinstance(table, dict) else None
    return next((kind for kind in KINDS.loaded() if kind.table == name), None) or next(
        (kind for kind in KINDS.values() if kind.table == name), None)
