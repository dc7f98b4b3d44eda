"""Where a run's units execute: `local` (in this process, in order: the kit's way before executors) or `ray`
(each unit a Ray task on a cluster's node: kit.run.ray_executor, docs/ray.md).

This module never imports Ray: `import kit.run.runner` stays light (tests/test_import_cost.py); Ray loads
only when a run asks for it, and a run that asks for it without Ray installed is refused in one line.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from kit.core.errors import ConfigError
from kit.launch.provider import NativeProvider
from kit.protocols.kind import Kind
from kit.protocols.kinds import KINDS
from kit.protocols.procedure import LOCAL, Executor

CHOICES = ("local", "ray")
# what a manifest records of the executor (kit.run.resume.SAVED_OPTIONS), by type
SAVED_OPTIONS: dict[str, type] = {"executor": str, "ray_address": str, "cpus_per_task": float,
                                  "gpus_per_task": float}
INSTALL = "pip install -e '.[ray]' (ray==2.60.0), or run without --executor ray"


def ray_kinds() -> list[str]:
    """The kinds whose procedure hands its units to the executor (`Kind.units`); the others run locally only."""
    return [name for name, kind in KINDS.items() if kind.units]


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def check(options: Any, kind: Kind) -> None:
    """Refuse, in one line, an executor the run cannot have (`options`: kit.run.runner.RunOptions)."""
    if options.executor not in CHOICES:
        raise ConfigError(f"--executor {options.executor!r} is not one the kit has", f"use one of {', '.join(CHOICES)}")
    if options.executor == "local":
        return
    if not kind.units:  # its procedure runs its passes itself, in this process (Kind.units)
        raise ConfigError(f"--executor ray runs {', '.join(ray_kinds())} protocols; this one is of kind {kind.name}, "
                          "whose passes run in this process only", "run it without --executor ray")
    if not ray_installed():
        raise ConfigError("--executor ray needs Ray, which is not installed", INSTALL)


def make(options: Any, kind: Kind, provider: Any) -> Executor:
    """The executor a run asked for; what Ray cannot run is refused before the run folder exists."""
    check(options, kind)
    if options.executor == "local":
        return LOCAL
    if not isinstance(provider, NativeProvider):
        raise ConfigError(f"--executor ray starts each unit's engine on the node that runs it (the embedded engine "
                          f"or --server-bin); this run's engine is {provider.describe().get('kind')}",
                          "drop --engine-url / --launcher docker / --engine vllm, or run without --executor ray")
    from kit.run.ray_executor import RayExecutor  # noqa: PLC0415 - Ray loads only when asked for

    executor = RayExecutor(address=options.ray_address, cpus_per_task=options.cpus_per_task,
                           gpus_per_task=options.gpus_per_task)
    executor.prepare()  # the cluster reached, what no node can hold refused, workers warmed: before the folder
    return executor


def resumed(saved: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    """The options a resume runs with: where its units run is what the person asks now (`asked`: executor,
    ray_address, ...), never what the run folder recorded (a folder does not choose a cluster to contact);
    without `asked`, locally."""
    return {**{key: value for key, value in saved.items() if key not in SAVED_OPTIONS}, **asked}
