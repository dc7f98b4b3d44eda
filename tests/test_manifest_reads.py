"""Every read of a run's manifest goes through its one reader (kit.record.manifest: `read`, which
`Manifest.load` and a bundle's readers use, and `inside`, the one check of a path it names): no other module
of kit/ parses manifest.json itself.

The modules are read with `ast`. A function (or a module's top level) that names the manifest file
(`RunPaths.MANIFEST`, `MANIFEST`, `RunPaths(...).manifest`, a literal "manifest.json") and also parses
something (json.loads, json.load, load_json, json_file, a pydantic model_validate) is a second reader: it
fails this test until it hands the bytes to kit.record.manifest.read. The harness's own side manifests
(`<run>.manifest.json`, kit.protocols.harness.files) are another file and do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path
from tests.source_trees import syntax_tree

REPO = Path(__file__).resolve().parents[1]
KIT = REPO / "kit"
THE_READER = "kit/record/manifest.py"
PARSERS = {"loads", "load", "load_json", "json_file", "model_validate", "model_validate_json"}


def _names_manifest(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "MANIFEST":
        return True
    if isinstance(node, ast.Name) and node.id == "MANIFEST":
        return True
    if isinstance(node, ast.Attribute) and node.attr == "manifest" and isinstance(node.value, ast.Call) \
            and isinstance(node.value.func, ast.Name) and node.value.func.id == "RunPaths":
        return True
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and (
        node.value == "manifest.json" or (node.value.endswith("/manifest.json") and " " not in node.value))


def _parses(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name in ("loads", "load"):  # json.loads / json.load, not any method called load
        return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "json"
    return name in PARSERS


def _own_nodes(scope: ast.AST):
    """The nodes of a function (or module) body, not those of the functions and classes defined in it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def second_readers(source: str, module: str) -> list[str]:
    """`module:function` for each scope of `source` that names the manifest file and parses something."""
    tree = syntax_tree(source)
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                    ast.ClassDef)))]
    found = []
    for scope in scopes:
        nodes = list(_own_nodes(scope))
        if any(_names_manifest(n) for n in nodes) and any(_parses(n) for n in nodes):
            found.append(f"{module}:{getattr(scope, 'name', '<module>')}")
    return found


def test_no_module_but_the_manifests_own_parses_manifest_json():
    found = []
    for path in sorted(KIT.rglob("*.py")):
        module = path.relative_to(REPO).as_posix()
        if module != THE_READER:
            found += second_readers(path.read_text(encoding="utf-8"), module)
    assert found == [], f"parse manifest.json through kit.record.manifest.read (or Manifest.load): {found}"


def test_the_reader_parses_in_one_place():
    tree = syntax_tree((REPO / THE_READER).read_text(encoding="utf-8"))
    parsing = [scope.name for scope in ast.walk(tree) if isinstance(scope, ast.FunctionDef)
               and any(_parses(n) for n in _own_nodes(scope))]
    assert parsing == ["read"]


# the reads this kit made before it had one reader (kit verify, the bundle's runs, the writer), and reads
# that are not of the run's manifest
EARLIER_READS = {
    "verify": 'def load_manifest(bundle, run_id):\n'
              '    file = f"{RUNS}/{run_id}/{RunPaths.MANIFEST}"\n'
              '    return load_json(bundle.read(file) or b"")\n',
    "writer": 'def add(run):\n    run.manifest = json.loads(run.files[RunPaths.MANIFEST])\n',
    "a folder": 'def look(run_dir):\n    return json.loads(RunPaths(run_dir).manifest.read_text())\n',
    "a literal": 'def look(run_dir):\n    return json.load((run_dir / "manifest.json").open())\n',
    "top level": 'DATA = json.loads((HERE / "runs/x/manifest.json").read_bytes())\n',
}
NOT_READS = {
    "a message": 'def f(run_dir, data):\n    json.loads(data)\n    raise ConfigError(f"{run_dir} has no manifest.json")\n',
    "a side manifest": 'def f(stem, data):\n    path = f"{stem}.manifest.json"\n    return json.loads(data)\n',
    "split scopes": 'def f():\n    return RunPaths.MANIFEST\n\ndef g(data):\n    return json.loads(data)\n',
    "the one reader": 'def f(raw):\n    return read(raw, RunPaths.MANIFEST)\n',
}


def test_the_rule_finds_a_second_reader_and_nothing_else():
    for name, source in EARLIER_READS.items():
        assert second_readers(source, name), name
    for name, source in NOT_READS.items():
        assert second_readers(source, name) == [], name
