"""Hostile or broken engines (tests/adversarial/hostile_engine.py) behind `kit check URL` and `kit run demo
--engine-url URL`: an answer past the size cap or the deadline fails the run in one clear line; an answer
without what a verdict needs voids its pass with a reason naming the field, never an empty `ok`; engine text
with Rich markup or terminal escapes is shown as written, escapes stripped; so is an imported harness run's
arm name (`kit import`)."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.adversarial.corpus import REPO, Case, Ending, Scratch
from tests.adversarial.hostile_engine import HostileEngine

CAP = 1 << 20
DEADLINE = 3  # seconds; the hostile engine drips one byte every 2 s
SMALL_CHECK = ["--kind", "llamacpp", "--cycles", "1", "--per-arm", "1", "--calibration-rounds", "1",
               "--always-fresh", "0", "--steady", "0", "--max-tokens", "4"]
SMALL_DEMO = ["--items", "1", "--sessions", "1", "--max-tokens", "4"]


def _serve(scenario: str, command: str) -> Callable[[Scratch], list[str]]:
    def make(scratch: Scratch) -> list[str]:
        engine = HostileEngine(scenario)
        scratch.defer(engine.stop)
        bounds = ["--request-deadline", str(DEADLINE), "--max-answer-bytes", str(CAP), "--out", str(scratch.outputs)]
        if command == "check":
            return ["check", engine.url, *SMALL_CHECK, *bounds]
        return ["run", "demo", "--engine-url", engine.url, *SMALL_DEMO, *bounds]
    return make


def _manifest(scratch: Scratch) -> dict:
    found = sorted(scratch.outputs.glob("*/manifest.json"))
    return json.loads(found[0].read_text()) if found else {}


def _empty_ok_records(scratch: Scratch) -> list[str]:
    empty = []
    for path in scratch.outputs.glob("*/records/*.jsonl"):
        for line in path.read_text().splitlines():
            completion = json.loads(line).get("completion") or {}
            if completion.get("outcome") == "ok" and not completion.get("text") and not completion.get("token_ids"):
                empty.append(path.name)
    return empty


def _fails_the_run(needle: str) -> Callable[[Scratch, Ending], str | None]:
    """The run fails in one clear last line naming `needle`, within seconds."""
    def check(scratch: Scratch, ending: Ending) -> str | None:
        last = ending.lines[-1] if ending.lines else ""
        if ending.code == 0 or not last.startswith("kit: error: ") or needle not in last:
            return f"exit {ending.code}, last line {last!r}: not a failure naming {needle!r}"
        return None
    return check


def _voids_the_pass(needle: str) -> Callable[[Scratch, Ending], str | None]:
    """Some pass is VOID with a reason naming `needle`; no pass OK; no empty `ok` record; no verdict claimed."""
    def check(scratch: Scratch, ending: Ending) -> str | None:
        passes = _manifest(scratch).get("passes", {})
        voided = [p for p, info in passes.items() if info.get("status") == "VOID" and needle in (info.get("reason") or "")]
        if not voided:
            return f"no pass VOID naming {needle!r}: {[(p, i.get('status'), i.get('reason')) for p, i in passes.items()]}"
        if any(info.get("status") == "OK" for info in passes.values()):
            return "a pass ended OK on a broken engine"
        if _empty_ok_records(scratch):
            return f"an empty answer recorded as ok in {_empty_ok_records(scratch)}"
        if "items: recompute" in ending.text:  # the demo's per-item verdict line
            return "a verdict was claimed"
        return None
    return check


def _shows_markup_as_written(scratch: Scratch, ending: Ending) -> str | None:
    if ending.code not in (0, 4):  # 4: no verdict, a check of an engine the kit cannot reload (every pass VOID)
        return f"exit {ending.code}: {ending.lines[-1:]}"
    if "\x1b" in ending.text or "\x07" in ending.text:
        return "a terminal escape sequence reached the console"
    return None


def _shows_build_info(scratch: Scratch, ending: Ending) -> str | None:
    problem = _shows_markup_as_written(scratch, ending)
    if problem is None and "b1-fake[/] [bold red]owned[/]" not in ending.text:
        return "the engine's build_info was not shown as written"
    return problem


HOSTILE_ARM = "blocked\\u001b]0;owned\\u0007\\u001b[2J[/][bold]x"  # JSON escapes: ESC, BEL, markup


def _import_hostile_arm_names(scratch: Scratch) -> list[str]:
    """A determinism-harness run (seed 002's shipped fixture) whose arm is named with terminal escapes and markup."""
    for path in (REPO / "tests" / "fixtures" / "harness").glob("fixture-churn-ab.*"):
        (scratch.inbox / path.name).write_text(path.read_text().replace("blocked", HOSTILE_ARM))
    return ["import", "determinism-harness", str(scratch.inbox / "fixture-churn-ab.jsonl"), "--out", str(scratch.outputs)]


def _shows_arm_as_written(scratch: Scratch, ending: Ending) -> str | None:
    problem = _shows_markup_as_written(scratch, ending)
    if problem is None and "blocked[/][bold]x" not in ending.text:
        return "the arm's name was not shown as written"
    return problem


BROKEN = [("no-content", "`content`"), ("truncated", "not JSON"), ("nan", "not JSON"),
          ("array", "not a JSON object"), ("wrong-types", "`content`"), ("no-logprob", "logprob`")]

CASES = [
    *[Case(cls="engine answer", name=f"check: {scenario}", make=_serve(scenario, "check"), expect="handled",
           check=_voids_the_pass(needle)) for scenario, needle in BROKEN],
    Case(cls="engine answer", name="check: huge body", make=_serve("huge", "check"), expect="handled",
         check=_fails_the_run("more than 1 MiB")),
    Case(cls="engine answer", name="check: one byte every 2 s", make=_serve("drip", "check"), expect="handled",
         check=_fails_the_run(f"within {DEADLINE} s")),
    Case(cls="engine answer", name="check: headers one byte every 2 s", make=_serve("drip-headers", "check"),
         expect="handled", check=_fails_the_run(f"within {DEADLINE} s")),
    Case(cls="engine answer", name="check: build_info with markup and escapes", make=_serve("markup-build", "check"),
         expect="handled", check=_shows_markup_as_written),
    Case(cls="engine answer", name="demo: 200 with timings but no content", make=_serve("no-content", "demo"),
         expect="handled", check=_voids_the_pass("`content`")),
    Case(cls="engine answer", name="demo: a logprob entry without logprob", make=_serve("no-logprob", "demo"),
         expect="handled", check=_voids_the_pass("logprob`")),
    Case(cls="engine answer", name="demo: huge body", make=_serve("huge", "demo"), expect="handled",
         check=_fails_the_run("more than 1 MiB")),
    Case(cls="engine answer", name="demo: one byte every 2 s", make=_serve("drip", "demo"), expect="handled",
         check=_fails_the_run(f"within {DEADLINE} s")),
    Case(cls="engine answer", name="demo: build_info with markup and escapes", make=_serve("markup-build", "demo"),
         expect="handled", check=_shows_build_info),
    Case(cls="import file", name="harness arm names with markup and escapes", make=_import_hostile_arm_names,
         expect="handled", check=_shows_arm_as_written),
]
