"""Shared helpers are defined once: sha256 of text, canonical JSON, the atomic JSON write, the engine
clients' HTTP-error wrapping and the default model name (most are too short for `duplicates` to see)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from tests.source_trees import syntax_tree

KIT = Path(__file__).resolve().parents[1] / "kit"


@cache
def modules() -> dict[str, ast.Module]:
    return {path.relative_to(KIT.parent).as_posix(): syntax_tree(path.read_text(encoding="utf-8"))
            for path in sorted(KIT.rglob("*.py"))}


@cache
def nodes() -> list[tuple[str, ast.AST]]:
    """Every node of kit's modules with its module, walked once for all the tests."""
    return [(name, node) for name, tree in modules().items() for node in ast.walk(tree)]


def where(predicate) -> list[str]:
    """`module:line` of every node of kit's modules that `predicate` accepts."""
    return [f"{name}:{node.lineno}" for name, node in nodes() if predicate(node)]


def _call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            return f"{func.value.id}.{func.attr}"
        if isinstance(func, ast.Name):
            return func.id
    return ""


def _encodes_text(node: ast.AST) -> bool:
    """`hashlib.sha256(<something>.encode(...))`: a sha256 of text."""
    return _call_name(node) == "hashlib.sha256" and any(
        isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "encode"
        for arg in node.args)


def files(places: list[str]) -> list[str]:
    return [place.split(":")[0] for place in places]


def test_sha256_of_text_is_kit_digests_only():
    assert files(where(_encodes_text)) == ["kit/core/digests.py"]


def test_canonical_json_and_atomic_json_writes_are_defined_once():
    defined = {name: files(where(lambda n, name=name: isinstance(n, ast.FunctionDef) and n.name == name))
               for name in ("sha256_text", "sha256_json", "canonical_json", "write_json_atomic", "write_text_atomic",
                            "publish")}
    assert defined == {"sha256_text": ["kit/core/digests.py"], "sha256_json": ["kit/core/digests.py"],
                       "canonical_json": ["kit/core/digests.py"], "write_json_atomic": ["kit/core/atomic_file.py"],
                       "write_text_atomic": ["kit/core/atomic_file.py"], "publish": ["kit/core/atomic_file.py"]}
    # besides the atomic write (a bundle's .tar.gz included, through `publish`): the BFCL install folder
    assert sorted(files(where(lambda n: _call_name(n) == "os.replace"))) == [
        "kit/core/atomic_file.py", "kit/workloads/bfcl/provision.py"]


def test_engine_clients_catch_httpx_errors_in_one_place():
    def catches_httpx(node: ast.AST) -> bool:
        return isinstance(node, ast.ExceptHandler) and node.type is not None and "httpx" in ast.unparse(node.type)

    # one module: its one bounded call (send) and its one probe that never raises (probe_get, identifying a server)
    assert sorted({p for p in files(where(catches_httpx)) if p.startswith("kit/engines/")}) == ["kit/engines/http.py"]


def test_the_default_model_is_named_once():
    def assigns(node: ast.AST) -> bool:
        return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DEFAULT_MODEL"
                                                    for t in node.targets)

    assert files(where(assigns)) == ["kit/models/registry.py"]
