"""Small run folders written as real record files (kit.record/2, kit.manifest/1) for analysis tests.

Each request's tokens and top-k log-probabilities are given explicitly by the test, so every number
the analysis reports can be worked out by hand from what the test wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

from kit.record.model import BfclRecord, EpisodeSummary, Gate
from kit.record.files import RecordWriter
from tests.answers import answer, prompt_body


def position(token: int, margin: float, runner_up: int, depth: int, top1: float = -0.1) -> dict:
    """One log-probability record: `token` wins by `margin` over `runner_up`; deeper alternatives far below."""
    top = [{"token": f"t{token}", "logprob": top1, "id": token},
           {"token": f"t{runner_up}", "logprob": top1 - margin, "id": runner_up}]
    top += [{"token": f"t{9000 + k}", "logprob": top1 - margin - 5.0 - k, "id": 9000 + k} for k in range(depth - 2)]
    return {"token": f"t{token}", "logprob": top1, "id": token, "top": top[:depth]}


def write_grid_like(folder: Path, passes: dict[str, dict], *, kind: str = "grid", sweep: dict | None = None,
                    model_name: str = "toy-F16", cache_ram=None, arms_order: list[str] | None = None,
                    depth: int = 2) -> Path:
    """passes: pass id -> {"arm", "status", "order", "episodes": {unit: [(prompt, positions, cached), ...]}}."""
    run_id = folder.name
    manifest_passes = {}
    for pass_id, spec in passes.items():
        file = f"records/{pass_id}.jsonl"
        episodes_file = f"records/{pass_id}.episodes.jsonl"
        stamp = {"run_id": run_id, "pass_id": pass_id, "protocol": "grid"}
        with RecordWriter(folder / file, **stamp) as writer, RecordWriter(folder / episodes_file) as episodes:
            for unit in spec["order"]:
                for step, (prompt, positions, cached) in enumerate(spec["episodes"][unit]):
                    body = prompt_body(prompt, n_probs=depth, cache_prompt=spec["arm"] == "on")
                    writer.answered(BfclRecord, answer(positions, body=body, cached=cached,
                                                       text=" ".join(f"t{p['id']}" for p in positions)),
                                    unit=unit, step=step, gate=Gate(True), arm=spec["arm"], action="end_turn")
                episodes.write(EpisodeSummary(**stamp, arm=spec["arm"], unit=unit,
                                              order_index=spec["order"].index(unit),
                                              requests=len(spec["episodes"][unit]), outcome="finished",
                                              wall_seconds=0.1, score={"valid": False}))
            seq = writer.count
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
