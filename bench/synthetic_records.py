"""Paper-scale synthetic run folders for benchmarking `kit analyze` (not part of the package).

Writes real run folders: manifest.json (kit.manifest/1) and records/*.jsonl (kit.record/2, made by
kit.record.model.answered as for real runs, but not fsynced one by one) with a llama.cpp-shaped `raw` response
body (content, timings, settings) whose echoes of the prompt, ids and log-probabilities are replaced by
their digests under `raw_dropped`. Token streams are simulated, not served:

* the recompute path draws, at each position, a top-two margin m (log-normal) and its top-k
  alternatives; it depends only on (format, episode, request), so cache-off passes repeat exactly;
* the cache-hit path adds a perturbation d ~ Normal(0, sigma_format) to the margin; the token flips
  where m + d < 0. After a flip the episode's later prompts and tokens differ (salted);
* run-to-run differences of the cache-on arm come from re-drawing the perturbation for a share of
  episodes (the server state a pass inherits).

What it writes (all under OUT):
  grid/      10 configurations x passes on1 off1 on2 off2 x 80 episodes, top-1 (Table V, III, Fig. 1)
  sweep/     4 formats x 11 histories (0 = canonical) x passes on1 off1, top-5 (Table VI, Figs. 2-3)
  reset/     4 formats x 3 sessions x 100 items x phases cold warm cold2 warm2, top-5 (Table IV)
  bridge/    GSM8K bridge: 6 configurations x 200 items (one of 500), top-5 (Table VII)

    PYTHONPATH=. python bench/synthetic_records.py OUT [--episodes 80] [--prompt-chars 16000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

import numpy as np
import orjson

from kit.engines.base import Completion, Sent
from kit.protocols.kinds import record_classes
from kit.record.model import EpisodeSummary, Gate, answered

SEED = 20261007
FORMATS = ("F16", "Q8_0", "Q4_K_M", "Q3_K_M")
SIGMA = {"F16": 0.045, "Q8_0": 0.065, "Q4_K_M": 0.09, "Q3_K_M": 0.085, "BF16": 0.06}
GRID = [("llama.cpp", "Qwen2.5-7B", f) for f in FORMATS] + \
       [("llama.cpp", "Llama-3.1-8B", f) for f in ("Q8_0", "Q4_K_M", "Q3_K_M")] + \
       [("llama.cpp", "Qwen2.5-14B", "Q4_K_M"), ("vLLM", "Qwen2.5-7B", "BF16"), ("vLLM", "Llama-3.1-8B", "BF16")]
BRIDGE = [("Qwen2.5-7B", f, 200) for f in ("F16", "Q8_0", "Q4_K_M")] + \
         [("Qwen2.5-14B", "Q4_K_M", 200), ("Qwen2.5-7B", "Q4_K_M", 500), ("Qwen2.5-7B", "Q3_K_M", 200)]
VOCAB = 32000
GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "test.jsonl"


def stable_seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


def token_text(token_id: int) -> str:
    return f" t{token_id}"


def recompute_positions(rng: np.random.Generator, n: int, top_k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, margins and the alternatives' logprob offsets of a recompute path."""
    ids = rng.integers(100, VOCAB, size=(n, max(top_k, 2)))
    margins = np.exp(rng.normal(np.log(1.5), 1.3, size=n))
    lp1 = -np.abs(rng.normal(0.0, 0.3, size=n))
    rest = np.sort(rng.exponential(2.0, size=(n, max(top_k, 2) - 2)), axis=1)
    return ids, margins, np.column_stack([lp1, lp1 - margins] + [lp1[:, None] - margins[:, None] - rest])


def entries(ids: np.ndarray, lps: np.ndarray, top_k: int) -> tuple[list[dict], list[dict]]:
    """Normalized logprob entries and the raw completion_probabilities for one request."""
    normalized, raw = [], []
    for row_ids, row_lps in zip(ids.tolist(), lps.tolist()):
        top = [{"token": token_text(i), "logprob": lp, "id": i} for i, lp in zip(row_ids[:top_k], row_lps[:top_k])]
        normalized.append({"token": top[0]["token"], "logprob": top[0]["logprob"], "id": top[0]["id"], "top": top})
        raw.append({"id": top[0]["id"], "token": top[0]["token"], "bytes": list(top[0]["token"].encode()),
                    "logprob": top[0]["logprob"],
                    "top_logprobs": [{**t, "bytes": list(t["token"].encode())} for t in top]})
    return normalized, raw


def simulate_request(base_seed: int, n: int, top_k: int, sigma: float | None, perturb_seed: int | None):
    """(ids, lps, flipped_at) of one request on the recompute path (sigma None) or the hit path."""
    ids, margins, lps = recompute_positions(np.random.default_rng(base_seed), n, top_k)
    if sigma is None:
        return ids[:, :top_k], lps[:, :top_k], None
    rng = np.random.default_rng(perturb_seed)
    delta = rng.normal(0.0, sigma, size=n)
    new_margin = margins + delta
    lps = lps.copy()
    lps[:, 1] = lps[:, 0] - new_margin
    flips = np.flatnonzero(new_margin < 0)
    if flips.size == 0:
        return ids[:, :top_k], lps[:, :top_k], None
    at = int(flips[0])
    ids = ids.copy()
    ids[at, [0, 1]] = ids[at, [1, 0]]
    lps[at, [0, 1]] = lps[at, [1, 0]]
    if at + 1 < n:  # after the flip the prefix differs: fresh tokens
        tail_ids, _, tail_lps = recompute_positions(np.random.default_rng(perturb_seed + 1), n - at - 1, top_k)
        ids[at + 1:], lps[at + 1:] = tail_ids, tail_lps
    return ids[:, :top_k], lps[:, :top_k], at


def record(run_id, pass_id, protocol, unit, step, seq, prompt, ids, lps, top_k, cache_prompt, cached, extra) -> bytes:
    """One request record as a line of JSON."""
    normalized, raw_probs = entries(ids, lps, top_k)
    tokens = [token_text(i) for i in ids[:, 0].tolist()]
    text = "".join(tokens)
    prompt_tokens = len(prompt) // 4
    timings = {"cache_n": cached, "prompt_n": prompt_tokens - cached, "prompt_ms": 0.05 * (prompt_tokens - cached),
               "predicted_n": len(tokens), "predicted_ms": 12.0 * len(tokens)}
    body = {"prompt": prompt, "n_predict": 4096, "temperature": 0.0, "seed": 42, "n_probs": top_k,
            "return_tokens": True, "cache_prompt": cache_prompt}
    raw = {"index": 0, "content": text, "tokens": ids[:, 0].tolist(), "id_slot": 0, "stop": True,
           "model": "synthetic.gguf", "tokens_predicted": len(tokens), "tokens_evaluated": prompt_tokens,
           "generation_settings": {"n_predict": 4096, "seed": 42, "temperature": 0.0, "n_probs": top_k},
           "prompt": prompt, "stop_type": "eos", "tokens_cached": prompt_tokens + len(tokens),
           "timings": timings, "completion_probabilities": raw_probs}
    completion = Completion(text=text, token_ids=tuple(ids[:, 0].tolist()), tokens=tuple(tokens),
                            logprobs=tuple(normalized), finish_reason="stop", cached_tokens=cached,
                            prompt_tokens=prompt_tokens, prefill_tokens=prompt_tokens - cached,
                            prefill_ms=timings["prompt_ms"], decode_tokens=len(tokens),
                            decode_ms=timings["predicted_ms"], raw=raw,
                            sent=Sent("/completion", body, "2026-11-30T00:00:00.000+00:00", 0.5))
    # the engine's echoes of prompt, ids and log-probabilities become digests, as the kit writes them
    made = answered(record_classes()[protocol], completion, run_id=run_id, pass_id=pass_id, protocol=protocol, seq=seq,
                    unit=unit, step=step, gate=Gate(True), **extra)
    return orjson.dumps(made, option=orjson.OPT_APPEND_NEWLINE)


def prompt_text(episode: str, step: int, salt: str, chars: int) -> str:
    head = f"<|im_start|>system\nsynthetic {episode} step {step} {salt}\n"
    return head + ("x" * max(0, chars - len(head)))


def write_episode_pass(fh, run_id, pass_id, arm, episode, seq, model_key, history_key, sigma, top_k, requests,
                       tokens_per_request, prompt_chars, reroll):
    """Write one episode of a grid-like pass; returns the next seq."""
    salt = ""
    for step in range(requests):
        base = stable_seed(model_key, episode, step, salt)
        n = tokens_per_request
        if arm == "on" and not salt:
            ids, lps, at = simulate_request(base, n, top_k, sigma, stable_seed(model_key, episode, step, history_key,
                                                                                 reroll))
            flipped = at is not None
        else:
            ids, lps, _ = simulate_request(base if arm == "off" or not salt else base + 7, n, top_k, None, None)
            flipped = False
        # cache-on: request 0 reuses the shared system prompt, later requests the whole earlier turn
        cached = 0 if arm == "off" else (1000 if step == 0 else prompt_chars // 4 - 200)
        prompt = prompt_text(episode, step, salt, prompt_chars)
        fh.write(record(run_id, pass_id, "grid", episode, step, seq, prompt, ids, lps, top_k, arm == "on", cached,
                        {"arm": arm, "turn": step // 2, "turn_step": step % 2, "action": "end_turn", "calls": None,
                         "decode_error": None, "tool_results": [], "prompt_tokens_counted": len(prompt) // 4}))
        seq += 1
        if flipped:
            salt = f"diverged-{history_key}-{reroll}"
    return seq


def manifest(run_id, kind, passes, engine, extra, resolved):
    return {"schema": "kit.manifest/1", "run_id": run_id, "status": "finished", "started": "2026-11-30T00:00:00Z",
            "protocol": {"name": kind, "kind": kind, "file": "synthetic", "sha256": "0" * 64, "content": "",
                         "resolved": resolved, "overrides": {}},
            "engine": engine, "seeds": {"request_seed": 42, "generator_seed": SEED}, "passes": passes,
            "synthetic": "bench/synthetic_records.py", **extra}


def grid_like(out: Path, run_id: str, engine_kind: str, model: str, fmt: str, arms: list[str], episodes: list[str],
              top_k: int, history: int, requests: int, tokens: int, prompt_chars: int, cache_ram, extra: dict,
              state_share: float) -> None:
    folder = out / run_id
    (folder / "records").mkdir(parents=True, exist_ok=True)
    sigma = SIGMA.get(fmt, 0.1)
    passes = {}
    seen: dict[str, int] = {}
    rng = random.Random(stable_seed(run_id, "state"))
    rerolled = {e for e in episodes if rng.random() < state_share}
    for arm in arms:
        seen[arm] = seen.get(arm, 0) + 1
        pass_id = f"{arm}{seen[arm]}"
        seq = 0
        with (folder / "records" / f"{pass_id}.jsonl").open("wb") as fh, \
                (folder / "records" / f"{pass_id}.episodes.jsonl").open("wb") as efh:
            for index, episode in enumerate(episodes):
                reroll = seen[arm] if (arm == "on" and episode in rerolled) else 1
                seq = write_episode_pass(fh, run_id, pass_id, arm, episode, seq, (model, fmt), history, sigma, top_k,
                                         requests, tokens, prompt_chars, reroll)
                efh.write(orjson.dumps(EpisodeSummary(run_id=run_id, pass_id=pass_id, protocol="grid", arm=arm,
                                                      unit=episode, order_index=index, requests=requests,
                                                      outcome="finished", wall_seconds=1.0,
                                                      score={"valid": rng.random() < 0.1, "error_type": None}),
                                       option=orjson.OPT_APPEND_NEWLINE))
        passes[pass_id] = {"arm": arm, "file": f"records/{pass_id}.jsonl",
                           "episodes_file": f"records/{pass_id}.episodes.jsonl", "status": "OK",
                           "order": list(episodes), "records": seq}
    engine = {"kind": "synthetic", "engine_kind": engine_kind, "model_name": f"{model}-{fmt}", "cache_ram": cache_ram}
    resolved = {"protocol": "grid", "passes": arms, "top_logprobs": top_k, "engine": {"cache_ram": cache_ram}}
    data = manifest(run_id, "grid", passes, engine, extra, resolved)
    (folder / "manifest.json").write_text(json.dumps(data, indent=1))


def history_order(episodes: list[str], history: int) -> list[str]:
    order = list(episodes)
    if history:
        random.Random(stable_seed(SEED, history)).shuffle(order)
    return order


def reset_like(out: Path, run_id: str, model: str, fmt: str, items: list[str], sessions: int, top_k: int,
               tokens: int, workload: dict) -> None:
    folder = out / run_id
    (folder / "records").mkdir(parents=True, exist_ok=True)
    sigma = SIGMA.get(fmt, 0.1) * 4  # single requests: a larger share diverges per item
    phases = [("cold", False, "cold"), ("warm", True, "warm"), ("cold2", False, "cold"), ("warm2", True, "warm")]
    passes = {}
    for s in range(1, sessions + 1):
        order = list(items)
        random.Random(SEED * 1000 + s).shuffle(order)
        seq = 0
        with (folder / "records" / f"s{s}.jsonl").open("wb") as fh:
            for item in order:
                base = stable_seed(model, fmt, item)
                prompt = f"<|im_start|>user\nsynthetic problem {item}<|im_end|>\n<|im_start|>assistant\n"
                for index, (name, cache, expect) in enumerate(phases):
                    sig = sigma if cache else None
                    ids, lps, _ = simulate_request(base, tokens, top_k, sig, stable_seed(model, fmt, item, "hit"))
                    fh.write(record(run_id, f"s{s}", "reset", item, 0, seq, prompt, ids, lps, top_k, cache,
                                    60 if cache else 0, {"phase": name, "phase_index": index, "expect": expect}))
                    seq += 1
        passes[f"s{s}"] = {"session": s, "file": f"records/s{s}.jsonl", "status": "OK", "order": order,
                           "records": seq, "fresh_server": True}
    engine = {"kind": "synthetic", "model_name": f"{model}-{fmt}", "cache_ram": 0}
    resolved = {"protocol": "reset", "top_logprobs": top_k, "sessions": sessions}
    data = manifest(run_id, "reset", passes, engine, {"workload": workload}, resolved)
    (folder / "manifest.json").write_text(json.dumps(data, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--episodes", type=int, default=80)
    parser.add_argument("--requests", type=int, default=10, help="requests per episode")
    parser.add_argument("--tokens", type=int, default=30, help="tokens per response")
    parser.add_argument("--prompt-chars", type=int, default=16000)
    parser.add_argument("--histories", type=int, default=10, help="random histories (plus the canonical one)")
    parser.add_argument("--only", choices=["grid", "sweep", "reset", "bridge"], action="append")
    args = parser.parse_args()
    parts = set(args.only or ["grid", "sweep", "reset", "bridge"])
    episodes = [f"multi_turn_base_{i}" for i in range(args.episodes)]
    common = {"requests": args.requests, "tokens": args.tokens, "prompt_chars": args.prompt_chars}
    if "grid" in parts:
        for engine_kind, model, fmt in GRID:
            arms = ["on", "off", "on", "off"] if engine_kind == "llama.cpp" and model != "Qwen2.5-14B" else \
                ["on", "on", "off", "off"]
            grid_like(args.out / "grid", f"grid-{model}-{fmt}-{engine_kind}", engine_kind, model, fmt, arms,
                      episodes, 1, 0, cache_ram=None, extra={}, state_share=0.4, **common)
        grid_like(args.out / "grid", "grid-Qwen2.5-7B-Q4_K_M-cacheram0", "llama.cpp", "Qwen2.5-7B", "Q4_K_M",
                  ["on", "on", "off", "off"], episodes, 1, 0, cache_ram=0, extra={}, state_share=0.02, **common)
    if "sweep" in parts:
        for history in range(args.histories + 1):
            for fmt in FORMATS:
                grid_like(args.out / "sweep", f"sweep-{fmt}-h{history}", "llama.cpp", "Qwen2.5-7B", fmt,
                          ["on", "off"], history_order(episodes, history), 5, history, cache_ram=0,
                          extra={"sweep": {"format": fmt, "history": history}}, state_share=0.0, **common)
    if "reset" in parts:
        items = [f"gsm8k-{i}" for i in range(100)]
        for fmt in FORMATS:
            reset_like(args.out / "reset", f"reset-{fmt}", "Qwen2.5-7B", fmt, items, 3, 5, 60,
                       {"source": "synthetic", "items": 100})
    if "bridge" in parts:
        for model, fmt, n in BRIDGE:
            items = [f"gsm8k-{i}" for i in range(n)]
            workload = ({"source": "gsm8k", "file": str(GSM8K), "sha256": hashlib.sha256(GSM8K.read_bytes()).hexdigest(),
                         "first_item": 0, "items": n} if GSM8K.is_file() else {"source": "synthetic", "items": n})
            reset_like(args.out / "bridge", f"bridge-{model}-{fmt}-{n}", model, fmt, items, 1, 5, 120, workload)


if __name__ == "__main__":
    main()
