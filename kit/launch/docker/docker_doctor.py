"""What `kit doctor` says about the Docker path beyond the daemon: the kit's llama.cpp images present (with
their identity) and whether the daemon honours a GPU request, each with its fix.

The GPU request is proven, not guessed: a throwaway container of a kit image that is present starts with
`--gpus all` (its command `true`) and is removed. A daemon without the NVIDIA toolkit refuses it ("could
not select device driver"); that is the line's reason.
"""

from __future__ import annotations

from typing import Any

from kit.launch.docker import images

BUILD_FIX = ("kit images build llamacpp --target cpu (no registry reachable: add --base debootstrap), or --target "
             "cuda on a GPU machine")
TOOLKIT_FIX = "install the NVIDIA Container Toolkit, restart Docker; or run CPU images with --gpus none"


def llamacpp_images() -> list[dict[str, Any]]:
    """The kit's llama.cpp images the daemon has, as identity dicts (the real probe)."""
    import docker  # noqa: PLC0415 - only when the doctor looks

    client = docker.from_env(timeout=5)
    try:
        return [found.to_json() for found in images.present(client) if found.reference in images.TARGETS.values()]
    finally:
        client.close()


def gpu_request(image: str) -> None:
    """Start and remove a container of `image` with every GPU requested; raises when the daemon refuses."""
    import docker  # noqa: PLC0415

    client = docker.from_env(timeout=30)
    try:
        client.containers.run(image, entrypoint=["true"], command=[], remove=True, network_mode="none",
                              labels={"kit.app.doctor": "gpu-request"},
                              device_requests=[docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])])
    finally:
        client.close()


def checks(probes: Any, daemon: Any, make_check: Any, ok: str, warn: str, missing: str) -> list[Any]:
    """The doctor lines "llamacpp images", "cpu image" (what the Docker CPU way needs) and "gpu request", for a
    daemon check `daemon`."""
    lines = _image_checks(probes, daemon, make_check, ok, warn, missing)
    found = lines[0].data.get("images") or []
    cpu = [image for image in found if image["reference"] == images.CPU_IMAGE]
    lines.insert(1, make_check("cpu image", ok, f"{images.CPU_IMAGE} present", data={"image": images.CPU_IMAGE})
                 if cpu else make_check("cpu image", missing, f"{images.CPU_IMAGE} not built"
                                        + ("" if daemon.status == ok else " (no Docker daemon)"), BUILD_FIX))
    return lines


def _image_checks(probes: Any, daemon: Any, make_check: Any, ok: str, warn: str, missing: str) -> list[Any]:
    if daemon.status != ok:
        return [make_check("llamacpp images", warn, "cannot tell without a Docker daemon", daemon.fix),
                make_check("gpu request", missing, "cannot tell without a Docker daemon", daemon.fix)]
    try:
        found = probes.docker_llamacpp_images()
    except Exception as exc:  # noqa: BLE001 - shown, never fatal
        return [make_check("llamacpp images", warn, f"cannot list them ({' '.join(str(exc).split())[:160]})",
                           "check that Docker is running"),
                make_check("gpu request", warn, "cannot tell without a kit image", BUILD_FIX)]
    if not found:
        shown = make_check("llamacpp images", warn, "none built yet", BUILD_FIX, data={"images": []})
    else:
        lines = "; ".join(images.ImageIdentity(**image).line() for image in found)
        shown = make_check("llamacpp images", ok, lines, data={"images": found})
    if not found:
        return [shown, make_check("gpu request", warn, "cannot tell without a kit image to start", BUILD_FIX)]
    image = found[0]["reference"]
    try:
        probes.docker_gpu_request(image)
    except Exception as exc:  # noqa: BLE001 - the daemon's refusal is the reason shown
        reason = " ".join(str(exc).split())
        reason = reason[reason.find("could not select"):] if "could not select" in reason else reason[:160]
        return [shown, make_check("gpu request", missing, f"refused ({reason})", TOOLKIT_FIX, data={"image": image})]
    return [shown, make_check("gpu request", ok, f"honoured (`--gpus all` started a container of {image})",
                              data={"image": image})]
