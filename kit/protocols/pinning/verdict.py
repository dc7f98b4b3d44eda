"""The engine owner's verdict: what the pinning results say, in a few sentences, and the pinning advice
that follows. Derived from the results table only (no records, no engine)."""

from __future__ import annotations

from collections.abc import Sequence

from kit.protocols.pinning.table import Cycle, Modal, PinningResults, StateRow, StateVerdict, Verdict, WithoutReset


def _share(summary: Modal) -> str:
    return summary.share("not measured", "{k}/{n} (95% CI {lo:.2f}-{hi:.2f})")


def transient_interloper(cycles: Sequence[Cycle]) -> bool | None:
    """Does the state a different prompt leaves give way to another state within the contaminated arm?"""
    seen = []
    for cycle in cycles:
        states = [s for s, call in zip(cycle.states, cycle.calls) if call.startswith("contaminated")]
        if states:
            seen.append(len(set(states)) > 1)
    return any(seen) if seen else None


def flips_of(states: Sequence[StateRow]) -> bool | None:
    """Does a state change flip the bytes: do the states found give different modal outputs? None with fewer than
    two states named: calls whose state is unknown say nothing of what a state change does."""
    known = [s for s in states if s.n and s.state != "unknown"]
    return len({s.modal_output for s in known}) > 1 if len(known) > 1 else None


def verdict(table: PinningResults) -> Verdict:
    states = [s for s in table.states if s.n]
    deterministic = [s.state for s in states if s.modal_share == 1.0]
    modal_by_state = {s.state: s.modal_output for s in states}
    flips = flips_of(states)
    regimes = table.regimes
    gate = table.gate
    advice: list[str] = []
    merged = (table.calibration or {}).get("merged") or []
    if not table.telemetry and merged:
        advice.append("Prefill times could not tell " + "; ".join(" and ".join(m) for m in merged) +
                      " apart on this machine: those states are reported together, not as separate states.")
    if not gate.passed:
        advice.append("Manipulation gate VOID: " + "; ".join(gate.reasons) + ".")
    if any(s.state == "unknown" for s in states):
        advice.append("Some calls could not be assigned a state: the engine reports neither cached tokens nor "
                      "a prefill time the calibration covers.")
    nondeterministic = [s for s in states if (s.modal_share or 0) < 1.0 and s.state != "unknown"]
    for s in nondeterministic:
        advice.append(f"State {s.state} is not deterministic ({_share(s)}): pinning the cache state alone "
                      "will not make this output reproducible.")
    if flips:
        advice.append("The cache state selects the bytes: " + ", ".join(f"{k} -> output {v}" for k, v in
                                                                        modal_by_state.items()) + ". Pin the regime.")
        advice.append(f"Always-fresh (reload before every call) measured {_share(regimes['always_fresh'])}; "
                      f"steady-state (one instance that sees one prompt family) measured {_share(regimes['steady'])}.")
        advice.append("Keep every other prompt (health checks, warm-up pings) away from a pinned instance, record "
                      "the state of every call next to its output hash, and re-baseline after a server restart.")
    elif flips is False:
        advice.append("Every state found gave the same output for this prompt and length: the state does not flip "
                      "these bytes here (a longer answer or a near-tie can still flip them).")
    unreset = table.without_reset
    if unreset:
        advice += _without_reset(unreset)
    if transient_interloper(table.cycles):
        advice.append("Only the first call after the different prompt shows a different prefill; later calls "
                      "reuse the KV that call built, so their prefill time looks like the pure arm's while their "
                      "cache lineage (and possibly their bytes) differs: judge the state by history, not by "
                      "prefill time alone.")
    result = Verdict(states_found=len([s for s in states if s.state != "unknown"]),
                     states={s.state: StateVerdict(modal_share=s.modal_share, n=s.n, output=s.modal_output,
                                                   prefill_ms_median=s.prefill_ms.median if s.prefill_ms else None)
                             for s in states},
                     deterministic_states=deterministic, state_change_flips_bytes=flips, gate=gate.status,
                     advice=advice)
    if unreset:
        result.impossible = [f"{i.verdict}: {i.reason}" for i in unreset.impossible]
    return result


def _without_reset(unreset: WithoutReset) -> list[str]:
    """What the calls measured where the engine could not be reset, and what cannot be known without a reset."""
    found = [s for s in unreset.states if s.state != "unknown"]
    lines = [f"No cache reset before any pass ({unreset.why}): the calls still measure what needs none."]
    if found:
        lines.append("Without a reset: " + ", ".join(f"{s.state} {_share(s)} -> output {s.modal_output}"
                                                     for s in found) + ".")
    flips = unreset.state_change_flips_bytes
    if flips is not None:
        lines.append("A state change flips the bytes here." if flips else
                     "Every state found gave the same output here: a state change did not flip these bytes.")
    shown, cycles = unreset.flip_at_interposed_only
    lines.append(f"Steady state (repeats of one prompt) measured {_share(unreset.steady)}; the flip at the "
                 f"interposed call showed in {shown} of {cycles} cycles (no gate: not the registered endpoint).")
    lines += [f"Impossible without a reset: {i.verdict} ({i.reason})." for i in unreset.impossible]
    return lines
