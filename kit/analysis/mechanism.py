"""Mechanism inputs from top-k log-probabilities (paper §IV-D, Fig. 3).

At every position where the cache-hit path and the recompute path saw the same prompt and the same
preceding tokens:

* the recompute path's top-two margin, top-1 minus top-2 log-probability (a log-softmax difference,
  so equal to the logit difference);
* whether the token flipped there (the first position where the two paths emit different tokens;
  after it the prefixes differ, so the walk stops for that request, and for the episode once prompts
  differ);
* |Δmargin| = |margin on the hit path − margin on the recompute path| at positions that did not flip,
  only in requests that really hit the cache (cached tokens > 0 on the hit path).

Positions are log-probability records (llama.cpp folds a token that ends inside a UTF-8 character into
the next record). Margins need top-2; both passes must have been recorded at the same top-k depth,
because llama.cpp's reported log-probabilities depend in their last bits on that depth.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kit.protocols.passes import Margins, PassData, Request

NEAR_TIE = 0.1


class MechanismSkip(Exception):
    """The passes cannot give mechanism inputs (too shallow or unequal top-k); the message says why."""


@dataclass
class Positions:
    """Position-level rows of one comparison (hit path vs recompute path), clustered by episode."""

    episode: list[str] = field(default_factory=list)
    margin: list[float] = field(default_factory=list)
    flipped: list[int] = field(default_factory=list)
    delta: list[float] = field(default_factory=list)  # NaN where flipped or not a cache hit
    requests_compared: int = 0
    cache_hit_requests: int = 0
    length_only_differences: int = 0
    depths: set = field(default_factory=set)  # top-k depths the positions were recorded at

    def extend(self, other: Positions) -> None:
        for name in ("episode", "margin", "flipped", "delta"):
            getattr(self, name).extend(getattr(other, name))
        self.requests_compared += other.requests_compared
        self.cache_hit_requests += other.cache_hit_requests
        self.length_only_differences += other.length_only_differences
        self.depths |= other.depths

    def arrays(self) -> dict[str, np.ndarray]:
        return {"episode": np.asarray(self.episode), "margin": np.asarray(self.margin, dtype=float),
                "flipped": np.asarray(self.flipped, dtype=int), "delta": np.asarray(self.delta, dtype=float)}


def check_depth(hit: PassData, recompute: PassData) -> int:
    """The common top-k depth of two passes; raises MechanismSkip if it differs or is below 2."""
    depths = {r.top_k for p in (hit, recompute) for rs in p.units.values() for r in rs}
    if len(depths) != 1:
        raise MechanismSkip(f"passes {hit.pass_id} and {recompute.pass_id} were recorded at different top-k "
                            f"depths {sorted(map(str, depths))}; log-probabilities compare only at equal depth")
    depth = depths.pop()
    if depth is None or depth < 2:
        raise MechanismSkip(f"top-{depth} log-probabilities: the top-two margin needs top-2 or deeper")
    return depth


def compare_request(episode: str, hit: Request, recompute: Request, out: Positions) -> bool:
    """Add the positions of one request pair with identical prompts; True if a token flipped."""
    out.requests_compared += 1
    is_hit = bool(hit.cached_tokens)
    out.cache_hit_requests += is_hit
    if isinstance(hit.logprobs, Margins) and isinstance(recompute.logprobs, Margins):
        hit.logprobs.pair(recompute.logprobs)  # one parse where both paths recorded the same bytes
    for (key_h, margin_h), (key_r, margin) in zip(hit.logprobs or (), recompute.logprobs or ()):
        if not math.isfinite(margin):
            continue
        flipped = key_h != key_r
        out.episode.append(episode)
        out.margin.append(max(margin, 0.0))
        out.flipped.append(int(flipped))
        out.delta.append(abs(margin_h - margin) if is_hit and not flipped else float("nan"))
        if flipped:
            return True
    if len(hit.logprobs or ()) != len(recompute.logprobs or ()):
        out.length_only_differences += 1
        return True
    return False


def episode_positions(episode: str, hit: list[Request], recompute: list[Request]) -> Positions:
    """Walk an episode's requests in lockstep while both paths sent the same prompt."""
    out = Positions()
    for h, r in zip(hit, recompute):
        if h.prompt_sha256 != r.prompt_sha256 or compare_request(episode, h, r, out):
            break
    return out


def pass_positions(hit: PassData, recompute: PassData, cluster_prefix: str = "") -> Positions:
    """Positions of every episode in both passes (hit path `hit`, recompute path `recompute`)."""
    out = Positions(depths={check_depth(hit, recompute)})
    for unit in hit.order:
        if unit in recompute.units:
            out.extend(episode_positions(cluster_prefix + unit, hit.units[unit], recompute.units[unit]))
    return out


def item_positions(session: PassData, cluster_prefix: str = "") -> Positions:
    """Single-turn items (reset control / GSM8K bridge): the first warm request against the first cold one."""
    depths = {r.top_k for rs in session.units.values() for r in rs}
    if len(depths) != 1 or (next(iter(depths)) or 0) < 2:
        raise MechanismSkip(f"session {session.pass_id}: top-k depth {sorted(map(str, depths))}; "
                            "the top-two margin needs one depth of 2 or more")
    out = Positions(depths=set(depths))
    for unit in session.order:
        requests = session.units[unit]
        cold = [r for r in requests if r.expect == "cold"]
        warm = [r for r in requests if r.expect == "warm"]
        if cold and warm and cold[0].prompt_sha256 == warm[0].prompt_sha256:
            compare_request(cluster_prefix + unit, warm[0], cold[0], out)
    return out


def describe(values: np.ndarray) -> dict[str, Any]:
    """Median, quartiles and 10th/90th percentiles with the count behind them (Fig. 3b)."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {"n": 0}
    p10, q1, med, q3, p90 = (float(x) for x in np.percentile(v, [10, 25, 50, 75, 90]))
    return {"n": int(v.size), "median": med, "q1": q1, "q3": q3, "p10": p10, "p90": p90, "mean": float(v.mean())}


def summarize(by_format: dict[str, Positions], formats: Iterable[str], replicates: int, seed: int) -> dict[str, Any]:
    """Flip hazard by margin, near-tie share and |Δmargin| per format, with episode-bootstrap intervals,
    ratios to the first format and Page's trend test across formats (three or more)."""
    from kit.stats import flip_hazard_by_margin  # noqa: PLC0415

    order = [f for f in formats if f in by_format and by_format[f].episode]
    depths = sorted({d for f in order for d in by_format[f].depths})
    result: dict[str, Any] = {"formats": order, "near_tie_below": NEAR_TIE, "per_format": {},
                              "top_k": depths[0] if len(depths) == 1 else depths}
    if not order:
        return result
    rows = {f: by_format[f].arrays() for f in order}
    for f in order:
        a, p = rows[f], by_format[f]
        flipped = a["flipped"] == 1
        result["per_format"][f] = {
            "positions": int(a["margin"].size), "flips": int(flipped.sum()),
            "episodes": int(np.unique(a["episode"]).size), "requests_compared": p.requests_compared,
            "cache_hit_requests": p.cache_hit_requests, "length_only_differences": p.length_only_differences,
            "near_tie_positions": int((a["margin"] < NEAR_TIE).sum()),
            "margin_at_flips": describe(a["margin"][flipped]),
            "delta_margin": describe(a["delta"]),
            "hazard": flip_hazard_by_margin(a["margin"], a["flipped"], a["episode"], replicates=replicates,
                                            seed=seed).to_json(),
        }
    ep_plain = np.concatenate([rows[f]["episode"].astype(str) for f in order])
    group = np.concatenate([np.full(rows[f]["margin"].size, f) for f in order])
    margin = np.concatenate([rows[f]["margin"] for f in order])
    delta = np.concatenate([rows[f]["delta"] for f in order])
    near = (margin < NEAR_TIE).astype(float)
    if len(depths) > 1:
        result["skipped"] = f"formats were recorded at different top-k depths {depths}: no cross-format comparison"
        return result
    with np.errstate(invalid="ignore", divide="ignore"):
        _compare_formats(result, near, delta, ep_plain, group, order, replicates, seed)
    return result


def _compare_formats(result: dict[str, Any], near, delta, episode, group, order: list[str], replicates: int,
                     seed: int) -> None:
    """Near-tie share and mean |Δmargin| per format, paired by episode, ratios to the first format, and
    Page's trend test across three or more formats."""
    from kit.stats import (  # noqa: PLC0415
        StatsInputError,
        compare_episode_means,
        episode_mean_table,
        page_trend,
    )

    has_delta = np.isfinite(delta)
    try:
        result["near_tie_share"] = compare_episode_means(near, episode, group, order[0], order, replicates,
                                                         seed).to_json()
        if has_delta.any() and order[0] in set(group[has_delta].tolist()):
            result["delta_margin_mean"] = compare_episode_means(delta[has_delta], episode[has_delta],
                                                                group[has_delta], order[0], order, replicates,
                                                                seed).to_json()
        if len(order) >= 3:
            table, _, _ = episode_mean_table(near, episode, group, order)
            result["near_tie_page"] = page_trend(table).to_json()
            if has_delta.any():
                table, _, _ = episode_mean_table(delta[has_delta], episode[has_delta], group[has_delta], order)
                result["delta_margin_page"] = page_trend(table).to_json()
    except StatsInputError as exc:
        result["skipped"] = f"cross-format comparison: {exc.line()}"
