"""The help screen: what the launcher does and every key."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# kit launcher

Pick a protocol, check the setup, watch the run, read the results. Every run writes the same run
folder as `kit run` (manifest.json, records/, logs/, results/).

| where | key | does |
|---|---|---|
| everywhere | `?` | this help (Esc closes it) |
| everywhere | `ctrl+q` | quit (a running run is stopped cleanly first) |
| everywhere | `ctrl+p` | commands, including the colour theme |
| picker | `↑` `↓`, `enter` | choose a protocol, open its setup |
| picker | `d` | every check of `kit doctor` and its fix (Esc closes it) |
| picker | `r` | replay a bundle (or run folder) here and watch the comparison with the original fill in |
| replay | `esc` | back to the picker (the replay goes on; its run folder and comparison are written) |
| picker | `w` | watch an engine: proxy it (`kit watch`) and see each call's cache state and alarms as it ends |
| watch | `esc` | stop the proxy (the run ends finished), then back to the picker |
| setup | `tab` / `shift+tab` | next / previous field |
| setup | `space` | in the fix list: pick or drop a fix (docs/remedy.md) |
| setup | `ctrl+r` | run (refused while a field shows a problem) |
| setup | `esc` | back to the picker |
| live run | `s` | stop after the current request: records kept, manifest says interrupted |
| live run | `r` | the results (once the run has ended) |
| live run | `esc` | back to the picker (once the run has ended) |
| results | `o` / `c` | open the results folder (no display: its path) / the run folder's path to the clipboard (OSC 52) |
| results | `n` | set up another run |
| results | `esc` | back to the live view of the run |

The mouse works too: click protocols, fields and buttons.

**Cache strip:** `c` cold (nothing reused), `H` hit (cached tokens reused), `K` checkpoint,
`?` unknown (the engine did not say); reversed cells violated the pass's cache-state gate.
A pass whose gate fails is **VOID**: its records are kept but never counted as a result.
"""


class HelpScreen(ModalScreen):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "dismiss", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen VerticalScroll { width: 90%; max-width: 100; height: 90%; border: round $primary;
                                background: $surface; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(HELP)
