"""`--launcher docker` for llama.cpp runs: which image, which GPUs, and the containers a killed kit left.

The image is `--image` (default: the paper's CUDA image, or the kit's CPU image with `--gpus none`); its
identity (id, target, base, wheel sha256, CPU backend; kit.launch.docker.images) goes into the run's engine record, so
bundles and `kit replay` show it.
`--gpus` defaults to `none` on a cpu image and `all` otherwise; `none` sends no device request at all.
Every container carries the run's label (`kit.run_id`); a resume reuses the label, so it finds what a
killed kit left, keeps each container's log in the run folder and removes it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Callable

from kit.core.errors import EngineError
from kit.launch.docker import images
from kit.launch.docker.container_spec import LLAMACPP_IMAGE, gpus_text, parse_gpus
from kit.launch.docker.docker_launcher import DockerLauncher, RunningContainer
from kit.launch.docker.docker_provider import DockerProvider

Say = Callable[[str], None]


def llamacpp_provider(options: Any, model: Path, protocol: Any, details: dict[str, Any], say: Say,
                      launcher: DockerLauncher | None = None) -> DockerProvider:
    """llama-server in a fresh container per session, from `options.image` with `options.gpus`. Without
    `--image` the kit's CUDA image runs, or its CPU image when `--gpus none` asks for no GPU (refused, before the
    run folder exists, where that image is not built here)."""
    gpus = parse_gpus(options.gpus) if options.gpus else None  # refused in one line before anything starts
    reference = options.image or (images.CPU_IMAGE if gpus == "none" else LLAMACPP_IMAGE)
    launcher = launcher or DockerLauncher.from_env(progress=say)
    image_options: dict[str, Any] = {}
    try:
        found = images.identity(reference, launcher.client.images.get(reference))
    except Exception as exc:  # noqa: BLE001 - ImageNotFound: build the kit's own images, else refuse
        found = None
        target = next((name for name, ref in images.TARGETS.items() if ref == reference), None)
        if target == "cpu":
            why = "" if options.image else " (--gpus none without --image runs the kit's CPU image)"
            raise EngineError(f"the image {reference} is not here{why}",
                              "build it: kit images build llamacpp --target cpu (add --base debootstrap where no "
                              "registry is reachable)") from exc
        if target == "cuda":
            image_options["build"] = lambda: images.build_llamacpp(launcher, "cuda", say=say)
    if gpus is None:
        gpus = "none" if found is not None and found.target == "cpu" else "all"
    threads = options.threads or os.cpu_count() or 1
    recorded = {**details, "gpus": gpus_text(gpus), "threads": threads,
                "image_identity": found.to_json() if found else None}
    return DockerProvider.llamacpp(
        launcher, options.container_label or uuid.uuid4().hex[:12], model, image=reference, gpus=gpus,
        ctx_size=protocol.engine.ctx_size, cache_ram_mib=protocol.engine.cache_ram, seed=protocol.seed,
        extra_args=["--threads", str(threads)], details=recorded, image_options=image_options)


def recorded_label(engine: dict[str, Any]) -> str | None:
    """The container label of a run's engine record: a llama.cpp container's run id, or vLLM's (its arms share
    one); None when the run used no container."""
    arms = engine.get("arms") if engine.get("kind") == "per_arm" else None
    found = next(iter(arms.values()), None) if isinstance(arms, dict) and arms else engine
    label = found.get("run_id") if isinstance(found, dict) and found.get("kind") == "docker" else None
    return label if isinstance(label, str) and label else None


def recorded_kit_image(engine: dict[str, Any]) -> str | None:
    """The kit image (cuda or cpu target) a llama.cpp container run's engine record names; None for any other
    image (a run folder never chooses an image to pull or run) or a run without a container."""
    spec = engine.get("spec") if engine.get("kind") == "docker" else None
    image = spec.get("image") if isinstance(spec, dict) else None
    return image if image in images.TARGETS.values() else None


def remove_leftovers(run_id: str, log_dir: Path, say: Say) -> list[dict[str, Any]]:
    """Containers of run `run_id` a killed kit left: each one this kit started (its token, kit.launch.
    container_token) has its log written into `log_dir`, then is removed; one that only carries the run's
    labels is left as it is, with a line saying so. One entry per container (what `kit resume` records
    beside the native servers it stopped)."""
    try:
        launcher = DockerLauncher.from_env(progress=say)
    except EngineError as exc:
        say(f"warning: could not look for containers the run left ({exc.message}); remove them by label "
            f"kit.run_id={run_id} (docker ps -a --filter label=kit.run_id={run_id})")
        return []
    ours, others = launcher.leftovers(run_id)
    found: list[dict[str, Any]] = []  # the entries returned
    for container in others:
        name = str(getattr(container, "name", container.id))
        say(f"warning: left container {name} as it is: it carries run {run_id}'s labels but not this kit's token, "
            "so this kit did not start it (remove it yourself with docker rm if it is yours)")
        found.append({"container": name, "id": str(container.id), "log": None,
                      "outcome": "left: not started by this kit (no matching kit.token)"})
    for container in ours:
        name = str(getattr(container, "name", container.id))
        log = Path(log_dir) / f"leftover-{name}.log"
        running = RunningContainer(spec=None, container=container, host_port=0, started_monotonic=0.0)  # type: ignore[arg-type]
        outcome = (container.attrs.get("State") or {}).get("Status", "unknown")
        try:
            launcher.write_logs(running, log)
        except Exception as exc:  # noqa: BLE001 - a log that cannot be read does not keep the container
            say(f"warning: could not copy the log of container {name}: {exc}")
        try:
            launcher.stop(running, timeout_s=0)
            outcome = f"removed (was {outcome})"
        except Exception as exc:  # noqa: BLE001 - one container that cannot be removed does not stop the resume
            say(f"warning: could not remove container {name}: {exc}")
        found.append({"container": name, "id": str(container.id), "log": log.name, "outcome": outcome})
    if ours:
        removed = sum(entry["outcome"].startswith("removed") for entry in found)
        say(f"removed {removed} container(s) a stopped kit left; their logs are in {log_dir}")
    return found
