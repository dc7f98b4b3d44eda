"""Errors the kit reports to a person: one line saying what went wrong and how to fix it."""

from __future__ import annotations

from kit.core.secret_urls import redact_urls_in


class KitError(Exception):
    """An error with a one-line message for the user; the CLI prints it and exits non-zero."""

    exit_code = 2

    def __init__(self, message: str, fix: str | None = None):
        self.message = redact_urls_in(message)  # an error message never carries a URL's credentials
        self.fix = redact_urls_in(fix) if fix else fix
        super().__init__(self.line())

    def line(self) -> str:
        return f"{self.message}; {self.fix}" if self.fix else self.message


def shown_line(exc: BaseException) -> str:
    """What a person is shown of an error that ended a task: a KitError's own line, else its type and message."""
    return exc.line() if isinstance(exc, KitError) else f"{type(exc).__name__}: {exc}"


class ConfigError(KitError):
    """A protocol file, option or input file is wrong."""


class EngineError(KitError):
    """An engine could not be started, died, or answered something unusable."""

    exit_code = 3


class InvalidAnswer(EngineError):
    """An engine answered, but not with what the request needs (not JSON, a field missing or of the wrong
    type): the pass it served is VOID with this reason, never recorded as an empty `ok`."""


class NoVerdict(KitError):
    """A run ended, but no pass of it is OK: the engine answered nothing a verdict can rest on (every pass
    VOID). Its own exit code (the README's exit codes), so that a job against a broken engine fails
    without being mistaken for a run that failed."""

    exit_code = 4


class RunInterrupted(KitError):
    """The user stopped the run (Ctrl-C); records written so far are kept."""

    exit_code = 130


class IllegalInstruction(EngineError):
    """An engine process died of SIGILL: its machine code uses an instruction this CPU lacks."""
