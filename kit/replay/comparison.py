"""A replay held against the run it replays: request by request, pass by pass, value by value, and what
differed in the machine and engine that served it.

- Requests are paired by pass and `seq`. Identical means the same prompt (`prompt_sha256`) and the same
  answer, byte for byte: the same token ids (token strings where an engine gives no ids) and the same
  text. Otherwise the first differing token index is given (-1: the prompts already differ).
- Passes: their status in both runs and how many of their requests are identical.
- Results: every value of the results tables both runs wrote (results/*.json, compared as `kit verify`
  compares them: kit.bundle.value_diff), less the run's own id, clocks and timings (`VOLATILE`), so
  "every verdict identical" means every count, rate, interval and label of the tables.
- Environment: the CPU backend (name and library sha256), the engine build (llama-server's
  `build_info`), the model file's sha256, the workload's digests, the GPUs and driver, the host CPU and
  the kit's version, each listed where the two runs differ.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kit.run import engine_build
from kit.bundle.value_diff import compare_json
from kit.record.manifest import Manifest, PassInfo, RunManifest
from kit.core.paths import RunPaths
from kit.record.files import read_records


@dataclass
class PassComparison:
    pass_id: str
    status: tuple[str | None, str | None]
    requests: tuple[int, int]
    identical: int
    first_difference: dict[str, Any] | None = None  # seq, unit and token index of the first request that differs


@dataclass
class Comparison:
    original: str
    replay: str
    passes: list[PassComparison] = field(default_factory=list)
    values_compared: int = 0
    values_differ: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    @property
    def requests(self) -> tuple[int, int]:
        """(identical, in the original)"""
        return sum(p.identical for p in self.passes), sum(p.requests[0] for p in self.passes)

    def summary(self) -> str:
        same, total = self.requests
        verdicts = ("every verdict identical" if not self.values_differ else
                    f"{len(self.values_differ)} of {self.values_compared} result values differ")
        line = f"{same}/{total} requests byte-identical; {verdicts}"
        return line + (f"; different {', '.join(d.split(':')[0] for d in self.differences)}"
                       if self.differences else "; same engine build, backend, model and machine type")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "requests_identical": self.requests[0], "requests": self.requests[1],
                "summary": self.summary()}


def answer(record: dict[str, Any]) -> tuple[Any, Any]:
    """What a record answered: its token ids (token strings where an engine gives no ids) and its text."""
    completion = record.get("completion") or {}
    return completion.get("token_ids") or completion.get("tokens") or [], completion.get("text")


def identity(record: dict[str, Any]) -> tuple[Any, ...]:
    """What two records share exactly when they asked and answered the same, byte for byte (`differs_at` is
    None): the prompt's sha256, the answer's tokens and its text. `kit atlas` compares runs by it too."""
    return (record.get("prompt_sha256"), *answer(record))


def differs_at(a: dict[str, Any], b: dict[str, Any]) -> int | None:
    """None when two records asked and answered the same, byte for byte; else the first differing token
    index (-1: the prompts differ)."""
    if a.get("prompt_sha256") != b.get("prompt_sha256"):
        return -1
    if identity(a) == identity(b):
        return None
    left, right = answer(a)[0], answer(b)[0]
    return next((i for i, (x, y) in enumerate(zip(left, right)) if x != y), min(len(left), len(right)))


def _records(run_dir: Path, info: PassInfo | None) -> list[dict[str, Any]]:
    """A pass's records; none where it wrote no file (e.g. its server never started)."""
    path = run_dir / info.file if info and info.file else None  # checked inside by Manifest.load
    return read_records(path, logprobs=False).records if path is not None and path.is_file() else []


def _pass(pass_id: str, old_dir: Path, old: PassInfo, new_dir: Path, new: PassInfo | None) -> PassComparison:
    before, after = _records(old_dir, old), _records(new_dir, new)
    found = PassComparison(pass_id, (old.status, new.status if new else None), (len(before), len(after)), 0)
    for a, b in zip(before, after):
        token = differs_at(a, b)
        if token is None:
            found.identical += 1
        elif found.first_difference is None:
            found.first_difference = {"seq": a.get("seq"), "unit": a.get("unit"), "token": token}
    if found.first_difference is None and len(before) != len(after):
        found.first_difference = {"seq": min(len(before), len(after)), "unit": None, "token": None}
    return found


# keys whose values a replay is not expected to repeat: the run's own id, clocks and timings
VOLATILE = re.compile(r"(^|[._\[])(run_id|started|ended|created|timings?|seconds|wall_seconds|[a-z_]*_ms|ms|"
                      r"startup_seconds|estimate)([.\[\]]|$)")


def _leaves(value: Any, key: str = "") -> list[str]:
    if isinstance(value, dict):
        return [leaf for name, sub in value.items() for leaf in _leaves(sub, f"{key}.{name}" if key else str(name))]
    if isinstance(value, list):
        return [leaf for i, sub in enumerate(value) for leaf in _leaves(sub, f"{key}[{i}]")]
    return [key]


def _results(old_dir: Path, new_dir: Path, comparison: Comparison) -> None:
    """Every value of the original's results/*.json against the replay's, clocks and timings left out."""
    folder = RunPaths(old_dir).results
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        rel = path.relative_to(old_dir).as_posix()
        replayed = new_dir / rel
        if not replayed.is_file():
            comparison.values_differ.append(f"{rel} (not written by the replay)")
            continue
        before, after = json.loads(path.read_bytes()), json.loads(replayed.read_bytes())
        comparison.values_compared += sum(1 for leaf in _leaves(before) if not VOLATILE.search(leaf))
        comparison.values_differ += [f"{rel} {m.key}: {m.bundled!r} -> {m.recomputed!r}"
                                     for m in compare_json(before, after, rel) if not VOLATILE.search(m.key)]


def launch_record(manifest: RunManifest) -> dict[str, Any]:
    """The first pass's launch record (llama-server's build_info among it); {} where none was recorded."""
    return next((p.launch for p in manifest.passes.values() if p.launch), {}) or {}


def cpu_backend(manifest: RunManifest) -> str | None:
    """The embedded engine's CPU backend by name and library sha256; None for another engine."""
    cpu = manifest.provenance.cpu_backend
    return f"{cpu['name']} (libggml-cpu sha256 {cpu['library_sha256'][:12]}…)" if cpu else None


def server_binary(manifest: RunManifest) -> tuple[str | None, str]:
    """A server binary is known by its sha256 (paths differ between machines); its path is shown, never run.
    (what is compared: None for the kit's own engine, and how it reads)"""
    path = manifest.options.get("server_bin")
    digest = manifest.engine.server_bin_sha256
    if not path:
        return None, "the kit's own engine"
    return digest or f"path {path}", f"{path} (sha256 {digest[:12] + '…' if digest else 'not recorded'})"


def engine_image(manifest: RunManifest) -> str | None:
    """A container image (--launcher docker) by its id, target, base, wheel and CPU backend."""
    found = manifest.engine.image_identity
    if not isinstance(found, dict):
        return None
    return ", ".join(f"{k} {str(v)[:19] if 'sha256' in k or k == 'id' else v}"
                     for k, v in found.items() if v and k != "reference")


def engine_facets(manifest: RunManifest) -> dict[str, Any]:
    """What tells one engine build from another, each as two runs' are compared (None: not recorded, or the
    kit's own): the CPU backend, the server binary, llama-server's build_info, the llama.cpp sdist build,
    the container image. `kit atlas` keys its rows by them too."""
    return {"CPU backend": cpu_backend(manifest), "server binary": server_binary(manifest)[0],
            "engine build": launch_record(manifest).get("build_info"),
            "llama.cpp build (sdist)": engine_build.identity_line(manifest.engine.to_json()),
            "engine image": engine_image(manifest)}


def environment(old: RunManifest, new: RunManifest) -> list[str]:
    """What differs between the machines, engines and inputs of two manifests, one line each."""
    host = [m.provenance.host for m in (old, new)]
    was_engine, now_engine = engine_facets(old), engine_facets(new)
    checks = {
        **{name: (was_engine[name], now_engine[name])
           for name in ("CPU backend", "engine build", "llama.cpp build (sdist)")},
        "model": (old.engine.model_sha256, new.engine.model_sha256),
        "engine image": (was_engine["engine image"], now_engine["engine image"]),
        "workload": ({k: v for k, v in old.workload.to_json().items() if k != "file"},
                     {k: v for k, v in new.workload.to_json().items() if k != "file"}),
        "GPU or driver": (host[0].get("gpus"), host[1].get("gpus")),
        "host CPU": (host[0].get("cpu"), host[1].get("cpu")),
        "kit": (old.provenance.kit.get("version"), new.provenance.kit.get("version")),
    }
    found = [f"{name}: {a} -> {b}" for name, (a, b) in checks.items() if a != b]
    (was, was_label), (now, now_label) = server_binary(old), server_binary(new)
    if was != now:
        found.insert(1, f"server binary: {was_label} -> {now_label}")
    return found


def compare_runs(old_dir: Path, new_dir: Path) -> Comparison:
    old, new = Manifest.load(old_dir), Manifest.load(new_dir)
    comparison = Comparison(old.run_id, new.run_id, differences=environment(old.run, new.run))
    for pass_id, info in old.run.passes.items():
        comparison.passes.append(_pass(pass_id, old_dir, info, new_dir, new.run.passes.get(pass_id)))
    _results(old_dir, new_dir, comparison)
    return comparison
