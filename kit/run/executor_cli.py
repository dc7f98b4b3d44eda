"""The command line's executor options (`kit run`, `kit demo`, `kit resume`): where a run's units execute
(kit.run.executors; docs/ray.md). Only click is imported here, so `kit --help` stays fast."""

from __future__ import annotations

from typing import Any, Callable

import click

CHOICES = ("local", "ray")  # kit.run.executors.CHOICES

OPTIONS = [
    click.option("--executor", type=click.Choice(CHOICES), default="local", show_default=True,
                 help="Where the passes run: local (here, one after another) or ray (each fresh-server unit a Ray "
                      "task on a cluster's node; pip install -e '.[ray]'; docs/ray.md)."),
    click.option("--ray-address", metavar="auto|ray://HOST:PORT",
                 help="--executor ray: the Ray cluster to use (default: start a local one on this machine)."),
    click.option("--cpus-per-task", type=click.FloatRange(0.01, 1024), default=1.0, show_default=True,
                 help="--executor ray: CPUs each task (one unit, its own engine) asks for; fractions allowed."),
    click.option("--gpus-per-task", type=click.FloatRange(0, 64), default=0.0, show_default=True,
                 help="--executor ray: GPUs each task asks for (1 for a GPU engine per task; N > 1: one engine "
                      "on N GPUs of one node, reserved together)."),
]


def executor_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(OPTIONS):
        func = option(func)
    return func


def chosen(executor: str, ray_address: str | None, cpus_per_task: float, gpus_per_task: float) -> dict[str, Any]:
    """The RunOptions fields the options give; Ray's options without `--executor ray` are refused."""
    if executor != "ray":
        if ray_address or cpus_per_task != 1.0 or gpus_per_task:
            raise click.BadParameter("--ray-address, --cpus-per-task and --gpus-per-task apply to --executor ray",
                                     param_hint="--executor")
        return {"executor": executor}
    return {"executor": executor, "ray_address": ray_address, "cpus_per_task": float(cpus_per_task),
            "gpus_per_task": float(gpus_per_task)}
