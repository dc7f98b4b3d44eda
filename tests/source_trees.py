"""Python source parsed once per test process. The tests that read the kit's own code (its imports, its write
sites, what it prints, where it names a run's files, ...) each walk the syntax trees of the same ~300 modules;
each source is parsed the first time one of them asks and the tree is shared after. The trees are read only:
no test changes one."""

from __future__ import annotations

import ast
from functools import cache


def syntax_tree(source: str, filename: str = "<unknown>") -> ast.Module:
    """The syntax tree of `source` (shared: do not change it); a syntax error names `filename`."""
    try:
        return _tree(source)
    except SyntaxError:
        return ast.parse(source, filename)  # raises again, naming the file


@cache
def _tree(source: str) -> ast.Module:
    return ast.parse(source)
