"""Fixes and server flags named inside a run folder, a bundle or a protocol file are checked as typed ones are
(docs/security.md, "Recorded fixes and server flags"): a flag that would move the server's address, model or
files, or a fix the registry does not name, is refused before any server starts."""

from __future__ import annotations

import json
from typing import Any

from tests.adversarial.cases_confine import _run_folder
from tests.adversarial.corpus import Case, Scratch


def _options(**given: Any):
    return lambda manifest: manifest["options"].update(given)


def _resume_with(**given: Any):
    return lambda s: ["resume", str(_run_folder(s, _options(**given), resumable=True))]


def _replay_with(**given: Any):
    return lambda s: ["replay", str(_run_folder(s, _options(**given))), "--out", str(s.outputs)]


def _log_file_outside(s: Scratch) -> list[str]:
    return ["resume", str(_run_folder(s, _options(server_args=[f"--log-file={s.outside / 'keep.txt'}"]),
                                      resumable=True))]


def _model_is_the_canary(s: Scratch) -> list[str]:
    return ["replay", str(_run_folder(s, _options(server_args=["-m", str(s.canary_program)]))), "--out",
            str(s.outputs)]


def _remedy_file_with(arm: dict[str, Any]):
    def make(s: Scratch) -> list[str]:
        path = s.inbox / "hostile-remedy.yaml"
        path.write_text(json.dumps({"protocol": "remedy", "arms": [{"name": "unfixed"}, arm]}))
        return ["run", str(path), "--out", str(s.outputs)]
    return make


CASES = [
    Case(cls="run folder", name="resume with a recorded flag writing a file outside", make=_log_file_outside,
         needle="--log-file is not a flag the kit lets a run add"),
    Case(cls="run folder", name="resume with a recorded flag moving the server's address",
         make=_resume_with(server_args=["--host=0.0.0.0"]), needle="--host is not a flag"),
    Case(cls="run folder", name="resume with a recorded fix that is a command",
         make=_resume_with(fixes=["chunk-16; touch /tmp/x"]), needle="is not a fix the kit knows"),
    Case(cls="run folder", name="resume with recorded fixes of another type",
         make=_resume_with(fixes={"chunk-16": True}), needle="options.fixes is dict"),
    Case(cls="run folder", name="replay with a recorded model flag naming the canary", make=_model_is_the_canary,
         needle="-m is not a flag"),
    Case(cls="run folder", name="replay with a recorded api key flag", make=_replay_with(server_args=["--api-key=x"]),
         needle="--api-key is not a flag"),
    Case(cls="protocol file", name="remedy arm with a flag moving the server's port",
         make=_remedy_file_with({"name": "x", "server_args": ["--port=22"]}), needle="--port is not a flag"),
    Case(cls="protocol file", name="remedy arm with a threads flag the kit records itself",
         make=_remedy_file_with({"name": "x", "server_args": ["-t 64"]}), needle="the kit sets -t itself"),
]
