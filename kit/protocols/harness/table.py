"""The harness table (results/harness.json) as a typed model, in its two layouts: a study of one or more boxes
(`HarnessStudy`, every import since the harness's own definitions per mode: `definitions` set) and the first
layout (`HarnessRunV1`, run folders imported by earlier releases: no `definitions`). `HarnessResults.of` reads a
table as the one its `definitions` say it is.

A harness table is not written in one fixed key order: its run id comes before its `table` name, and what a mode
adds (its gate's values before `pass` and `rule`, its estimator, its cycles, its study-wide blocks) sits where that
mode's analyzer put it. So every part keeps its keys in the order they were read or built (`Kept`), and is
written in that order: the bytes are those earlier kits wrote (tests/protocols/test_harness_table.py).
The values the view, the headline and `kit verify` read are declared and typed, and the table's builders
(kit.protocols.harness.results, results_v1, modes, report) make these models directly; what only one mode writes
(its gate's own values, the churn decomposition, the margins cells: TypedDicts where kit.protocols.harness.modes
builds them) is kept as read.
"""

from __future__ import annotations

from typing import Any, NotRequired, Self

from pydantic import (JsonValue, ModelWrapValidatorHandler, PrivateAttr, SerializerFunctionWrapHandler,
                      model_serializer, model_validator)
from typing_extensions import TypedDict  # pydantic reads a TypedDict of typing_extensions before Python 3.12

from kit.protocols.results_model import Count, Number, Part, Results, field_alias


Totals = dict[str, Count | dict[str, Count]]  # a report's totals: counts by name, or by name per kind (controls)


class Kept(Part):
    """A part written with its keys in the order they were read (or given), declared ones included."""

    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _read_order(cls, data: object, handler: ModelWrapValidatorHandler[Self]) -> Self:
        model = handler(data)
        if isinstance(data, dict) and isinstance(model, Kept):
            model._order = tuple(data)  # noqa: SLF001 - its own class, set as it is read
        return model

    @model_serializer(mode="wrap")
    def _in_order(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not self._order or not isinstance(data, dict):
            return data
        return {**{key: data[key] for key in self._order if key in data},
                **{key: value for key, value in data.items() if key not in self._order}}


class Prefill(Kept):
    """Median, min and max of the valid calls' prefill in ms (None: no valid call)."""

    median: Number | None = None
    min: Number | None = None
    max: Number | None = None


class Outputs(Kept):
    """What both layouts say of one arm's valid outputs: how many, how many distinct, the modal one and its share."""

    n: Count
    modal_share: Number | None = None
    modal_sha256: str | None = None
    distinct_count: Count


class Metrics(Outputs):
    """The harness's metrics of one arm's valid outputs (kit.protocols.harness.results.output_metrics)."""

    modal_sha256: str
    modal_count: Count
    all_identical: bool
    pairwise_agreement: Number | None = None
    divergence_char_indices: list[Count] = []
    norm_distance_mean_all: Number | None = None
    norm_distance_max: Number | None = None
    any_distance_capped: bool | None = None
    output_token_variance: Number | None = None


class Flags(Kept):
    """The validity gate's flags of one arm."""

    negative_control_failed: bool
    wire_mismatch: bool
    model_drift: bool
    response_models: list[str]


class LoadDuration(Kept):
    """churn-ab's median and longest model load of one arm's valid calls, in s (None: no valid call)."""

    median: Number | None = None
    max: Number | None = None


class Arm(Kept):
    """One arm of a study's box (or of the whole study): its calls, exclusions, flags, prefill and, where it has
    valid calls, its metrics (churn-ab adds its load durations)."""

    n_raw: Count
    excluded: dict[str, Count]
    flags: Flags
    prefill_ms: Prefill | None = None
    metrics: Metrics | None = None
    load_duration_s: LoadDuration | None = None


class Gate(Kept):
    """A manipulation gate: the mode's own values, whether it passed (None: not evaluated) and its rule;
    over a study, each box's verdict (`by_box`)."""

    pass_: bool | None = field_alias("pass")
    rule: str | None = None
    by_box: dict[str, bool | None] | None = None


class Gates(Kept):
    cross_arm_negative_control: bool
    manipulation: Gate


class Estimate(Kept):
    """churn-ab's Wald difference of the modal shares, churn minus blocked."""

    diff: Number
    se: Number
    ci95: list[Number]


class Cycle(Kept):
    """One cache-instance cycle: its reset, its arms' calls and whether the output flipped at the flusher."""

    cycle: int | None = None
    burnin_reset_confirmed: bool | None = None
    burnin_prefill_ms: Number | None = None
    pure_uniform: bool | None = None
    pure_n: Count | None = None
    contaminated_uniform: bool | None = None
    contaminated_n: Count | None = None
    flip_at_flusher: bool


class PrefillClasses(Kept):
    """The kit's prefill classes, found without thresholds (kit.record.cache_state.separation)."""

    rule: str | None = None
    classes: list[list[str]] = []


class Box(Kept):
    """One box of a study: its arms, gates, whether its arms differ, the mode's estimator and cycles, and the
    kit's own additions (prefill classes, and per prefill state with --thresholds)."""

    arms: dict[str, Arm]
    gates: Gates
    arms_differ: bool | None = None
    cycles: list[Cycle] = []
    churn_minus_blocked: Estimate | None = None
    prefill_classes: PrefillClasses | None = None
    by_state: dict[str, dict[str, Arm]] | None = None


class CrossArm(Kept):
    """One arm measured on two boxes or more: each box's modal output and what the boxes share."""

    modal_sha256: dict[str, str]
    same_modal_bytes: bool
    shared_variants: Count
    records_matched_in_other_boxes: dict[str, Number]


class CrossBox(Kept):
    boxes: list[str]
    arms: dict[str, CrossArm]


class Row(TypedDict):
    """One value of the harness's report beside the kit's: its path, both values (the kit's None where it has none),
    whether they agree (None: not compared) and, where they were not compared or the box was not imported, why."""

    value: str
    report: JsonValue
    kit: JsonValue
    agree: bool | None
    because: NotRequired[str]


class ReportComparison(Kept):
    """The harness's own report beside the kit's values (kit.protocols.harness.report; the first layout:
    results_v1.compare): how many values were compared and agree, which differ, which the kit does not compute."""

    compared: Count
    agree: Count
    differ: list[str]
    not_computed: dict[str, str] = {}
    rows: list[Row] = []


class HarnessResults(Results, Kept):
    """results/harness.json: read by `of` as the layout its `definitions` say it is."""

    mode: str | None = None
    gates: Gates
    arms_differ: bool | None = None
    report_comparison: ReportComparison | None = None

    @classmethod
    def of(cls, data: Any, source: str = "results table") -> Self:
        if cls is HarnessResults and isinstance(data, dict):
            layout = HarnessRunV1 if data.get("definitions") is None else HarnessStudy
            return layout.of(data, source)  # type: ignore[return-value]  # a HarnessResults
        return super().of(data, source)

    def arm_rows(self) -> list[tuple[str, int, int, Number | None]]:
        """(arm, valid calls, distinct outputs, modal share) over the whole run."""
        raise NotImplementedError


class HarnessStudy(HarnessResults):
    """A study's table: per box its block, the same arms over the study, its gates and boxes compared."""

    definitions: int
    kind: str
    totals: Totals  # the report's totals: named per mode
    thresholds_ms: list[Number] | None = None
    boxes: dict[str, Box]
    arms: dict[str, Arm]
    arms_left_out: dict[str, Count] = {}
    cross_box: CrossBox
    not_computed: dict[str, str] = {}

    def arm_rows(self) -> list[tuple[str, int, int, Number | None]]:
        return [(arm, m.n if m else 0, m.distinct_count if m else 0, m.modal_share if m else None)
                for arm, m in ((arm, entry.metrics) for arm, entry in self.arms.items())]


class ArmV1(Outputs):
    """An arm (or a prefill state of one) in the first layout: its counts and metrics in one block."""

    n_raw: Count
    prefill_ms: Prefill | None = None


class CycleV1(Kept):
    cycle: int
    flips: bool | None = None


class HarnessRunV1(HarnessResults):
    """A run imported before several boxes: its first table, recomputed as it was (results_v1)."""

    totals: Totals
    arms: dict[str, ArmV1]
    by_state: dict[str, dict[str, ArmV1]] | None = None
    thresholds_ms: list[Number] | None = None
    prefill_classes: PrefillClasses
    cycles: list[CycleV1] = []

    def arm_rows(self) -> list[tuple[str, int, int, Number | None]]:
        return [(arm, m.n, m.distinct_count, m.modal_share) for arm, m in self.arms.items()]
