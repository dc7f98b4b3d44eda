"""An imported harness run (tests/fixtures/harness) and its bundle tampered with as a stranger would: the
calls it was imported from changed, with or without the digests the manifest keeps of them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kit.importers.determinism_harness import HarnessFiles, import_run
from tests.bundle import mutations

HARNESS = Path(__file__).resolve().parents[1] / "fixtures" / "harness"


def harness_run(tmp: Path) -> Path:
    """A study of two boxes' calls files and its report, imported by the kit."""
    return import_run([HarnessFiles.beside(HARNESS / "fixture-churn-cuda.jsonl"),
                       HarnessFiles.beside(HARNESS / "fixture-churn-metal.jsonl",
                                           HARNESS / "fixture-churn-study.report.json")], tmp / "imported")


def changed_call(bundle: bytes, *, pin: bool) -> bytes:
    """The first call of the cuda calls file answered differently (its text and text_sha256 consistent, so
    the call itself is one the harness could have written); with `pin`, the manifest's digests of the file
    changed to match (calls_sha256, imported.sha256 and protocol.sha256) and the checksum list resealed."""
    decoded = mutations.decode(bundle)
    i = decoded.index("records/imported/fixture-churn-cuda.jsonl")
    name, data = decoded.members[i]
    lines = data.splitlines(keepends=True)
    call = json.loads(lines[0])
    call["text"] += " (changed)"
    call["text_sha256"] = hashlib.sha256(call["text"].encode()).hexdigest()
    lines[0] = (json.dumps(call) + "\n").encode()
    data = b"".join(lines)
    decoded.members[i] = (name, data)
    if pin:
        digest = hashlib.sha256(data).hexdigest()
        j = decoded.index("/manifest.json")
        manifest = json.loads(decoded.members[j][1])
        manifest["imported"]["runs"][0]["calls_sha256"] = digest
        manifest["imported"]["sha256"]["fixture-churn-cuda.jsonl"] = digest
        manifest["protocol"]["sha256"] = digest
        decoded.members[j] = (decoded.members[j][0], json.dumps(manifest).encode())
    mutations._reseal(decoded)
    return decoded.pack()


def without_derivation(bundle: bytes) -> bytes:
    """The manifest's `imported.derivation` dropped (as if an earlier kit had imported the run), resealed."""
    decoded = mutations.decode(bundle)
    j = decoded.index("/manifest.json")
    manifest = json.loads(decoded.members[j][1])
    del manifest["imported"]["derivation"]
    decoded.members[j] = (decoded.members[j][0], json.dumps(manifest).encode())
    mutations._reseal(decoded)
    return decoded.pack()
