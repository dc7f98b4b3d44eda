"""The BFCL worker: a separate process that alone imports `bfcl_eval`.

Run as `python -S -m kit.workloads.bfcl.worker` with PYTHONPATH set to the provisioned BFCL site
folder (see `provision.py`) and a minimal environment built by `client.worker_environment`. It reads
one JSON request per line on stdin and writes one JSON answer per line on stdout:

    {"id": 3, "op": "decode", "args": {"text": "[ls(a=True)]"}}
    {"id": 3, "ok": true, "result": {"calls": ["ls(a=True)"], "empty": false, "ast": [...]}}
    {"id": 4, "ok": false, "error": "unknown episode 'x'", "kind": "KeyError"}

Everything BFCL-specific is BFCL's own code: the dataset loader, `formulate_system_prompt`, the
prompting decoders, the environments (`execute_multi_turn_func_call`, which `eval`s model output)
and `multi_turn_checker`. Environment instances live in module globals of BFCL keyed by a model
name; this worker gives every (pass, episode) its own fresh name, and `release` deletes them.

BFCL `eval`s model output, so none reaches it unchecked: text goes to the decoder, and calls to the
executor (in `execute`, and in `check`/`score`, whose checker executes them again), only as far as the
call policy (`call_policy.py`) allows. A refused call is answered with the executor's error text and
listed in the answer's `refused`. Before its first request the worker loads everything it needs and
then confines itself (`confinement.py`); `hello` says what is in force.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kit.workloads.bfcl import call_policy
from kit.workloads.bfcl.confinement import Confinement, confine

CATEGORY = "multi_turn_base"

# Standard-library modules BFCL's environments import on first use (found by running every ground-truth
# call of the 200 episodes): loaded before confinement, when the interpreter's files can still be read.
PRELOADED_MODULES = ("_strptime",)


def _id_number(entry_id: str) -> int:
    return int(entry_id.rsplit("_", 1)[1])


def _jsonable(value: Any) -> Any:
    """Round-trip through JSON, writing anything JSON cannot hold (tuples become lists) as repr."""
    return json.loads(json.dumps(value, default=repr))


class BfclSession:
    """Loaded episodes, ground truth and environment names of one worker process."""

    def __init__(self) -> None:
        # Imported here, never at module level: the worker module must stay importable (for its
        # docstring and tests) in a process that does not have bfcl_eval on its path.
        import importlib
        import inspect
        from importlib.metadata import version

        from bfcl_eval import utils as bfcl_utils
        from bfcl_eval.constants.default_prompts import DEFAULT_SYSTEM_PROMPT_FORMAT
        from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (
            multi_turn_checker,
        )
        from bfcl_eval.model_handler import utils as handler_utils

        self._default_format = DEFAULT_SYSTEM_PROMPT_FORMAT
        self._mt_utils = multi_turn_utils
        self._checker = multi_turn_checker
        self._handler_utils = handler_utils
        self._bfcl_utils = bfcl_utils
        self._entries: dict[str, dict] = {}
        self._truth: dict[str, list[list[str]]] = {}
        self._names: dict[tuple[str, str], str] = {}
        self._serial = itertools.count(1)
        self.confinement: Confinement | None = None
        self._version = version("bfcl-eval")
        # Everything is loaded now, before confinement: the dataset, every environment class the
        # episodes involve (with its public methods, for the call policy) and the modules they import late.
        self._load_all()
        self._methods: dict[str, frozenset[str]] = {}
        for name in sorted({c for e in self._entries.values() for c in e["involved_classes"]}):
            instance = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[name]), name)()
            # the methods BFCL's executor routes bare calls to: inspect.ismethod, no leading underscore
            self._methods[name] = frozenset(m for m, _ in inspect.getmembers(instance, inspect.ismethod)
                                            if not m.startswith("_"))
        for module in PRELOADED_MODULES:
            importlib.import_module(module)
        assert call_policy.call_refusal(call_policy.REFUSED_STAND_IN, self._methods) is not None

    # -- dataset -----------------------------------------------------------------------------

    def _load_all(self) -> None:
        if self._entries:
            return
        entries = self._bfcl_utils.load_dataset_entry(CATEGORY)
        truth = self._bfcl_utils.load_ground_truth_entry(CATEGORY)
        self._entries = {e["id"]: e for e in entries}
        self._truth = {t["id"]: t["ground_truth"] for t in truth}

    def load_episodes(self, count: int | None = None, ids: list[str] | None = None) -> list[dict]:
        """The first `count` episodes by ascending numeric id, or the given ids in that order."""
        self._load_all()
        if ids is None:
            ordered = sorted(self._entries, key=_id_number)
            ids = ordered if count is None else ordered[:count]
        missing = [i for i in ids if i not in self._entries]
        if missing:
            raise KeyError(f"unknown {CATEGORY} episode ids: {missing[:5]}")
        return [self._describe(i) for i in ids]

    def _describe(self, entry_id: str) -> dict:
        entry = self._entries[entry_id]
        return {
            "id": entry_id,
            "turns": entry["question"],
            "involved_classes": entry["involved_classes"],
            "function_names": [f["name"] for f in entry["function"]],
            "ground_truth": self._truth[entry_id],
        }

    def _entry(self, episode_id: str) -> dict:
        self._load_all()
        if episode_id not in self._entries:
            raise KeyError(f"unknown {CATEGORY} episode id {episode_id!r}")
        return self._entries[episode_id]

    def system_prompt(self, episode_id: str, functions: int | None = None) -> str:
        """BFCL's default prompting-mode system prompt with the episode's function docs (`functions`: only
        the first N of them, in BFCL's order)."""
        entry = self._entry(episode_id)
        fmt = self._bfcl_utils.extract_prompt_format_from_id(episode_id)
        assert fmt == self._default_format
        if functions is not None and (isinstance(functions, bool) or not isinstance(functions, int) or functions < 1):
            raise ValueError(f"functions must be a positive integer, not {functions!r}")
        docs = entry["function"] if functions is None else entry["function"][:functions]
        return self._handler_utils.formulate_system_prompt(fmt, docs)

    # -- decoding ----------------------------------------------------------------------------

    def decode(self, text: str) -> dict:
        """Decode model text the way BFCL's prompting handlers do (execute form and AST form); text the
        decoder would partly eval is refused as a decoding failure (which ends the turn, as BFCL's do)."""
        hu = self._handler_utils
        refused = call_policy.decoder_refusal(text)
        if refused:
            return {"calls": None, "empty": None, "ast": None, "error": f"refused by the call policy: {refused}"}
        try:
            calls = hu.default_decode_execute_prompting(text, has_tool_call_tag=False)
        except Exception as e:  # BFCL: any decoding failure ends the turn
            return {"calls": None, "empty": None, "ast": None, "error": f"{type(e).__name__}: {e}"}
        try:
            ast_form = _jsonable(hu.default_decode_ast_prompting(text))
        except Exception:
            ast_form = None
        empty = self._mt_utils.is_empty_execute_response(calls)
        return {"calls": list(calls), "empty": empty, "ast": ast_form, "error": None}

    # -- environments ------------------------------------------------------------------------

    def _model_name(self, pass_id: str, episode_id: str) -> str:
        key = (str(pass_id), episode_id)
        if key not in self._names:
            self._names[key] = f"kit{next(self._serial)}"
        return self._names[key]

    def _episode_methods(self, entry: dict) -> dict[str, frozenset[str]]:
        return {name: self._methods[name] for name in entry["involved_classes"]}

    def execute(self, pass_id: str, episode_id: str, calls: list[str]) -> dict:
        """Run decoded calls in this (pass, episode)'s own environment instances, those the call policy
        allows; a refused call is answered with BFCL's error text for a failed call and never run.
        Returns `results` (one per call, in order) and `refused` (index, call, reason)."""
        entry = self._entry(episode_id)
        refused = {r.index: r for r in call_policy.refusals(calls, self._episode_methods(entry))}
        allowed = [c for i, c in enumerate(calls) if i not in refused]
        ran: Iterator[object] = iter(())
        if allowed:
            results, _ = self._mt_utils.execute_multi_turn_func_call(
                allowed,
                entry.get("initial_config", {}),
                entry["involved_classes"],
                self._model_name(pass_id, episode_id),
                episode_id,
                long_context=self._long_context(episode_id),
                is_evaL_run=False,
            )
            ran = iter(results)
        return {"results": [refused[i].tool_result if i in refused else str(next(ran)) for i in range(len(calls))],
                "refused": [r.as_json() for r in refused.values()]}

    def release(self, pass_id: str, episode_id: str) -> int:
        """Forget this (pass, episode)'s environment instances; returns how many were dropped."""
        name = self._names.pop((str(pass_id), episode_id), None)
        return self._drop_instances(name) if name else 0

    def _drop_instances(self, name: str) -> int:
        store = vars(self._mt_utils)
        doomed = [k for k in store if k.startswith(name + "_") and k.endswith("_instance")]
        for k in doomed:
            del store[k]
        return len(doomed)

    @staticmethod
    def _long_context(episode_id: str) -> bool:
        category = episode_id.rsplit("_", 1)[0]
        return "long_context" in category or "composite" in category

    # -- scoring -----------------------------------------------------------------------------

    def score(self, episode_id: str, turns: list[list[str]]) -> dict:
        """Score raw step texts per turn as BFCL's evaluator does: re-decode every step, drop
        steps that fail to decode or decode to nothing, then run `multi_turn_checker`."""
        decoded: list[list[list[str]]] = []
        for steps in turns:
            kept = []
            for text in steps:
                if call_policy.decoder_refusal(text):
                    continue  # dropped like a step that fails to decode
                try:
                    calls = self._handler_utils.default_decode_execute_prompting(
                        text, has_tool_call_tag=False)
                except Exception:
                    continue
                if self._mt_utils.is_empty_execute_response(calls):
                    continue
                kept.append(list(calls))
            decoded.append(kept)
        return self.check(episode_id, decoded)

    def check(self, episode_id: str, decoded_turns: list[list[list[str]]]) -> dict:
        """Run `multi_turn_checker` on already decoded calls (turn -> step -> call strings). The checker
        executes them, so each call the policy refuses is replaced by `REFUSED_STAND_IN`, which BFCL's
        executor fails on without running anything: it counts as the failed call the model was told it
        was. `refused` lists them (turn, step, index, call, reason)."""
        entry = self._entry(episode_id)
        truth = self._truth[episode_id]
        methods = self._episode_methods(entry)
        refused: list[dict] = []
        screened: list[list[list[str]]] = []
        for turn, steps in enumerate(decoded_turns):
            screened.append([])
            for step, calls in enumerate(steps):
                found = {r.index: r for r in call_policy.refusals(calls, methods)}
                refused += [{"turn": turn, "step": step, **r.as_json()} for r in found.values()]
                screened[-1].append([call_policy.REFUSED_STAND_IN if i in found else c for i, c in enumerate(calls)])
        base = {"decoded": decoded_turns, "n_turns": len(decoded_turns), "n_truth_turns": len(truth),
                "refused": refused}
        if len(decoded_turns) != len(truth):
            return {**base, "valid": False, "error_type": "multi_turn:force_terminated",
                    "error_message": f"{len(decoded_turns)} model turns for {len(truth)} "
                                     "ground-truth turns"}
        name = f"kitscore{next(self._serial)}"
        try:
            verdict = self._checker(screened, truth, copy.deepcopy(entry), CATEGORY, name)
        except Exception as e:
            verdict = {"valid": False, "error_type": "kit:checker_exception",
                       "error_message": f"{type(e).__name__}: {e}"}
        finally:
            self._drop_instances(name)
        return {
            **base,
            "valid": bool(verdict.get("valid")),
            "error_type": verdict.get("error_type"),
            "error_message": _jsonable(verdict.get("error_message")),
        }

    def hello(self) -> dict:
        return {"bfcl_eval": self._version, "python": sys.version.split()[0],
                "project_root": os.environ.get("BFCL_PROJECT_ROOT"),
                "environment_keys": sorted(os.environ),
                "confinement": self.confinement.report if self.confinement else None}


OPERATIONS = ("hello", "load_episodes", "system_prompt", "decode", "execute", "release", "score",
              "check")


def serve(session: BfclSession, requests, answer, confinement: Confinement | None = None) -> None:
    """Answer each JSON-line request with one JSON line until the input ends (each under the
    confinement's per-request hooks, when confined)."""
    for line in requests:
        line = line.strip()
        if not line:
            continue
        req_id = None
        try:
            req = json.loads(line)
            req_id = req.get("id")
            op = req["op"]
            if op not in OPERATIONS:
                raise ValueError(f"unknown operation {op!r}")
            if confinement is not None:
                confinement.before_operation()
            result = getattr(session, op)(**req.get("args", {}))
            if confinement is not None:
                confinement.after_operation()
            reply = {"id": req_id, "ok": True, "result": result}
        except Exception as e:
            reply = {"id": req_id, "ok": False, "error": str(e), "kind": type(e).__name__}
        answer(json.dumps(reply, default=repr))


def main() -> int:
    # Keep the protocol channel clean: BFCL and the environments print; send fd 1 to stderr and
    # answer on a private duplicate of the original stdout.
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if not os.environ.get("BFCL_PROJECT_ROOT"):
        print("BFCL_PROJECT_ROOT must be set (BFCL writes into its project root)", file=sys.stderr)
        return 2
    session = BfclSession()
    session.confinement = confine(Path(os.environ["HOME"]))

    def answer(text: str) -> None:
        channel.write(text + "\n")
        channel.flush()

    serve(session, sys.stdin, answer, session.confinement)
    return 0


if __name__ == "__main__":
    sys.exit(main())
