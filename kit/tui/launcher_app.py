"""What the launcher's screens ask of the app that holds them (kit.tui.app.KitApp implements it): a Protocol
here, so that a screen names the app's methods typed without importing the app, which imports the screens."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, cast

from textual.screen import Screen

from kit.tui.catalog import Capabilities, Entry


class LauncherApp(Protocol):
    caps: Capabilities
    protocols_folder: Path | None

    def open_setup(self, entry: Entry) -> None: ...

    def start_run(self, options: Any) -> None: ...

    def show_results(self, result: Any) -> None: ...

    def back_to_picker(self) -> None: ...


def launcher(screen: Screen[Any]) -> LauncherApp:
    """The app holding `screen`, as the launcher it is."""
    return cast(LauncherApp, screen.app)
