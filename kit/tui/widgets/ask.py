"""A one-question modal: a prompt, an input, and a "why" line under it. Enter hands the answer to
`validate`; what it returns dismisses the modal with that value, a KitError it raises stays on screen as
the why line (the person fixes the answer and presses Enter again); Esc dismisses with None. `suggestions`
complete what the person types."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Generic, TypeVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Input, Static

from kit.core.errors import KitError

T = TypeVar("T")


class AskScreen(ModalScreen[T | None], Generic[T]):
    """Asks `prompt` (the input shows `placeholder`) until `validate` accepts the answer, or Esc."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    AskScreen { align: center middle; }
    AskScreen #box { width: 80%; height: auto; border: round $primary; padding: 1 2; background: $surface; }
    AskScreen #why { color: $warning; height: auto; }
    """

    def __init__(self, prompt: str, placeholder: str, validate: Callable[[str], T], suggestions: list[str] | None = None):
        super().__init__()
        self.prompt, self.placeholder, self.validate = prompt, placeholder, validate
        self.suggester = SuggestFromList(suggestions) if suggestions else None

    def compose(self) -> ComposeResult:
        with Vertical(id="box"):
            yield Static(self.prompt)
            yield Input(placeholder=self.placeholder, id="answer", suggester=self.suggester)
            yield Static(id="why")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            self.dismiss(self.validate(event.value.strip()))
        except KitError as exc:
            self.query_one("#why", Static).update(Text(exc.line()))

    def action_cancel(self) -> None:
        self.dismiss(None)
