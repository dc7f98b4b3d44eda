"""RO-Crate 1.1 metadata (`ro-crate-metadata.json`) for a bundle, so research tooling can read it.

The crate's root is the bundle folder. Every file is a `File` data entity (with size and sha256);
each run folder is a `Dataset`; each run is a `CreateAction` whose instruments are the kit, the
engine and the model, with the protocol and model as objects and the results as its result.
"""

from __future__ import annotations

import json
from typing import Any

from kit.bundle import CRATE
from kit.bundle.content import BundledRun
from kit.core.paths import RunPaths

CONTEXT = "https://w3id.org/ro/crate/1.1/context"
CONFORMS = "https://w3id.org/ro/crate/1.1"
FORMATS = {".json": "application/json", ".jsonl": "application/jsonl", ".csv": "text/csv", ".log": "text/plain",
           ".yaml": "application/yaml", ".yml": "application/yaml", ".md": "text/markdown", ".html": "text/html",
           ".png": "image/png", ".svg": "image/svg+xml", ".pdf": "application/pdf", ".txt": "text/plain"}


def _format(name: str) -> str:
    suffix = name[name.rfind("."):].lower() if "." in name else ""
    return FORMATS.get(suffix, "application/octet-stream")


def _ref(ids: list[str]) -> list[dict[str, str]]:
    return [{"@id": i} for i in ids]


def _run_entities(run: BundledRun) -> list[dict[str, Any]]:
    m = run.typed()
    engine, prov = m.engine, m.provenance
    kit_id, engine_id = f"#kit-{run.run_id}", f"#engine-{run.run_id}"
    kit = prov.kit
    entities: list[dict[str, Any]] = [{"@id": kit_id, "@type": "SoftwareApplication", "name": "cache-divergence-kit",
                                       "version": kit.get("version"), "identifier": kit.get("git_commit"),
                                       "description": "the kit that ran " + run.run_id
                                       + (" (with local changes)" if kit.get("git_dirty") else "")}]
    objects = [run.prefix + n for n in run.names() if n.startswith(("protocol/", f"{RunPaths.RECORDS}/"))]
    instruments = [kit_id, engine_id]
    builds: list[Any] = sorted({(p.launch or {}).get("build_info") for p in m.passes.values()} - {None})
    entities.append({"@id": engine_id, "@type": "SoftwareApplication",
                     "name": engine.engine or engine.kind or "engine",
                     "version": ", ".join(builds) or None, "description": json.dumps(engine.to_json(), sort_keys=True)})
    if engine.model_sha256:
        model_id = f"#model-{engine.model_sha256}"
        entities.append({"@id": model_id, "@type": "Dataset", "name": engine.model_name or "model",
                         "identifier": f"sha256:{engine.model_sha256}", "sha256": engine.model_sha256,
                         "description": "model weights served during the run (not included in the bundle)"})
        instruments.append(model_id)
    host_id = f"#host-{run.run_id}"
    entities.append({"@id": host_id, "@type": "Place", "name": f"host of {run.run_id}",
                     "description": json.dumps({**prov.host, "packages": prov.packages}, sort_keys=True)})
    seeds = m.seeds if "seeds" in m.model_fields_set else None  # as written: absent is null here
    entities.append({
        "@id": f"#run-{run.run_id}", "@type": "CreateAction", "name": f"kit run {run.run_id}",
        "startTime": m.started, "endTime": m.ended,
        "actionStatus": "http://schema.org/CompletedActionStatus" if m.status == "finished"
        else "http://schema.org/FailedActionStatus",
        "error": m.reason, "instrument": _ref(instruments), "object": _ref(sorted(objects)),
        "result": _ref([run.prefix + n for n in run.computed()]), "location": {"@id": host_id},
        "description": json.dumps({"seeds": seeds, "overrides": m.protocol.overrides},
                                  sort_keys=True)})
    return entities


def build(files: dict[str, tuple[int, str]], runs: list[BundledRun], index: dict[str, Any]) -> bytes:
    """The crate metadata for a bundle whose other files are `files` (name -> (size, sha256))."""
    kit = index.get("kit", {})
    names = sorted(set(files) | {"SHA256SUMS"})
    run_dirs = [run.prefix for run in runs]
    graph: list[dict[str, Any]] = [
        {"@id": CRATE, "@type": "CreativeWork", "conformsTo": {"@id": CONFORMS}, "about": {"@id": "./"}},
        {"@id": "./", "@type": "Dataset", "name": f"kit results bundle: {', '.join(r.run_id for r in runs)}",
         "description": "Raw records, logs, protocols, results and an offline report from the cache-divergence "
                        "reproducibility kit. `kit verify` re-checks every checksum and recomputes the results.",
         "datePublished": index.get("created"), "hasPart": _ref(run_dirs + [n for n in names if "/" not in n]),
         "mentions": _ref([f"#run-{r.run_id}" for r in runs] + ["#bundle-writer"])},
        {"@id": "#bundle-writer", "@type": "SoftwareApplication", "name": "cache-divergence-kit (wrote this bundle)",
         "version": kit.get("version"), "identifier": kit.get("git_commit")},
    ]
    for run in runs:
        graph.append({"@id": run.prefix, "@type": "Dataset", "name": f"run folder {run.run_id}",
                      "hasPart": _ref([run.prefix + n for n in run.names()])})
    for name in names:
        entity: dict[str, Any] = {"@id": name, "@type": "File", "encodingFormat": _format(name)}
        if name in files:
            entity.update(contentSize=str(files[name][0]), sha256=files[name][1])
        graph.append(entity)
    for run in runs:
        graph.extend(_run_entities(run))
    graph = [{k: v for k, v in e.items() if v is not None} for e in graph]
    return (json.dumps({"@context": CONTEXT, "@graph": graph}, indent=2, ensure_ascii=False) + "\n").encode()
