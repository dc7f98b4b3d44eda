"""results/ladder.json as one typed model (kit.protocols.results_model): the ladder's arithmetic
(kit.protocols.ladder.contrasts) makes its rows, its results module writes it, its view and headline read it. The
fields are declared in the order they are written, so the file's bytes are those of earlier kits."""

from __future__ import annotations

from kit.protocols.results_model import Count, JsonObject, Number, Part, Results


class FirstDifference(Part):
    """Where the first treated output that differs from its reference first differs: unit, trial, token."""

    unit: str
    trial: Count
    token: Count


class Cost(Part):
    """What a fix's served requests cost: mean seconds per request and generated tokens per second."""

    requests: Count
    latency_s: Number
    tokens_per_s: Number


class ContrastRow(Part):
    """One contrast (a rung's, or a fix's): its status (holds / diverges / VOID / not measured) and why, its
    byte-identical share with its Wilson interval, unique outputs per prompt, log-probabilities equal, first
    difference, largest log-probability gap, whether its control reproduced, and for fixes the cost of its
    served requests beside the unfixed arm's."""

    rung: str
    what: str
    fix: str | None = None
    note: str | None = None
    pairs: Count = 0
    identical: Count = 0
    identical_share: Number | None = None
    interval: list[Number] = []
    logprobs_equal: Count = 0
    unique_max: Count = 0
    unique_mean: Number = 0.0
    prompts: Count = 0
    first_difference: FirstDifference | None = None
    max_logprob_gap: Number | None = None
    control: bool | None = None
    cost: Cost | None = None
    status: str
    reason: str | None = None
    latency_ratio: Number | None = None
    throughput_change_pct: Number | None = None

    @property
    def measured(self) -> bool:
        return self.status != "not measured"


class LadderHeadline(Part):
    """"invariant through L<k>" (`through`: None where not even L0 holds) and every rung's own status."""

    through: str | None = None
    rungs: dict[str, str]
    text: str


class LadderResults(Results):
    """results/ladder.json."""

    design: JsonObject  # the manifest's ladder design, as the run planned it
    headline: LadderHeadline
    rungs: list[ContrastRow]
    fixes: list[ContrastRow]
    closes_L2: list[str] = []
    void_passes: list[str] = []
