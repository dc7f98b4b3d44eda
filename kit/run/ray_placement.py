"""Where a Ray unit's task may run (docs/ray.md): the resources it asks for, checked against the cluster's
nodes before anything starts, and, where one engine spans several GPUs, a placement group that reserves
them together on one node.

`--gpus-per-task N` with N > 1: each attempt of a unit reserves one STRICT_PACK placement group of one
bundle {"CPU": cpus, "GPU": N} (one llama-server process sees all N GPUs, and a task's demand is met by
one bundle, so the bundle holds them all; STRICT_PACK keeps the group on one node, as lm-evaluation-harness
does for a vLLM engine spanning GPUs). The task is scheduled into the group; the group is removed when the
attempt ends, fails, is lost or is cancelled. One GPU or less per task needs no group: a task always lands
on one node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from kit.core.errors import ConfigError

STRATEGY = "STRICT_PACK"  # every bundle of a unit's group on one node


@dataclass(frozen=True)
class Placement:
    """What each unit's task asks for: `cpus`, `gpus` and Ray's runtime_env (None: the cluster's)."""

    cpus: float = 1.0
    gpus: float = 0.0
    runtime_env: dict[str, Any] | None = None

    @property
    def grouped(self) -> bool:
        """A placement group per attempt: the engine spans several GPUs."""
        return self.gpus > 1

    def bundles(self) -> list[dict[str, float]]:
        return [{"CPU": self.cpus, "GPU": self.gpus}]

    def options(self, group: PlacementGroup | None = None) -> dict[str, Any]:
        """The task's options in `.options(...)`: its resources, its runtime_env, and its group if any."""
        options: dict[str, Any] = {"num_cpus": self.cpus, "num_gpus": self.gpus}
        if self.runtime_env:
            options["runtime_env"] = self.runtime_env
        if group is not None:  # the engine process and anything it starts stay within the reserved GPUs
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=0, placement_group_capture_child_tasks=True)
        return options

    def reserve(self, name: str) -> PlacementGroup | None:
        """A new group for one attempt of a unit (None where the task needs none); Ray places it when it can."""
        return placement_group(self.bundles(), strategy=STRATEGY, name=name) if self.grouped else None

    def check(self, nodes: list[dict[str, Any]] | None = None) -> None:
        """Refuse, in one line, a task no node of the cluster can hold (`nodes`: `ray.nodes()`, the live ones
        counted), before anything starts: it would otherwise wait forever."""
        if self.gpus > 1 and self.gpus != int(self.gpus):
            raise ConfigError(f"--gpus-per-task {self.gpus:g}: above one GPU, a task takes whole GPUs",
                              f"use --gpus-per-task {math.ceil(self.gpus)} (or a fraction below 1)")
        alive = [node.get("Resources", {}) for node in (ray.nodes() if nodes is None else nodes) if node.get("Alive")]
        if any(has.get("CPU", 0) >= self.cpus and has.get("GPU", 0) >= self.gpus for has in alive):
            return
        most_gpus = max((has.get("GPU", 0) for has in alive), default=0)
        most_cpus = max((has.get("CPU", 0) for has in alive), default=0)
        if self.gpus > most_gpus:
            raise ConfigError(f"--gpus-per-task {self.gpus:g}: no node of the Ray cluster has that many GPUs (the "
                              f"most on one node: {most_gpus:g}; an engine's GPUs are reserved on one node)",
                              f"use --gpus-per-task {most_gpus:g} or less, or add a node with {self.gpus:g} GPUs")
        raise ConfigError(f"--cpus-per-task {self.cpus:g} with --gpus-per-task {self.gpus:g}: no node of the Ray "
                          f"cluster has both (the most CPUs on one node: {most_cpus:g})",
                          "lower --cpus-per-task, or add a bigger node")

    def slots_by_node(self, nodes: list[dict[str, Any]] | None = None, most: int = 32) -> dict[str, int]:
        """How many such tasks each live node runs at once, by node id (nodes that run none left out; at most
        `most` in all)."""
        slots: dict[str, int] = {}
        for node in ray.nodes() if nodes is None else nodes:
            has = node.get("Resources", {}) if node.get("Alive") else {}
            fits = [has.get("CPU", 0) / self.cpus] + ([has.get("GPU", 0) / self.gpus] if self.gpus else [])
            count = min(int(min(fits) + 1e-9), most - sum(slots.values()))
            if count > 0:
                slots[node.get("NodeID", "")] = count
        return slots

    def slots(self, nodes: list[dict[str, Any]] | None = None, most: int = 32) -> int:
        """How many such tasks the cluster's live nodes run at once (at most `most`)."""
        return sum(self.slots_by_node(nodes, most).values())


def release(group: PlacementGroup | None) -> None:
    """Remove an attempt's group (its GPUs free again); a group Ray has already removed is no error."""
    if group is None:
        return
    try:
        remove_placement_group(group)
    except Exception:  # noqa: BLE001 - removed already, or the cluster is gone: nothing left to free
        pass
