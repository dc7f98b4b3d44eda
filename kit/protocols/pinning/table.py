"""results/pinning.json as one typed model (kit.protocols.results_model): kit.protocols.pinning.results writes it,
its verdict, its view (`kit check`, the launcher) and its headline (`kit show`, the bundle's report) read it. The
fields are declared in the order the results module writes them, so the file's bytes are those of earlier kits."""

from __future__ import annotations

from kit.protocols.results_model import Count, JsonObject, Number, Part, Results, field_alias, said_not_ok


class Modal(Part):
    """The modal output of some calls and its share with a Wilson 95% interval (`n` alone where there are none)."""

    n: Count
    distinct: Count | None = None
    modal_output: str | None = None  # a label ("A") once written; the output's sha256 while it is computed
    modal_count: Count | None = None
    modal_share: Number | None = None
    wilson95: list[Number] = []

    def share(self, empty: str, form: str) -> str:
        """`empty` where nothing was measured; else `form` with {k}, {n}, {lo} and {hi} filled in."""
        if not self.n or len(self.wilson95) != 2:
            return empty
        lo, hi = self.wilson95
        return form.format(k=self.modal_count, n=self.n, lo=lo, hi=hi)


class PrefillMs(Part):
    min: Number
    median: Number
    max: Number


class _StateHead(Part):
    state: str
    roles: list[str] = []
    prefill_ms: PrefillMs | None = None


class StateRow(Modal, _StateHead):
    """One cache state found (KV lineage included): the roles of its calls, their prefill times, their modal output."""


class Regime(Modal):
    """A pinned regime (always fresh, steady state): its modal output, the states of its calls, its VOID passes."""

    states: dict[str, Count] = {}
    void_passes: list[str] = []


class Fork(Part):
    """Where the two arms' modal outputs first differ, with the text around it."""

    char: Count | None = None
    token: Count | None = None
    context: str | None = None
    a_continues: str | None = None
    b_continues: str | None = None


class Arms(Part):
    """The pure and the contaminated arm's modal outputs, whether they differ and where they fork; `withheld`
    says why not where the gate is VOID."""

    pure: Modal
    contaminated: Modal
    differ: bool | None = None
    fork: Fork | None = None
    withheld: str | None = None


class Gate(Part):
    """The manipulation gate: PASS, or VOID with its reasons."""

    status: str
    gate_on: str | None = None
    reloads_confirmed: list[Count] = []
    arm_states: dict[str, list[str]] = {}
    arm_prefill_times: JsonObject | None = None  # kit.record.cache_state.separation(...).to_json()
    reasons: list[str] = []

    @property
    def passed(self) -> bool:
        return self.status == "PASS"


class Cycle(Part):
    """One OK cycle's measured calls: their outputs, states and prefill times, and where the output flipped."""

    pass_: str = field_alias("pass")
    calls: list[str]
    outputs: list[str]
    states: list[str]
    prefill_ms: list[Number | None]
    flips: list[str]
    flip_at_interposed_only: bool


class PinningPass(Part):
    pass_: str = field_alias("pass")
    phase: str | None = None
    status: str | None = None
    reason: str | None = None
    reload_confirmed: bool = False


class Impossible(Part):
    """A verdict that cannot be reached without a reset, and why."""

    verdict: str
    reason: str


class WithoutReset(Part):
    """What the calls of passes no reset preceded measure (kit.protocols.pinning.results)."""

    passes: list[str]
    why: str
    states: list[StateRow]
    state_change_flips_bytes: bool | None = None
    steady: Regime
    cycles: list[Cycle]
    flip_at_interposed_only: list[Count]
    impossible: list[Impossible]


class EngineEntry(Part):
    kind: str | None = None
    url: str | None = None
    model: str | None = None
    cache_ram: Number | None = None
    engine: str | None = None


class StateVerdict(Part):
    modal_share: Number | None = None
    n: Count
    output: str | None = None
    prefill_ms_median: Number | None = None


class Verdict(Part):
    """The engine owner's verdict (kit.protocols.pinning.verdict): the states, the gate and the advice."""

    states_found: Count
    states: dict[str, StateVerdict]
    deterministic_states: list[str]
    state_change_flips_bytes: bool | None = None
    gate: str
    advice: list[str]
    impossible: list[str] = []


class PinningResults(Results):
    """results/pinning.json."""

    engine: EngineEntry
    telemetry: bool
    calibration: JsonObject | None = None  # kit.record.cache_state.Calibration.to_json()
    outputs: dict[str, str]  # label -> output sha256
    passes: list[PinningPass]
    states: list[StateRow]
    gate: Gate
    arms: Arms
    cycles: list[Cycle]
    regimes: dict[str, Regime]
    without_reset: WithoutReset | None = None  # absent where some pass is OK
    verdict: Verdict | None = None  # set last: it reads the rest

    def not_ok(self) -> list[tuple[str, str, str]]:
        return said_not_ok((p.pass_, p.status, p.reason) for p in self.passes)
