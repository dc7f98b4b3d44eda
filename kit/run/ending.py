"""How every run ends, however it was stopped (`kit run`, `kit resume`, `kit watch`): its results written from
the run folder, then its final manifest, naming the results files, in one write that a stop signal cannot cut
(kit.run.faults.deferred), so that a run never stays `started` and `kit bundle` and `kit verify` find its results.

A failure while the results are written ends a finished run `failed`, naming it (a run that had already failed
or was stopped keeps its own cause). A stop signal there (KeyboardInterrupt, SystemExit) stops the results but
not the manifest: it is kept in `Ended.stopped` and passed on by the caller once it has said the run ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kit.core.errors import KitError
from kit.protocols.results_model import Results
from kit.record.manifest import Manifest
from kit.run import faults as run_faults


@dataclass(frozen=True)
class Ended:
    """How the run ended (its status and reason as its manifest now says), its results table (None: none was
    written) and the stop signal that cut the results short, if one did."""

    status: str
    reason: str | None
    table: dict[str, Any] | None
    stopped: BaseException | None

    def pass_on(self) -> None:
        """Raise the stop signal that cut the results short (recorded: the manifest is final)."""
        if self.stopped is not None:
            raise self.stopped


def reason_of(exc: BaseException) -> str:
    """The one line an exception that ended a run leaves as the manifest's reason."""
    return exc.line() if isinstance(exc, KitError) else f"internal error: {type(exc).__name__}: {exc}"


def end_run(manifest: Manifest, results: Callable[[], Results | dict[str, Any]], status: str, reason: str | None,
            **fields: Any) -> Ended:
    """Write the results (`results()`: the kind's table, with the results files it wrote in its `files`), then
    the final manifest with `status`, `reason`, the results files and `fields`, saved once."""
    table: dict[str, Any] | None = None
    error: BaseException | None = None
    try:
        made = results()
        table = made.to_json() if isinstance(made, Results) else made
    except BaseException as exc:  # noqa: BLE001 - the manifest must still end in a final state
        error = exc
        if status == "finished":
            status, reason = "failed", f"writing the results failed: {reason_of(exc)}"
    with run_faults.deferred():
        if table is not None:
            fields["results"] = table.get("files", {})
        manifest.finish(status, reason, **fields)
    return Ended(status, reason, table, None if error is None or isinstance(error, Exception) else error)
