"""A bundled manifest, read by its one reader (kit.record.manifest.read; issue #37, item 3): whether `kit show
--no-verify` or `kit verify` reads it, a manifest of another schema, of a field of the wrong type, not JSON, or
naming a pass file its bundle does not hold is refused in one line naming runs/<run>/manifest.json and what
is wrong with it, never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.adversarial.corpus import Case, Ending, Scratch

MANIFEST = "{run}/manifest.json"
WHERE = "runs/grid-toy/manifest.json"


def _bundle(scratch: Scratch, command: list[str], **edit: Any) -> list[str]:
    """A synthetic grid run's bundle, its manifest edited (kit.bundle.mutations.edit) and the checksums
    resealed over the change, under `kit <command> BUNDLE`."""
    from kit.bundle.writer import write_bundle  # noqa: PLC0415
    from tests.bundle import mutations  # noqa: PLC0415
    from tests.bundle.conftest import synthetic_grid_run  # noqa: PLC0415

    run = synthetic_grid_run(scratch.tmp / "made" / "grid-toy")
    bundle = write_bundle([run], scratch.tmp / "made" / "grid.tar.gz", environ={}).path.read_bytes()
    decoded = mutations.decode(bundle)
    changed = mutations.edit(bundle, MANIFEST.format(run=decoded.run), reseal=True, **edit)
    (scratch.inbox / "b.tar.gz").write_bytes(changed)
    return [*command, str(scratch.inbox / "b.tar.gz")]


def _made(command: list[str], **edit: Any) -> Callable[[Scratch], list[str]]:
    return lambda scratch: _bundle(scratch, command, **edit)


def _fails_naming(needle: str) -> Callable[[Scratch, Ending], str | None]:
    def check(scratch: Scratch, ending: Ending) -> str | None:
        named = any(line.startswith(f"FAIL {WHERE}: ") and needle in line for line in ending.lines)
        if ending.code != 1 or not named or not ending.lines[-1].startswith("FAILED: "):
            return f"not failed naming {WHERE} and {needle!r}: exit {ending.code}: {ending.lines[-4:]}"
        return None
    return check


SHOW = ["show", "--no-verify"]
EDITS = [  # (what, the edit of the manifest, what the refusal names)
    ("of a newer schema", {"set_json": {"schema": "kit.manifest/9"}}, "has schema 'kit.manifest/9'"),
    ("with a field of the wrong type", {"set_json": {"engine.model_sha256": 12}},
     "engine.model_sha256: Input should be a valid string"),
    ("that is not JSON", {"text": "{\"schema\": \"kit.manifest/1\", "}, "is not valid JSON"),
    ("nested too deeply", {"text": "[" * 100_000 + "]" * 100_000}, "is not valid JSON (nested too deeply)"),
    ("that is a list", {"text": "[1, 2]"}, "is not laid out as a kit manifest (a JSON list, not an object)"),
    ("whose passes are not objects", {"set_json": {"passes": {"on1": "records/on1.jsonl"}}},
     "is not laid out as a kit manifest (passes is not a mapping of pass id to pass)"),
    ("whose imported entry is not an object", {"set_json": {"imported": "elsewhere"}},
     "imported: Input should be a valid dictionary"),
]
PASS_FILES = [  # a pass naming a file the bundle's records/ folder does not hold
    ("the manifest itself through ..", "records/../manifest.json"),
    ("a file of another folder of the run", "results/grid.json"),
    ("a records file the bundle does not hold", "records/elsewhere.jsonl"),
    ("an absolute path", "/etc/passwd"),
]

CASES = [
    *[Case(cls="bundle", name=f"show --no-verify of a bundle whose manifest is {what}", make=_made(SHOW, **edit),
           needle=f"{WHERE}: {needle}") for what, edit, needle in EDITS],
    *[Case(cls="bundle", name=f"verify of a bundle whose manifest is {what}", make=_made(["verify"], **edit),
           expect="handled", check=_fails_naming(needle)) for what, edit, needle in EDITS],
    *[Case(cls="bundle", name=f"verify of a bundle whose pass names {what}",
           make=_made(["verify"], set_json={"passes.on1.file": name}), expect="handled",
           check=_fails_naming(f"passes.on1.file {name!r} is not a file of this run's records/ folder in the bundle"))
      for what, name in PASS_FILES],
]
