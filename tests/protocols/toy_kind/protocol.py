"""The toy kind's protocol file model, its procedure and its registration (`KIND`, kit.protocols.kind)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from kit.core.paths import RunPaths
from kit.engines.base import CompletionRequest
from kit.protocols.kind import Analysis, CpuEstimate, Kind, Launcher, Lazy, Number
from kit.protocols.procedure import Prepared, RunContext, RunInputs
from kit.protocols.spec import ProtocolBase
from kit.record.completion import documented
from kit.record.manifest import now
from kit.record.model import RequestRecord

from .results import ToyResults

PASS = "asked"


class ToyProtocol(ProtocolBase):
    """`protocol: toy`: one prompt, asked `repeats` times."""

    protocol: Literal["toy"]
    prompt: str = "Say hi."
    repeats: int = Field(3, ge=1, le=50)
    max_tokens: int = Field(4, ge=1, le=64)


@dataclass(frozen=True, kw_only=True)
class ToyRecord(RequestRecord):
    """A request of the toy kind: the fields every record has, and which repeat it was."""

    TITLE = "Toy records"

    repeat: int = documented("its position among the repeats, from 0")


def prepare(protocol: ToyProtocol, inputs: RunInputs) -> Prepared:
    return Prepared(plan={"requests": protocol.repeats}, workload={"source": "one prompt, repeated"})


def run(protocol: ToyProtocol, prepared: Prepared, ctx: RunContext) -> None:
    """One pass on the run's engine: the prompt `repeats` times, one record per answer."""
    file = RunPaths.records_name(PASS)
    ctx.manifest.set_pass(PASS, file=file, status="running", started=now(), fresh_server=ctx.provider.fresh_servers)
    with ctx.provider.session(PASS, RunPaths(ctx.run_dir).logs) as live, \
            ctx.records(file, **ctx.stamp(PASS, "toy")) as writer:
        ctx.manifest.set_pass(PASS, launch=live.launch)
        for repeat in range(protocol.repeats):
            ctx.checkpoint()
            request = CompletionRequest(prompt=protocol.prompt, max_tokens=protocol.max_tokens, seed=protocol.seed)
            with live.engine_calls(f"pass {PASS} (repeat {repeat})"):
                completion = live.engine.complete(request)
            writer.answered(ToyRecord, completion, unit="prompt", step=repeat, repeat=repeat)
    ctx.manifest.set_pass(PASS, status="OK", reason=None, records=writer.count, ended=now())


def results(run_dir: Path) -> ToyResults:
    from .results import results as toy_results  # the results load with what they compute, when asked

    return toy_results(run_dir)


def estimate(data: dict[str, Any]) -> CpuEstimate:
    return CpuEstimate(f"{data.get('repeats', 3)} requests", 2.0 * data.get("repeats", 3))


KIND = Kind(
    name="toy", model=ToyProtocol, prepare=prepare, run=run, results=results, table="toy answers",
    results_model=ToyResults, render=Lazy("toy_kind.view:render"), headline=Lazy("toy_kind.view:headline"),
    record=ToyRecord,
    launcher=Launcher(measures="how many distinct answers one prompt gets", needs="any engine",
                      estimate=estimate, size=Number("Repeats", "repeats", 3, high=50)),
    analysis=Analysis("toy", table=Lazy("toy_kind.results:toy_table")))
