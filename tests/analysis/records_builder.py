"""Small run folders written as real record files (kit.record/1, kit.manifest/1) for analysis tests.

Each request's tokens and top-k log-probabilities are given explicitly by the test, so every number
the analysis reports can be worked out by hand from what the test wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

from kit.records import RecordWriter, prompt_sha256


def position(token: int, margin: float, runner_up: int, depth: int, top1: float = -0.1) -> dict:
    """One log-probability record: `token` wins by `margin` over `runner_up`; deeper alternatives far below."""
    top = [{"token": f"t{token}", "logprob": top1, "id": token},
           {"token": f"t{runner_up}", "logprob": top1 - margin, "id": runner_up}]
    top += [{"token": f"t{9000 + k}", "logprob": top1 - margin - 5.0 - k, "id": 9000 + k} for k in range(depth - 2)]
    return {"token": f"t{token}", "logprob": top1, "id": token, "top": top[:depth]}


def request_record(run_id: str, pass_id: str, unit: str, step: int, seq: int, prompt: str, positions: list[dict],
                   depth: int, cache_prompt: bool, cached: int, **extra) -> dict:
    ids = [p["id"] for p in positions]
    return {"run_id": run_id, "pass_id": pass_id, "protocol": extra.pop("protocol", "grid"), "unit": unit,
            "step": step, "seq": seq, "prompt_sha256": prompt_sha256(prompt), **extra,
            "request": {"endpoint": "/completion", "body": {"prompt": prompt, "n_predict": 16, "temperature": 0.0,
                                                             "seed": 42, "n_probs": depth, "return_tokens": True,
                                                             "cache_prompt": cache_prompt}},
            "completion": {"text": " ".join(f"t{i}" for i in ids), "token_ids": ids,
                           "tokens": [p["token"] for p in positions], "logprobs": positions, "finish_reason": "stop",
                           "cached_tokens": cached, "prompt_tokens": 100, "prefill_tokens": 100 - cached,
                           "prefill_ms": 1.0, "decode_tokens": len(ids), "decode_ms": 1.0, "outcome": "ok"},
            "raw": {}, "started": "2026-11-30T00:00:00+00:00", "wall_seconds": 0.1,
            "gate": {"ok": True, "reason": None}, "error": None}


def write_grid_like(folder: Path, passes: dict[str, dict], *, kind: str = "grid", sweep: dict | None = None,
                    model_name: str = "toy-F16", cache_ram=None, arms_order: list[str] | None = None,
                    depth: int = 2) -> Path:
    """passes: pass id -> {"arm", "status", "order", "episodes": {unit: [(prompt, positions, cached), ...]}}."""
    run_id = folder.name
    manifest_passes = {}
    for pass_id, spec in passes.items():
        file = f"records/{pass_id}.jsonl"
        episodes_file = f"records/{pass_id}.episodes.jsonl"
        seq = 0
        with RecordWriter(folder / file) as writer, RecordWriter(folder / episodes_file) as episodes:
            for unit in spec["order"]:
                for step, (prompt, positions, cached) in enumerate(spec["episodes"][unit]):
                    writer.write(request_record(run_id, pass_id, unit, step, seq, prompt, positions, depth,
                                                spec["arm"] == "on", cached, arm=spec["arm"]))
                    seq += 1
                episodes.write({"run_id": run_id, "pass_id": pass_id, "arm": spec["arm"], "unit": unit,
                                "order_index": spec["order"].index(unit), "requests": len(spec["episodes"][unit]),
                                "outcome": "finished", "wall_seconds": 0.1, "score": {"valid": False}})
        manifest_passes[pass_id] = {"arm": spec["arm"], "file": file, "episodes_file": episodes_file,
                                    "status": spec.get("status", "OK"), "reason": spec.get("reason"),
                                    "order": spec["order"], "records": seq}
    arms = arms_order or [spec["arm"] for spec in passes.values()]
    manifest = {"schema": "kit.manifest/1", "run_id": run_id, "status": "finished",
                "protocol": {"name": kind, "kind": "grid",
                             "resolved": {"protocol": "grid", "passes": arms, "top_logprobs": depth}},
                "engine": {"model_name": model_name, "cache_ram": cache_ram}, "passes": manifest_passes}
    if sweep:
        manifest["sweep"] = sweep
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder
