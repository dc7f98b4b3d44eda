"""The architecture of kit/ as docs/architecture.md declares it: packages in layers, imports pointing
down only, and no import cycle.

The import graph is read with `ast` from every module under kit/: imports at module level and inside
functions, `from kit import x` resolved to the module kit.x, and relative imports. For the layers it
also counts the modules named by string and loaded on first use (a kind's renderer,
`Lazy("kit.app.console:name")`, and `importlib.import_module("kit.x")`): they are dependencies too,
though they cannot make an import cycle.
The layers and the known upward imports are the two tables of docs/architecture.md, parsed here, so
the document and the test cannot disagree.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from tests.source_trees import syntax_tree

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
TOP_LEVEL_FILES = {"__init__.py", "__main__.py", "cli.py"}  # kit/ holds packages and these only

Graph = dict[str, set[str]]


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _string_targets(node: ast.Call) -> list[str]:
    """The module a call names by string: `Lazy("pkg.mod:name")`, `import_module("pkg.mod")`."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in ("Lazy", "import_module") or not node.args:
        return []
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return [first.value.partition(":")[0]]
    return []


def import_graph(root: Path, *, named: bool = True) -> Graph:
    """module -> the modules of the same package (root's name) it imports, each edge once; with `named`,
    also the modules it names by string (loaded on first use, so they cannot make an import cycle)."""
    package = root.name
    files = {_module_name(path, root): path for path in sorted(root.rglob("*.py"))}

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: Graph = {}
    for module, path in files.items():
        base = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(syntax_tree(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parent = ".".join(base.split(".")[: len(base.split(".")) - node.level + 1])
                    source = f"{parent}.{node.module}" if node.module else parent
                else:
                    source = node.module or ""
                # `from kit import x` imports the module kit.x when there is one, else a name of kit
                targets += [f"{source}.{alias.name}" if f"{source}.{alias.name}" in files else source
                            for alias in node.names]
            elif named and isinstance(node, ast.Call):
                targets += _string_targets(node)
        edges = {resolve(t) for t in targets if t.split(".")[0] == package}
        graph[module] = {t for t in edges if t and t != module and not module.startswith(t + ".")}
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """Each set of modules that import each other, directly or not (Tarjan), as one sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # iterative depth-first search: (node, iterator over its successors)
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def layer_name(module: str) -> str:
    """The package a module belongs to: kit.record.model -> record, kit.cli -> cli, kit -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(graph: Graph, ranks: dict[str, int]) -> list[tuple[str, str]]:
    """Every edge from a module to a module of a higher layer; a module of an undeclared package is an
    error (KeyError names it)."""
    return sorted((module, target) for module, targets in graph.items() for target in targets
                  if ranks[layer_name(module)] < ranks[layer_name(target)])


def _table(text: str, name: str) -> list[list[str]]:
    match = re.search(rf"<!-- {name}: begin[^>]*-->\n(.*?)<!-- {name}: end -->", text, re.S)
    assert match, f"docs/architecture.md has no `<!-- {name}: begin -->` ... `<!-- {name}: end -->` table"
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in match[1].splitlines() if line.startswith("|")]
    return rows[2:]  # less the header and its rule


def declared_layers(text: str) -> dict[str, int]:
    ranks: dict[str, int] = {}
    for rank, packages, _what in _table(text, "layers"):
        for package in re.findall(r"`([\w]+)`", packages):
            assert package not in ranks, f"docs/architecture.md places {package} twice"
            ranks[package] = int(rank)
    return ranks


def declared_exceptions(text: str) -> dict[tuple[str, str], str]:
    found = {}
    for source, target, why in _table(text, "exceptions"):
        assert why, f"the exception {source} -> {target} in docs/architecture.md gives no reason"
        found[(source.strip("`"), target.strip("`"))] = why
    return found


@pytest.fixture(scope="module")
def kit_graph() -> Graph:
    return import_graph(REPO / "kit")


@pytest.fixture(scope="module")
def kit_imports() -> Graph:
    return import_graph(REPO / "kit", named=False)


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_kit_top_level_holds_only_packages_and_the_cli_entry():
    loose = sorted(p.name for p in (REPO / "kit").glob("*.py") if p.name not in TOP_LEVEL_FILES)
    assert loose == [], f"modules at kit/'s top level: {loose}; move each into the package of its layer"


def test_every_package_is_placed_in_a_layer(doc):
    ranks = declared_layers(doc)
    packages = {p.name for p in (REPO / "kit").iterdir() if (p / "__init__.py").is_file()}
    packages |= {p.stem for p in (REPO / "kit").glob("*.py") if p.name != "__init__.py"}
    assert sorted(packages - set(ranks)) == [], "add these to the layers table of docs/architecture.md"
    assert sorted(set(ranks) - packages - {"__init__"}) == [], "the layers table names packages kit/ lacks"


def test_kit_has_no_import_cycle(kit_imports):
    found = cycles(kit_imports)
    assert found == [], "import cycles (in-function imports counted): " + "; ".join(" <-> ".join(c) for c in found)


def test_no_new_upward_import(kit_graph, doc):
    known = declared_exceptions(doc)
    new = [f"{a} -> {b}" for a, b in upward_imports(kit_graph, declared_layers(doc)) if (a, b) not in known]
    assert new == [], ("imports from a lower layer to a higher one (docs/architecture.md): " + ", ".join(new)
                       + "; move the code to the layer it belongs to")


def test_every_known_exception_still_exists(kit_graph, doc):
    upward = set(upward_imports(kit_graph, declared_layers(doc)))
    gone = [f"{a} -> {b}" for a, b in declared_exceptions(doc) if (a, b) not in upward]
    assert gone == [], f"no longer upward imports (delete their rows in docs/architecture.md): {gone}"


# --- the checks can fail: a synthetic package with a cycle and an upward import -------------------------

def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_a_cycle_through_in_function_and_from_package_imports_is_found(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from pkg.high import b  # in a function\n",
        "high/__init__.py": "",
        "high/b.py": "from pkg.low.a import f\n",
        "high/c.py": "from ..low import a\n",  # relative, resolved to pkg.low.a
    })
    graph = import_graph(root)
    assert graph["pkg.low.a"] == {"pkg.high.b"} and graph["pkg.high.b"] == {"pkg.low.a"}
    assert graph["pkg.high.c"] == {"pkg.low.a"}
    assert cycles(graph) == [["pkg.high.b", "pkg.low.a"]]


def test_an_upward_import_is_refused_and_a_downward_one_is_not(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "VERSION = 1\n",
        "low/__init__.py": "",
        "low/a.py": "from pkg import VERSION\nLazy('pkg.high.b:render')\n",  # a string target counts
        "high/__init__.py": "",
        "high/b.py": "import pkg.low.a\n",
    })
    graph = import_graph(root)
    ranks = {"__init__": 0, "low": 1, "high": 2}
    assert upward_imports(graph, ranks) == [("pkg.low.a", "pkg.high.b")]
    assert upward_imports(graph, {"__init__": 0, "high": 1, "low": 2}) == [("pkg.high.b", "pkg.low.a")]
    assert cycles(import_graph(root, named=False)) == []  # a name in a string is loaded on use only
    with pytest.raises(KeyError, match="high"):
        upward_imports(graph, {"__init__": 0, "low": 1})  # a package no layer places


def test_the_tables_are_read_as_written():
    text = """
<!-- layers: begin -->
| rank | packages | what |
|---|---|---|
| 0 | `core` | helpers |
| 1 | `record`, `stats` | data |
<!-- layers: end -->
<!-- exceptions: begin -->
| from | to | why |
|---|---|---|
| `kit.record.model` | `kit.engines.base` | types |
<!-- exceptions: end -->
"""
    assert declared_layers(text) == {"core": 0, "record": 1, "stats": 1}
    assert declared_exceptions(text) == {("kit.record.model", "kit.engines.base"): "types"}
