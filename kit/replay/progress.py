"""What `kit replay` prints while it runs: a line per pass as it starts and as it ends, with how its
records compare with the original's so far (kit.replay.live.Follower), so a replay is never silent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.core.events import RunEnded, RunStarted, SessionEnded, SessionStarted
from kit.core.terminal_text import one_line
from kit.replay.live import Follower


@dataclass
class PassLines:
    """An event receiver for one replayed run: says each pass's start and end (a pass that ends without its
    own event is said ended when the next starts, or when the run ends)."""

    original_dir: Path
    say: Callable[[str], None]
    follower: Follower = field(init=False)
    running: str | None = None

    def __post_init__(self) -> None:
        self.follower = Follower(self.original_dir)

    def __call__(self, event: Any) -> None:
        self.follower(event)
        if isinstance(event, RunStarted):
            self.say(one_line(f"replay running in {event.run_dir} ({len(self.follower.passes)} recorded "
                              f"pass{'es' if len(self.follower.passes) != 1 else ''}: "
                              f"{', '.join(self.follower.passes) or 'none'})"))
        elif isinstance(event, SessionStarted):
            self._ended(self.running, None)
            self.running = event.session
            self.say(one_line(f"pass {event.session} ({event.index} of {event.total}) started: starting the engine "
                              "and replaying its requests"))
        elif isinstance(event, SessionEnded):
            self._ended(event.session, event.status + (f" ({event.reason})" if event.reason else ""))
        elif isinstance(event, RunEnded):
            self._ended(self.running, None)

    def _ended(self, pass_id: str | None, status: str | None) -> None:
        if pass_id is None:
            return
        self.running = None if pass_id == self.running else self.running
        self.follower.catch_up()
        so_far = self.follower.passes.get(pass_id)
        compared = (f"{so_far.replayed} of {so_far.original} requests replayed, {so_far.identical} byte-identical"
                    + (f"; first difference {so_far.first_difference}" if so_far.first_difference else "")
                    if so_far is not None else "not a pass of the original run")
        self.say(one_line(f"pass {pass_id} ended{' ' + status if status else ''}: {compared}"))


def printer(say: Callable[[str], None]) -> Callable[[Path], Callable[[Any], None]]:
    """`watch` for kit.replay.run.replay: a PassLines per replayed run, saying its lines with `say`."""
    return lambda original_dir: PassLines(original_dir, say)
