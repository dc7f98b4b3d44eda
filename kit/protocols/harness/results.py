"""What seed 002's determinism-harness reports say of a study, recomputed from its imported calls.

Read from the run folder only (records/calls.jsonl and the manifest's `protocol.resolved`), so `kit
verify` recomputes it. A study may span several boxes (machines): every call keeps its box, and the
table holds, like the harness's reports, one block per box (`boxes.<box>`: its arms, gates and the
mode's estimator), the same arms over the whole study (`arms`, `gates`, `arms_differ`), the report's
`totals` over all boxes, and the boxes compared with each other (`cross_box`). Each value is named and
defined as the harness's analyzer for the run's mode defines it (kit.protocols.harness.modes), so the
report's values can be compared path by path (kit.protocols.harness.report).

Per arm (the call's `meta_arm`, else its cell's `key=value` suffix; controls are never counted), as the
harness's validity gate and cell metrics define them:
- `n_raw`; `flags`: `negative_control_failed` when the arm's calls carry more than one request sha256 or
  wire sha256 (then no call of the arm is valid), `wire_mismatch` when more than one wire sha256,
  `response_models` (sorted, of the valid calls) and `model_drift` (more than one of them);
- `excluded`: `error` (`ok` false), `truncated_or_other_stop` (a stop other than `stop`);
- `metrics` (valid calls only, absent when none): `n`, the modal output (the most frequent text, a tie
  going to the lexicographically smallest) and its `modal_count`, `modal_share` and `modal_sha256`,
  `distinct_count`, `all_identical`, `pairwise_agreement` (share of ordered pairs of calls with the same
  text; 1.0 for one call), `divergence_char_indices` (for each non-modal output, the first character
  at which it departs from the modal one, or the shorter length; one entry per output, repeats
  included, sorted as the harness sorts them), `norm_distance_mean_all` and `norm_distance_max` (each
  output's Levenshtein distance from the modal one over the longer length, 0 for the modal outputs;
  distances of 512 or more count as 512 and set `any_distance_capped`), `output_token_variance`
  (population variance of the known `output_tokens`);
- `prefill_ms` (median, min, max of Ollama's `prompt_eval_duration_ns` / 10^6, a missing one as 0).

The kit's own additions, per box: the prefill classes it finds without thresholds (arms whose prefill
ranges overlap are one class, kit.record.cache_state.separation) and, with `--thresholds LOW,HIGH`, the arm
metrics per prefill state (`below` LOW, `between`, `above` HIGH ms).

Run folders imported by earlier releases (no `definitions` in `protocol.resolved`) keep the table as
those releases computed it (kit.protocols.harness.results_v1), so their bundles still verify.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path

from rapidfuzz.distance import Levenshtein

from kit.protocols.harness import results_v1 as harness_v1
from kit.protocols.harness.report import compare
from kit.protocols.harness.record import Call, Resolved, read_calls
from kit.protocols.harness.table import (Arm, CrossArm, CrossBox, Flags, HarnessResults, HarnessRunV1, HarnessStudy,
                                         Metrics, Prefill)
from kit.protocols.harness.modes import (BoxCalls, KitExtras, box_of, kit_classes, median, mode_of, prefill_ms,
                                         prefill_state)
from kit.core.atomic_file import write_json_atomic
from kit.core.digests import sha256_text
from kit.record.manifest import Manifest
from kit.core.paths import RunPaths

TABLE = "harness"
RESULTS = RunPaths.result_name("harness")
CALLS = RunPaths.records_name("calls")
DEFINITIONS = 2  # the version of these definitions, in `protocol.resolved.definitions` of every new import
DISTANCE_CAP = 512  # the harness's cap on an edit distance

def validity(calls: list[Call]) -> tuple[list[Call], dict[str, int], Flags]:
    """The valid calls of one arm, its `excluded` counts and its `flags`, by the harness's validity gate."""
    excluded = {"error": 0, "truncated_or_other_stop": 0}
    wires = {c.wire_sha256 for c in calls if c.wire_sha256}
    if len({c.prompt_sha256 for c in calls}) > 1 or len(wires) > 1:
        return [], excluded, Flags(negative_control_failed=True, wire_mismatch=len(wires) > 1, model_drift=False,
                                   response_models=[])
    valid = []
    for call in calls:
        if not call.ok:
            excluded["error"] += 1
        elif call.stop_reason != "stop":
            excluded["truncated_or_other_stop"] += 1
        else:
            valid.append(call)
    models = sorted({c.response_model for c in valid if c.response_model})
    return valid, excluded, Flags(negative_control_failed=False, wire_mismatch=False, model_drift=len(models) > 1,
                                  response_models=models)


def first_difference(modal: str, text: str) -> int:
    """The first character index where `text` departs from `modal` (the shorter length if one is a prefix)."""
    return next((i for i, (a, b) in enumerate(zip(modal, text)) if a != b), min(len(modal), len(text)))


def distance(modal: str, text: str) -> tuple[float, bool]:
    """Levenshtein distance over the longer length, distances of DISTANCE_CAP or more counted as the cap."""
    found = Levenshtein.distance(modal, text, score_cutoff=DISTANCE_CAP - 1)
    capped = found > DISTANCE_CAP - 1
    longer = max(len(modal), len(text))
    return ((DISTANCE_CAP if capped else found) / longer if longer else 0.0), capped


def output_metrics(texts: list[str], tokens: list[int | float | None] | None = None) -> Metrics:
    """The harness's metrics of one group of valid outputs (`texts` not empty)."""
    n, counts = len(texts), Counter(texts)
    top = max(counts.values())
    modal = min(text for text, count in counts.items() if count == top)
    pairs = n * (n - 1)
    others = {text: count for text, count in counts.items() if text != modal}  # each distinct output once
    distances = {text: distance(modal, text) for text in others}
    known = [t for t in tokens or [] if t is not None]
    return Metrics(n=n, modal_count=top, modal_share=top / n, modal_sha256=sha256_text(modal),
                   distinct_count=len(counts), all_identical=len(counts) == 1,
                   pairwise_agreement=sum(c * (c - 1) for c in counts.values()) / pairs if pairs else 1.0,
                   divergence_char_indices=sorted(index for text, count in others.items()
                                                  for index in [first_difference(modal, text)] * count),
                   norm_distance_mean_all=sum(distances[text][0] * count for text, count in others.items()) / n,
                   norm_distance_max=max((d for d, _ in distances.values()), default=0.0),
                   any_distance_capped=any(capped for _, capped in distances.values()),
                   output_token_variance=statistics.pvariance(known) if known else None)


def metrics_of(valid: list[Call]) -> Metrics:
    return output_metrics([c.text for c in valid], [c.usage.output_tokens if c.usage else None for c in valid])


def arm_entry(calls: list[Call]) -> tuple[list[Call], Arm]:
    """(valid calls, the arm's block as the harness's reports write it: `metrics` only where it has valid calls)."""
    valid, excluded, flags = validity(calls)
    times = [prefill_ms(c) for c in valid]
    prefill = Prefill(median=median(times), min=min(times, default=None), max=max(times, default=None))
    return valid, Arm.of({"n_raw": len(calls), "excluded": excluded, "flags": flags, "prefill_ms": prefill,
                          **({"metrics": metrics_of(valid)} if valid else {})})


def arm_of(call: Call) -> str:
    return call.arm or "(none)"


def modal(entry: Arm) -> str | None:
    return entry.metrics.modal_sha256 if entry.metrics else None


def cross_box(by_box: dict[str, dict[str, list[Call]]]) -> CrossBox:
    """Per arm measured on two boxes or more: does every box produce the same modal bytes; which outputs
    the boxes share; what share of each box's valid calls produced an output another box produced too."""
    arms = {}
    for arm in sorted({arm for valid in by_box.values() for arm in valid}):
        seen = {box: Counter(c.output_sha256 for c in valid[arm]) for box, valid in by_box.items()
                if valid.get(arm)}
        if len(seen) < 2:
            continue
        modals = {box: metrics_of(by_box[box][arm]).modal_sha256 for box in seen}
        shared = set.intersection(*(set(counts) for counts in seen.values()))
        arms[arm] = CrossArm(modal_sha256=modals, same_modal_bytes=len(set(modals.values())) == 1,
                             shared_variants=len(shared),
                             records_matched_in_other_boxes={
                                 box: sum(n for sha, n in counts.items()
                                          if any(sha in other for b, other in seen.items() if b != box))
                                 / sum(counts.values())
                                 for box, counts in seen.items()})
    boxes = sorted(by_box)
    if len(boxes) < 2:
        return CrossBox(boxes=boxes, arms={}, because="one box: nothing to compare it with")
    return CrossBox(boxes=boxes, arms=arms,
                    same_modal_bytes_every_arm=all(a.same_modal_bytes for a in arms.values()) if arms else None)


def _kit_extras(raw: dict[str, list[Call]], thresholds: list[float] | None) -> KitExtras:
    """The kit's own per-box additions: its prefill classes, and the metrics per prefill state."""
    extras = KitExtras(prefill_classes=kit_classes(raw))
    if thresholds:
        low, high = thresholds

        def state(call: Call) -> str:
            return prefill_state(call.prefill_ms, low, high)

        extras["by_state"] = {arm: {s: arm_entry([c for c in calls if state(c) == s])[1]
                                    for s in sorted({state(c) for c in calls})}
                              for arm, calls in sorted(raw.items())}
    return extras


def compute(records: list[Call], resolved: Resolved) -> HarnessResults:
    """The harness table of a run's calls (`records`, in execution order, every box)."""
    if resolved.definitions is None:
        return harness_v1.compute(records, resolved)
    mode = mode_of(resolved.mode or "", records)
    thresholds = resolved.thresholds
    measured = [r for r in records if not r.control and mode.counts(r)]
    left_out = Counter(arm_of(r) for r in records if not r.control and not mode.counts(r))
    boxes, valid_by_box, arms_by_box = {}, {}, {}
    for box in sorted({box_of(r) for r in measured}):
        raw = defaultdict(list)
        for call in measured:
            if box_of(call) == box:
                raw[arm_of(call)].append(call)
        valid, arms = {}, {}
        for arm in mode.arms or sorted(raw):
            valid[arm], arms[arm] = arm_entry(raw.get(arm, []))
        boxes[box] = mode.box(BoxCalls(box, dict(raw), valid, arms, [r for r in records if box_of(r) == box],
                                       thresholds, _kit_extras(dict(raw), thresholds)))
        valid_by_box[box], arms_by_box[box] = valid, arms
    pooled = defaultdict(list)
    for call in measured:
        pooled[arm_of(call)].append(call)
    if len(boxes) == 1:  # the study is its one box: its arms' blocks, without what the mode added per box
        arms = next(iter(arms_by_box.values()))
    else:
        arms = {arm: arm_entry(pooled.get(arm, []))[1] for arm in mode.arms or sorted(pooled)}
    gates = [b.gates.manipulation.pass_ for b in boxes.values()]
    passed = None if not gates or None in gates else all(gates)
    one_request = len({c.prompt_sha256 for c in measured}) == 1
    modals = {modal(entry) for entry in arms.values()}
    return HarnessStudy.of({
        "table": TABLE, "definitions": DEFINITIONS, "mode": resolved.mode, "kind": mode.name,
        "files": {"harness": RESULTS}, "totals": mode.totals(records), "thresholds_ms": thresholds,
        "boxes": boxes, "arms": arms,
        "gates": {"cross_arm_negative_control": one_request,
                  "manipulation": {"pass": passed, "by_box": {box: gates[i] for i, box in enumerate(boxes)},
                                   "rule": "every box's manipulation gate passed (boxes.<box>.gates)"}},
        "arms_differ": (len(modals) > 1) if passed and one_request and None not in modals else None,
        "arms_left_out": dict(sorted(left_out.items())),  # calls of arms not the mode's, left out as the harness does
        "cross_box": cross_box(valid_by_box), **mode.study(records),
        "not_computed": mode.not_computed})


def results(run_dir: Path) -> HarnessResults:
    """Compute the harness table from the run folder and write results/harness.json through its model
    (kit.protocols.harness.table); with the harness's own report imported beside the calls, the table says value
    by value where they agree. Returns the table as written."""
    manifest = Manifest.load(run_dir)
    resolved = Resolved.of(manifest.run.protocol.resolved, str(run_dir))
    computed = compute(read_calls(run_dir / CALLS), resolved)
    table = {"run_id": manifest.run_id, **computed.to_json()}
    if resolved.report:
        report = json.loads((run_dir / resolved.report).read_text())
        if isinstance(computed, HarnessRunV1):
            table["report_comparison"] = harness_v1.compare(computed, report, resolved.box)
        elif isinstance(computed, HarnessStudy):
            table["report_comparison"] = compare(computed, report)
    written = HarnessResults.of(table, str(run_dir / RESULTS))
    RunPaths(run_dir).results.mkdir(exist_ok=True)
    write_json_atomic(run_dir / RESULTS, written.to_json())
    return written
