"""docs/security.md rule 6, structurally: no code of the kit can print a stranger's text as markup or raw.

The kit prints through SafeConsole only (a plain string is literal text, every segment made printable); so a
print of external text is safe without anything to remember at the call site. What could still undo that is
a console made another way, markup switched back on, or markup parsed from a string that is not a literal of
the kit's. This test reads every module under kit/ and fails on each, naming the file and line. Plain lines of the
command line go through `kit.core.terminal_text.echo` (printable) only. The hostile runs of
tests/adversarial/cases_console.py show the same on the real command line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tests.source_trees import syntax_tree

KIT = Path(__file__).resolve().parents[1] / "kit"
CONSOLE_HOME = KIT / "core" / "safe_console.py"
ECHO_HOME = KIT / "core" / "terminal_text.py"  # `echo`: the one plain line written outside a SafeConsole
MARKUP_PARSERS = {"from_markup", "render_markup"}  # Text.from_markup, Content.from_markup, rich.markup.render
# widgets and calls that read a str as Textual markup (notify does not: KitApp.notify never reads markup)
TEXTUAL_MARKUP = {"Static", "Label", "Button", "update", "add_row", "add_column", "add_columns", "write"}


def _name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _builds_a_string(node: ast.AST) -> bool:
    """A string made at run time from parts (an f-string with a value, `+`, `%`, str(...))."""
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(part, ast.FormattedValue) for part in node.values)
    if isinstance(node, ast.BinOp):
        return True
    if isinstance(node, ast.IfExp):
        return _builds_a_string(node.body) or _builds_a_string(node.orelse)
    return isinstance(node, ast.Call) and _name(node) in ("str", "format", "join")


def problems(path: Path, source: str) -> list[str]:
    """Each way `source` (the module at `path`) could print a stranger's text as markup or raw."""
    found = []
    in_tui = "tui" in path.relative_to(KIT).parts
    for node in ast.walk(syntax_tree(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "rich.markup":
            found.append(f"{node.lineno}: imports rich.markup (escaping is not needed on a SafeConsole)")
        if isinstance(node, ast.ImportFrom) and node.module == "rich" and any(
                alias.name in ("print", "get_console", "inspect") for alias in node.names):
            found.append(f"{node.lineno}: Rich's global console (markup on): print on a SafeConsole")
        if not isinstance(node, ast.Call):
            continue
        name, where = _name(node), f"{node.lineno}: {ast.unparse(node)[:90]}"
        keywords = {k.arg: k.value for k in node.keywords}
        if name == "Console" and path != CONSOLE_HOME:
            found.append(f"{where}: a Rich Console other than SafeConsole (kit.core.safe_console)")
        for key in ("markup", "emoji", "highlight"):
            value = keywords.get(key)
            if value is not None and not (isinstance(value, ast.Constant) and value.value is False):
                found.append(f"{where}: {key}= other than False")
        if name in MARKUP_PARSERS and not (node.args and isinstance(node.args[0], ast.Constant)):
            found.append(f"{where}: markup parsed from a string that is not a literal")
        if name in ("echo", "secho") and isinstance(node.func, ast.Attribute) and path != ECHO_HOME:
            found.append(f"{where}: click writes the line raw; use kit.core.terminal_text.echo")
        if name == "print" and isinstance(node.func, ast.Name) and not all(
                isinstance(arg, ast.Constant) for arg in node.args):
            found.append(f"{where}: print() writes the line raw; use kit.core.terminal_text.echo")
        if name == "from_ansi":
            found.append(f"{where}: escape sequences parsed into styles")
        if name in ("Progress", "Status") and "console" not in keywords:  # (kit.watch.console.Live makes its own)
            found.append(f"{where}: without console= it draws on Rich's global console; give it a SafeConsole")
        if name == "TextColumn" and "markup" not in keywords:
            found.append(f"{where}: a progress column reads its text as markup unless markup=False")
        if name in ("Panel", "Rule", "Tree") and any(_builds_a_string(v) for v in [*node.args, *keywords.values()]):
            found.append(f"{where}: {name} reads a string title as markup; give it Text")
        if in_tui and name in TEXTUAL_MARKUP and any(_builds_a_string(arg) for arg in node.args):
            found.append(f"{where}: Textual reads a string as markup; give it Text")
    return [f"{path.relative_to(KIT.parent)}:{line}" for line in found]


def test_no_module_of_the_kit_prints_a_strangers_text_as_markup_or_raw():
    found = [problem for path in sorted(KIT.rglob("*.py")) for problem in problems(path, path.read_text())]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("source, needle", [
    ("from rich.console import Console\nConsole().print(x)", "other than SafeConsole"),
    ("console.print(f'[bold]{engine}[/]', markup=True)", "markup= other than False"),
    ("Text.from_markup(f'[b]{build}[/]')", "not a literal"),
    ("Text.from_markup(line)", "not a literal"),
    ("Text.from_ansi(log)", "escape sequences"),
    ("Progress(TextColumn('{task.description}'))", "markup=False"),
    ("from rich.markup import escape", "imports rich.markup"),
    ("Panel(body, title=f'engine {build}')", "give it Text"),
    ("click.echo(f'left out: {line}')", "use kit.core.terminal_text.echo"),
    ("print(reason)", "use kit.core.terminal_text.echo"),
    ("from rich import print", "global console"),
    ("Progress(TextColumn('x', markup=False))", "give it a SafeConsole"),
])
def test_the_rule_catches_each_way_round_it(source, needle):
    """Each rule can fail: a module written each of these ways is named."""
    assert any(needle in problem for problem in problems(KIT / "app" / "example.py", source))


def test_the_launcher_rule_catches_a_string_textual_reads_as_markup():
    assert any("give it Text" in p for p in problems(KIT / "tui" / "x.py", "widget.update(f'engine {build}')"))
    assert any("give it Text" in p for p in problems(KIT / "tui" / "x.py", "table.add_row(str(path), 'x')"))
    assert not problems(KIT / "tui" / "x.py", "widget.update(Text(f'engine {build}'))")
    assert not problems(KIT / "app" / "x.py", "console.print(f'engine {build}')")  # literal on a SafeConsole
