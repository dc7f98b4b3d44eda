"""Each protocol kind is one package, kit/protocols/<kind>/, reached from outside through the one registry
(kit.protocols.kinds), and the layers around the kinds point one way: the kinds import nothing that
reads or shows their results across runs, and what runs an engine knows no kind. Imports inside functions
count."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from kit.protocols import kinds
from tests.source_trees import syntax_tree

KIT = Path(__file__).resolve().parents[2] / "kit"
ABOVE_PROTOCOLS = ("kit.analysis", "kit.compare", "kit.bundle", "kit.tui", "kit.app.console", "kit.cli", "kit.run.runner",
                   "kit.replay", "kit.importers", "kit.app.check", "kit.app.doctor")
# modules outside a kind's package that import one of its modules, and why (the registry aside)
REACHES_IN = {
    "kit/analysis/bridge_findings.py": {"reset"},  # the bridge's Table IV counts reuse the kind's own counts
    "kit/analysis/findings.py": {"harness"},  # the harness's report values per run
    "kit/analysis/grid_findings.py": {"grid"},  # counts from the grid's own results
    "kit/compare/evidence.py": {"reset"},  # Table IV's evidence of a run not analysed: its reset table, typed
    "kit/compare/remedy.py": {"remedy"},  # kit compare holds a remedy table's fixed arms against the paper, typed
    "kit/importers/determinism_harness.py": {"harness"},  # the importer makes the harness kind's run folders
    "kit/bundle/imported.py": {"harness"},  # kit verify makes an imported run's records again by the import's rule
    "kit/protocols/ladder/protocol.py": {"sweep"},  # the ladder makes its L5 formats the sweep's way (formats.py)
    "kit/atlas/bisect.py": {"ladder"},  # `kit bisect --rung` accepts the ladder's rung names
    "kit/atlas/bisect_steps.py": {"ladder"},  # and reads a rung's verdict from the ladder's results, typed
    "kit/protocols/remedy/protocol.py": {"reset"},  # the remedy's arms run the reset session
    "kit/protocols/remedy/results.py": {"reset"},  # and count Tables IV and VII with the reset kind's own counts
}


def _module(path: Path) -> str:
    parts = path.relative_to(KIT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def imported(path: Path) -> frozenset[str]:
    """Every kit module a file imports, anywhere in it (`from kit.a import b` counts kit.a and kit.a.b)."""
    found: set[str] = set()
    for node in ast.walk(syntax_tree(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(name for name in found if name == "kit" or name.startswith("kit."))


def _files(*places: str) -> list[Path]:
    return [path for place in places for path in
            ([KIT / place] if place.endswith(".py") else sorted((KIT / place).rglob("*.py")))]


def test_every_kind_package_is_registered_and_every_kind_the_kit_ships_is_a_package():
    packages = {path.parent.name for path in (KIT / "protocols").glob("*/protocol.py")}
    assert set(kinds.KINDS.shipped) == packages
    assert all(module == f"kit.protocols.{name}.protocol" for name, module in kinds.KINDS.shipped.items())


def test_every_kind_is_a_package_that_registers_itself():
    for name in kinds.KINDS.shipped:
        kind = kinds.KINDS[name]
        package = KIT / "protocols" / name
        assert {"__init__.py", "protocol.py", "results.py", "view.py"} <= {p.name for p in package.glob("*.py")}
        assert kind.model.__module__ == f"kit.protocols.{name}.protocol"
        assert kind.results.__module__.startswith(f"kit.protocols.{name}.")
        assert kind.render.target.startswith(f"kit.protocols.{name}.view:")


def test_the_kinds_import_no_layer_above_them():
    upward = sorted(f"{path.relative_to(KIT.parent)} imports {name}" for path in _files("protocols")
                    for name in imported(path) if name.startswith(ABOVE_PROTOCOLS))
    assert upward == []


def test_what_runs_an_engine_or_writes_a_record_knows_no_protocol_kind():
    found = sorted(f"{path.relative_to(KIT.parent)} imports {name}"
                   for path in _files("launch", "engines", "record")
                   for name in imported(path) if name.startswith("kit.protocols"))
    assert found == []


def test_a_kinds_modules_are_reached_from_outside_its_package_only_where_listed():
    reached: dict[str, set[str]] = {}
    for path in _files("."):
        module, where = _module(path), path.relative_to(KIT.parent).as_posix()
        if module == "kit.protocols.kinds":
            continue
        for name in imported(path):
            parts = name.split(".")
            if len(parts) >= 3 and parts[:2] == ["kit", "protocols"] and parts[2] in kinds.KINDS \
                    and not module.startswith(f"kit.protocols.{parts[2]}"):
                reached.setdefault(where, set()).add(parts[2])
    assert reached == REACHES_IN
