"""What a bundle holds, in memory: its runs (manifest and files) and the bundle-level files."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kit.bundle import RUNS
from kit.bundle.value_diff import parse_csv
from kit.core.paths import RunPaths
from kit.record.manifest import EngineInfo, ManifestError, RunManifest, read
from kit.record.provenance import cpu_backend_summary

FIGURE_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
COMPUTED_FOLDERS = (f"{RunPaths.RESULTS}/", f"{RunPaths.ANALYSIS}/")
Read = Mapping[str, tuple[bytes, RunManifest]]  # run id -> a manifest's bytes and the model read from them


@dataclass
class BundledRun:
    """One run folder inside a bundle: its id, the files held in memory (path within the run -> bytes, its
    manifest among them) and the names of the large ones that are not (records, logs)."""

    run_id: str
    files: dict[str, bytes] = field(default_factory=dict)
    not_held: list[str] = field(default_factory=list)
    _typed: tuple[bytes, RunManifest] | None = field(default=None, repr=False, compare=False)
    _tables: tuple[dict[str, bytes], dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    def typed(self) -> RunManifest:
        """Its manifest as the typed model (kit.record.manifest.RunManifest, by its one reader `read`), as the
        report, the README and `kit show` read it: read once, again only when the bytes were replaced. A
        bundle that verifies, or one `kit bundle` is writing, always has one (`kit verify` reads it the same
        way); ValueError naming the file and what is wrong otherwise (`kit show --no-verify` of such a bundle
        says it is not laid out as `kit bundle` writes it)."""
        raw = self.files.get(RunPaths.MANIFEST)
        if raw is None:
            raise ValueError(f"{self.prefix}{RunPaths.MANIFEST} is missing")
        if self._typed is None or self._typed[0] != raw:
            try:
                self._typed = (raw, read(raw, self.prefix + RunPaths.MANIFEST))
            except ManifestError as exc:
                raise ValueError(exc.message) from None
        return self._typed[1]

    def read_before(self, raw: bytes, manifest: RunManifest) -> None:
        """Keep `manifest`, the model already read from `raw`, when `raw` is the manifest this run holds:
        `typed` then does not read it again."""
        if raw == self.files.get(RunPaths.MANIFEST):
            self._typed = (raw, manifest)

    def names(self) -> list[str]:
        return sorted(set(self.files) | set(self.not_held))

    @property
    def prefix(self) -> str:
        return f"{RUNS}/{self.run_id}/"

    def computed(self) -> dict[str, bytes]:
        """The analysis outputs: every file under results/ and analysis/."""
        return {name: data for name, data in sorted(self.files.items()) if name.startswith(COMPUTED_FOLDERS)}

    def tables(self) -> dict[str, Any]:
        """Parsed JSON and CSV analysis outputs, by path within the run: parsed once (the headline, the
        qualitative findings, the paper's tables and the report all read them), again only when a file
        under results/ or analysis/ was added, removed or replaced since."""
        computed = self.computed()
        if self._tables is not None and self._tables[0].keys() == computed.keys() and all(
                self._tables[0][name] is data for name, data in computed.items()):
            return dict(self._tables[1])
        out: dict[str, Any] = {}
        for name, data in computed.items():
            try:
                if name.endswith(".json"):
                    out[name] = load_json(data)
                elif name.endswith(".csv"):
                    out[name] = parse_csv(data)
            except (ValueError, UnicodeDecodeError, csv.Error):
                continue
        self._tables = (computed, out)
        return dict(out)

    def figures(self) -> dict[str, tuple[str, bytes]]:
        """Figures among the analysis outputs: path -> (media type, bytes)."""
        out = {}
        for name, data in self.computed().items():
            suffix = name[name.rfind("."):].lower() if "." in name else ""
            if suffix in FIGURE_TYPES:
                out[name] = (FIGURE_TYPES[suffix], data)
        return out


def load_json(data: bytes) -> Any:
    """JSON from a bundle; ValueError for anything unreadable, nesting too deep included."""
    try:
        return json.loads(data)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc


def runs_in(names: Iterable[str]) -> dict[str, list[str]]:
    """Bundle file names (relative to the bundle folder) grouped by run: run_id -> names within runs/<run_id>/."""
    runs: dict[str, list[str]] = {}
    for name in sorted(names):
        parts = name.split("/", 2)
        if len(parts) == 3 and parts[0] == RUNS:
            runs.setdefault(parts[1], []).append(parts[2])
    return runs


def runs_from_files(files: dict[str, bytes], read_before: Read | None = None) -> list[BundledRun]:
    """Group bundle files (paths relative to the bundle folder) into runs by runs/<run_id>/; a run whose
    manifest `read_before` holds (the same bytes: `kit verify` read them) keeps that model, not read again."""
    runs: dict[str, BundledRun] = {}
    for name, data in sorted(files.items()):
        parts = name.split("/", 2)
        if len(parts) < 3 or parts[0] != RUNS:
            continue
        run = runs.setdefault(parts[1], BundledRun(parts[1]))
        run.files[parts[2]] = data
    for run in runs.values():
        known = (read_before or {}).get(run.run_id)
        if known is not None:
            run.read_before(*known)
    return list(runs.values())


def container_image_summary(engine: EngineInfo) -> dict[str, str]:
    """`engine image`: the identity of the image a `--launcher docker` run's containers came from, and their GPUs."""
    found = engine.image_identity
    if found is None:
        return {}
    parts = [f"{found.get('reference')} ({found.get('id')})"] + [
        f"{label} {found[key]}" for key, label in (("target", "target"), ("base", "base"),
                                                   ("wheel_sha256", "wheel sha256"), ("cpu_backend", "CPU backend"),
                                                   ("cpu_backend_sha256", "CPU backend sha256")) if found.get(key)]
    return {"engine image": "; ".join(parts) + f"; --gpus {getattr(engine, 'gpus', None)}"}


def fix_summary(manifest: RunManifest) -> dict[str, str]:
    """The fixes and extra server flags a run applied to every server (`kit run --fix`, `--server-arg`)."""
    found = {}
    for key, label in (("fixes", "fixes"), ("server_args", "extra server flags")):
        value = manifest.options.get(key)
        if isinstance(value, list) and value:
            found[label] = " ".join(str(v) for v in value)
    return found


def summary(run: BundledRun) -> dict[str, Any]:
    """The provenance a reviewer looks at first, from the typed manifest."""
    m = run.typed()
    prov, engine, protocol = m.provenance, m.engine, m.protocol
    launches = [p.launch or {} for p in m.passes.values()]
    builds = sorted({str(launch.get("build_info")) for launch in launches if launch.get("build_info")})
    argvs: list[Any] = [launch.get("argv") for launch in launches if launch.get("argv")]
    images = sorted({str(launch.get("image_digest")) for launch in launches if launch.get("image_digest")})
    kit, host = prov.kit, prov.host
    return {
        "run": run.run_id,
        "status": m.status,
        "reason": m.reason,
        "protocol": f"{protocol.name} (kind {protocol.kind})",
        "protocol sha256": protocol.sha256,
        "overrides": json.dumps(protocol.overrides if "overrides" in protocol.model_fields_set else {},
                                sort_keys=True),
        "started": m.started,
        "ended": m.ended,
        "engine": engine.engine or engine.kind,
        "engine builds": ", ".join(builds) or None,
        "image digests": ", ".join(images) or getattr(engine, "image_digest", None),
        "server flags": " ".join(str(a) for a in argvs[0][1:]) if argvs else None,
        "model": engine.model_name or engine.model,
        "model sha256": engine.model_sha256,
        "seeds": json.dumps(m.seeds, sort_keys=True),
        "passes": ", ".join(f"{k}: {v.status}" for k, v in m.passes.items()),
        "kit": f"{kit.get('version')} (commit {kit.get('git_commit')}"
               f"{', with local changes' if kit.get('git_dirty') else ''})",
        "host": f"{host.get('cpu')}, {host.get('cores')} cores, {host.get('platform')}",
        "GPUs": "; ".join(host.get("gpus") or []) or "none",
        "CPU backend": cpu_backend_summary(m),
        **container_image_summary(engine),  # only runs in a container have the row: older reports render the same
        **fix_summary(m),  # only runs with --fix or --server-arg have the rows
        "packages": ", ".join(f"{k} {v}" for k, v in sorted(prov.packages.items())),
    }
