"""The call policy: which model output may reach BFCL's decoder and executor, decided without running it.

BFCL runs model output. Its executor (`execute_multi_turn_func_call`) `eval`s every decoded call string
in a module that has `inspect`, `importlib`, `copy`, `json`, `re` and all builtins in scope, so
`inspect.os.system(command='...')` or `__import__('os').system('...')` run as the worker; its prompting
decoder (`resolve_ast_by_type`) `eval`s every `a + b` argument it meets. This module reads model output
with Python's `ast` only and lets through:

- to the executor, a single call `method(...)` (a public method of one of the episode's involved classes,
  the form BFCL's executor routes to that class's instance) or `Class.method(...)` (Class one of the
  episode's involved classes, method one of its public methods), whose arguments are all literals
  (`ast.literal_eval`-able, with no call inside: not even `set()`);
- to the decoder, text whose keyword-argument expressions that the decoder would evaluate are literal
  arithmetic (numbers, strings and containers combined with operators).

Everything else is refused and never executed. A refused call is answered with the text BFCL's executor
gives a call that failed (`TOOL_ERROR`), so the model sees what it would have seen for a call that does
not work; a call to a name the episode does not define gets exactly the NameError message BFCL's `eval`
gave it, so a trajectory in which a model invents a function name is unchanged.

This module does not import `bfcl_eval`: the worker passes each episode's classes and their public
method names (`Methods`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TOOL_ERROR = "Error during execution: {}"  # bfcl_eval's executor: f"Error during execution: {str(e)}"

# What the checker is given in place of a refused call: BFCL's executor fails on it with a NameError and
# runs nothing, so a refused call counts as a failed call in scoring too (as it did in the agent loop).
REFUSED_STAND_IN = "kit_refused_call()"

Methods = Mapping[str, frozenset[str]]  # involved class name -> its public method names


@dataclass(frozen=True)
class Refusal:
    """One call the policy kept from BFCL: where it was in its step, the call, and why."""

    index: int
    call: str
    reason: str

    @property
    def tool_result(self) -> str:
        """What the model is told, in the format of BFCL's executor for a failed call."""
        return TOOL_ERROR.format(self.reason)

    def as_json(self) -> dict:
        return {"index": self.index, "call": self.call, "reason": self.reason}

    @classmethod
    def from_json(cls, d: dict) -> Refusal:
        return cls(index=d["index"], call=d["call"], reason=d["reason"])


def _undefined(name: str) -> str:
    return f"name {name!r} is not defined"  # Python's own NameError message, as BFCL's eval reports it


def _first_name(node: ast.AST) -> str | None:
    """The first variable name in `node` (depth first, in source order), if any."""
    if isinstance(node, ast.Name):
        return node.id
    for child in ast.iter_child_nodes(node):
        found = _first_name(child)
        if found is not None:
            return found
    return None


def _bare(methods: Methods) -> set[str]:
    """The method names callable without their class (BFCL's executor routes them to its instance)."""
    return {m for names in methods.values() for m in names if not m.startswith("_")}


def _defined(methods: Methods) -> set[str]:
    """The names the episode defines: its classes and their public methods."""
    return set(methods) | _bare(methods)


def _callee_refusal(func: ast.expr, methods: Methods) -> str | None:
    if isinstance(func, ast.Name):
        return None if func.id in _bare(methods) else _undefined(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in methods:
        owner, name = func.value.id, func.attr
        if name.startswith("_") or name not in methods[owner]:
            return f"{owner} has no public method {name!r}"
        return None
    root = _first_name(func)
    if root is not None and root not in _defined(methods):
        return _undefined(root)
    return f"only method(...) or Class.method(...) may be called, not {ast.unparse(func)}(...)"


def _is_literal(node: ast.expr) -> bool:
    if any(isinstance(n, ast.Call) for n in ast.walk(node)):  # literal_eval accepts set()
        return False
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _argument_refusal(call: ast.Call, methods: Methods) -> str | None:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return "argument unpacking (* or **) is not allowed"
    for keyword, value in [(None, a) for a in call.args] + [(k.arg, k.value) for k in call.keywords]:
        if _is_literal(value):
            continue
        name = _first_name(value)
        if name is not None and name not in _defined(methods):
            return _undefined(name)
        where = f"argument {keyword!r}" if keyword else "a positional argument"
        return f"{where} is not a literal (nested calls and names are not executed): {ast.unparse(value)}"
    return None


def call_refusal(call: object, methods: Methods) -> str | None:
    """Why `call` (one call string from the decoder) must not be executed, or None if it may."""
    if not isinstance(call, str):
        return f"not a call string: {call!r}"
    try:
        tree = ast.parse(call.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        return f"not a Python call: {type(e).__name__}: {e}"
    if not isinstance(tree.body, ast.Call):
        return f"not a single function call: {call}"
    return _callee_refusal(tree.body.func, methods) or _argument_refusal(tree.body, methods)


def refusals(calls: Iterable[object], methods: Methods) -> list[Refusal]:
    """The refused calls of one step, by index."""
    found = []
    for index, call in enumerate(calls):
        reason = call_refusal(call, methods)
        if reason is not None:
            found.append(Refusal(index, str(call), reason))
    return found


# -- the decoder ---------------------------------------------------------------------------------

_ARITHMETIC = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Tuple, ast.List,
               ast.Set, ast.Dict, ast.expr_context)


def _decoder_evaluates(tree: ast.Expression) -> Iterable[ast.BinOp]:
    """The `a + b` nodes bfcl_eval 2026.3.23's prompting decoder `eval`s: `resolve_ast_call` on each call
    of the list resolves keyword values with `resolve_ast_by_type`, which evals a BinOp and recurses into
    lists, tuples, dict keys and values, and keyword calls (a lambda raises before its eval)."""
    body = tree.body
    calls = [body] if isinstance(body, ast.Call) else [e for e in getattr(body, "elts", ()) if isinstance(e, ast.Call)]
    stack: list[ast.expr | None] = [k.value for c in calls for k in c.keywords]
    while stack:
        value = stack.pop()
        if isinstance(value, ast.BinOp):
            yield value
        elif isinstance(value, (ast.List, ast.Tuple)):
            stack.extend(value.elts)
        elif isinstance(value, ast.Dict):
            stack.extend(value.keys)
            stack.extend(value.values)
        elif isinstance(value, ast.Call):
            stack.extend(k.value for k in value.keywords)


def decoder_refusal(text: str) -> str | None:
    """Why BFCL's prompting decoder must not see `text` (it would eval part of it), or None.

    The text is prepared as `default_decode_execute_prompting` / `default_decode_ast_prompting` prepare it;
    text that does not parse is let through, since the decoder fails on it before it evaluates anything."""
    source = text.strip("`\n ")
    if not source.startswith("["):
        source = "[" + source
    if not source.endswith("]"):
        source = source + "]"
    try:
        tree = ast.parse(source.strip().strip("'"), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    for node in _decoder_evaluates(tree):
        if not all(isinstance(n, _ARITHMETIC) for n in ast.walk(node)):
            return f"the argument {ast.unparse(node)[:120]} is not literal arithmetic (BFCL's decoder would eval it)"
    return None
