"""What every protocol of BFCL passes declares: the workload, a pass's plan, how episode orders are drawn, and
the size and rough duration the launcher reads from a protocol file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal, TypedDict

import numpy as np
from pydantic import BeforeValidator, Field

from kit.protocols import bounds as b
from kit.protocols.kind import CpuEstimate, FileData, Number
from kit.protocols.spec import ProtocolBase, Strict

if TYPE_CHECKING:
    from kit.workloads.bfcl import BfclWorker


CacheArm = Literal["on", "off"]  # a BFCL pass's prompt-cache arm


class GridGates(Strict):
    """The cache-state gates every request of a BFCL pass is held to (kit.protocols.bfcl_passes.one_pass.gate)."""

    off_max_cached_tokens: b.Tokens = 0  # every cache-off request must reuse nothing
    # share of cache-on requests after an episode's first that must hit
    on_min_hit_share: float = Field(0.95, strict=True, ge=0, le=1)
    # every episode's first request must reuse nothing (sentinel isolation)
    episode_start_cold: bool = Field(False, strict=True)


class PassFields(TypedDict, total=False):
    """The keys a kind's passes add to their manifest entries (`passes.<id>`): none here; a kind's own pass plan
    names its keys in a TypedDict of its own (kit.protocols.flag_order, kit.protocols.remedy)."""


@dataclass(frozen=True)
class PassPlan:
    """One BFCL pass in run order: its id, its cache arm, which repeat of that arm it is and its episode order."""

    pass_id: str
    arm: CacheArm
    repeat: int  # 1 for the first pass of its arm under its order, 2 for the second
    order: int

    def manifest_fields(self) -> PassFields:
        """What the manifest records of the pass once its server is up, besides what every pass records."""
        return {}


PromptFormat = Literal["auto", "chatml", "qwen25", "llama31"]  # a protocol's workload.prompt_format
FAMILY_RENDERERS: dict[str, PromptFormat] = {"chatml": "chatml", "qwen": "qwen25", "llama3": "llama31"}  # registry family -> prompt_format


def _arm(value: object) -> object:
    """YAML 1.1 reads a bare `on`/`off` as true/false: take those as the arm names they were meant as."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


Arm = Annotated[CacheArm, BeforeValidator(_arm)]


class BfclWorkload(Strict):
    episodes: int = b.count(1, b.EPISODES_MAX, 80)
    # explicit episode ids instead of the first N in ascending order (at least one, each once)
    ids: Annotated[tuple[str, ...], b.UNIQUE, Field(min_length=1, max_length=b.EPISODES_MAX)] | None = None
    # (with ids, `episodes` below their number keeps the first ones: `--episodes 1` sizes such a file down)
    prompt_format: PromptFormat = "auto"
    max_tokens_cap: b.MaxTokens = 4096
    # a smoke-test cap; the paper has none
    max_requests_per_episode: int | None = b.count(1, b.REQUESTS_PER_EPISODE_MAX, None)
    # a sizing knob for slow engines: the system prompt lists only the first N of the episode's function docs
    # (BFCL's order; every function can still be called and runs as BFCL runs it); the paper lists them all
    function_docs_max: int | None = b.count(1, b.FUNCTION_DOCS_MAX, None)

    def system_prompt(self, worker: BfclWorker, episode_id: str) -> str:
        """The episode's system prompt as this workload sends it (all function docs, or the first N)."""
        return worker.system_prompt(episode_id, functions=self.function_docs_max)

    def chosen_ids(self) -> list[str] | None:
        return list(self.ids[:self.episodes]) if self.ids else None

    @property
    def count(self) -> int:
        chosen = self.chosen_ids()
        return len(chosen) if chosen is not None else self.episodes


class BfclPassesProtocol(ProtocolBase):
    """What every protocol of BFCL passes shares (grid, sweep, flag × order): the workload, how episode
    orders are drawn, sentinel isolation, log-probability depth and the cache-state gates."""

    workload: BfclWorkload = BfclWorkload()
    order_seed: b.Seed = 20261007
    sentinel: bool = Field(False, strict=True)  # overwrite the cache with a fixed sentinel prompt before every episode
    top_logprobs: int = b.count(1, b.TOP_LOGPROBS_MAX, 1)
    gates: GridGates = GridGates()


def episode_order(episodes: list, order: int, seed: int) -> list:
    """Order 0 keeps the canonical order; order k is a permutation drawn with numpy's generator seeded
    by (seed, k), the same for every format and protocol that uses it."""
    if order == 0:
        return list(episodes)
    return [episodes[i] for i in np.random.default_rng([seed, order]).permutation(len(episodes))]


def bfcl_episodes(data: FileData) -> int:
    """BFCL episodes a protocol file asks for: its explicit ids (at most `episodes` of them), else `episodes`."""
    workload = data.get("workload") or {}
    ids = workload.get("ids")
    return min(len(ids), workload.get("episodes", len(ids))) if ids else workload.get("episodes", 80)


BFCL_EPISODES = Number("Episodes", "workload.episodes", bfcl_episodes)  # the size of every BFCL protocol


def bfcl_estimate(episodes: int, passes: int, servers: int = 0, how: str = "") -> CpuEstimate:
    """The launcher's rough duration of a BFCL file of `episodes` (`bfcl_episodes`) on the embedded CPU engine (two
    cores): about two minutes per episode and pass, five seconds per server started; `how` says how passes are served."""
    return CpuEstimate(f"{episodes} episodes x {passes} passes{how}", episodes * passes * 120 + servers * 5)
