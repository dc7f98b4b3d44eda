"""Alarms over a stream of calls, in the order they were answered; the proxy raises them live and the
`watch` kind's results recompute them from the records (one definition, here).

Only greedy or seeded calls that got an answer count. For each request hash the tracker keeps the outputs
seen in each cache state (a state the call could not be classified in counts as "unknown"):

- `determinism`: an output differs from one already seen *in the same state* (a state that is not
  "unknown"): a determinism violation;
- `state_mixture`: an output differs from those seen *in other states*, and its own state had none yet:
  the request's answer depends on the serving state (seed 002's mixture);
- `unexplained`: an output differs from one already seen and the state is unknown;
- `state_jump` (only with `pinned`: the upstream is one pinned instance): the same request lands in another
  known state than on its previous call, and that previous state was not `full_eval` (a cold start warming
  up is expected; a warm instance losing its state is the jump seed 002 measured).

An alarm is raised once per new output of a request (an output already seen for it raises nothing again).

The tracker remembers at most `cap` requests (None: all; a live proxy must bound its memory, about 1 KiB a
request): past it, the request seen least recently is forgotten (`forgotten` counts them), and a later call
of a forgotten request starts afresh, as its first. The cap is part of the definition: the watch kind's
results recompute the alarms with the cap the proxy ran with (its manifest's `bounds.alarm_requests`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

KINDS = ("state_mixture", "determinism", "unexplained", "state_jump")
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Call:
    """What the tracker needs of one call."""

    request_sha256: str
    decoding: str | None
    state: str | None
    output: str | None  # the output's identity (text and token hashes), None when there was no answer


@dataclass
class _Seen:
    outputs: dict[str, set[str]] = field(default_factory=dict)  # state -> outputs
    last_state: str | None = None


@dataclass
class Tracker:
    """Alarms over calls in answer order (`see` one call at a time)."""

    pinned: bool = False
    cap: int | None = None  # requests remembered (None: all), the least recently seen forgotten first
    seen: OrderedDict[str, _Seen] = field(default_factory=OrderedDict)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    forgotten: int = 0

    def see(self, call: Call) -> list[str]:
        """The alarms this call raises (and counts them)."""
        if call.decoding is None or call.output is None:
            return []
        entry = self.seen.get(call.request_sha256)
        if entry is None:
            entry = self.seen[call.request_sha256] = _Seen()
            if self.cap is not None and len(self.seen) > self.cap:
                self.seen.popitem(last=False)
                self.forgotten += 1
        else:
            self.seen.move_to_end(call.request_sha256)
        state = call.state or UNKNOWN
        raised = []
        known = {output for outputs in entry.outputs.values() for output in outputs}
        if known and call.output not in known:
            same = entry.outputs.get(state, set())
            if state == UNKNOWN:
                raised.append("unexplained")
            elif same:
                raised.append("determinism")
            else:
                raised.append("state_mixture")
        if (self.pinned and call.state and entry.last_state not in (None, UNKNOWN, "full_eval")
                and call.state != entry.last_state):
            raised.append("state_jump")
        entry.outputs.setdefault(state, set()).add(call.output)
        if call.state:
            entry.last_state = call.state
        for kind in raised:
            self.counts[kind] += 1
        return raised
