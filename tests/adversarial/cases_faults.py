"""Importer bounds, run-folder faults, concurrency, old bundles and forged records (issue #23): files that
are links, devices, FIFOs, huge or deeply nested, handed to `kit import`; run folders whose manifest is a
link or nested 100,000 deep; a second kit on a run folder another one holds; a bundle an earlier kit wrote
(verifies) and one whose record text was forged (fails)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.adversarial.corpus import REPO, Case, Ending, Scratch

FIXTURES = REPO / "tests" / "fixtures"
HARNESS = FIXTURES / "harness" / "fixture-churn-ab"
RUN = FIXTURES / "records_v1" / "demo-20261201-070851"
OLD_BUNDLE = FIXTURES / "bundles" / "demo-20261201-191112.tar.gz"
CREDENTIAL = '{"aws_secret_access_key": "canary-credential-0123456789"}\n'
DEEP = "[" * 100_000 + "]" * 100_000


def _harness(scratch: Scratch, stem: str = "run") -> Path:
    """A copy of a small harness run (calls, manifest, done marker) in the inbox; the calls file's path."""
    for suffix in (".jsonl", ".manifest.json", ".done.json"):
        shutil.copyfile(f"{HARNESS}{suffix}", scratch.inbox / f"{stem}{suffix}")
    return scratch.inbox / f"{stem}.jsonl"


def _import(scratch: Scratch, calls: Path, *more: str) -> list[str]:
    return ["import", "determinism-harness", str(calls), *more, "--out", str(scratch.outputs)]


def _credential(scratch: Scratch) -> Path:
    path = scratch.outside / "credentials.json"
    path.write_text(CREDENTIAL)
    return path


def _nothing_copied(scratch: Scratch, ending: Ending) -> str | None:
    for path in scratch.outputs.rglob("*"):
        if path.is_file() and b"canary-credential" in path.read_bytes():
            return f"the credential was copied into {path}"
    return None


def _report_link(scratch: Scratch) -> list[str]:
    calls = _harness(scratch)
    (scratch.inbox / "report.json").symlink_to(_credential(scratch))
    return _import(scratch, calls, "--report", str(scratch.inbox / "report.json"))


def _manifest_link(scratch: Scratch) -> list[str]:
    calls = _harness(scratch)
    (scratch.inbox / "run.manifest.json").unlink()
    (scratch.inbox / "run.manifest.json").symlink_to(_credential(scratch))
    return _import(scratch, calls)


def _fifo(scratch: Scratch, name: str) -> Path:
    calls = _harness(scratch)
    (scratch.inbox / name).unlink()
    os.mkfifo(scratch.inbox / name)
    return calls


def _huge(scratch: Scratch) -> list[str]:
    """100,001 calls (80 MB), one over the limit: refused once the limit is passed, in bounded memory."""
    template = json.loads(Path(f"{HARNESS}.jsonl").read_text().splitlines()[0])
    text = "X"
    head = json.dumps({**template, "text": text,
                       "text_sha256": hashlib.sha256(text.encode()).hexdigest(), "schedule_index": 0})
    before, after = head.split('"schedule_index": 0')
    calls = _harness(scratch)
    with calls.open("w") as out:
        out.writelines(f'{before}"schedule_index": {i}{after}\n' for i in range(100_001))
    return _import(scratch, calls)


def _one_long_line(scratch: Scratch) -> list[str]:
    calls = _harness(scratch)
    with calls.open("wb") as out:
        out.write(b"a" * (17 << 20))
    return _import(scratch, calls)


def _deep_call(scratch: Scratch) -> list[str]:
    calls = _harness(scratch)
    calls.write_text(DEEP + "\n")
    return _import(scratch, calls)


def _deep_side_file(scratch: Scratch) -> list[str]:
    calls = _harness(scratch)
    (scratch.inbox / "run.manifest.json").write_text(DEEP)
    return _import(scratch, calls)


def _run_folder(scratch: Scratch) -> Path:
    return Path(shutil.copytree(RUN, scratch.inbox / RUN.name))


def _linked_manifest(command: str):
    def make(scratch: Scratch) -> list[str]:
        run_dir = _run_folder(scratch)
        real = scratch.outside / "manifest.json"
        shutil.copyfile(run_dir / "manifest.json", real)
        (run_dir / "manifest.json").unlink()
        (run_dir / "manifest.json").symlink_to(real)
        return [command, str(run_dir)]
    return make


def _deep_manifest(scratch: Scratch) -> list[str]:
    run_dir = _run_folder(scratch)
    (run_dir / "manifest.json").write_text(DEEP)
    return ["resume", str(run_dir)]


HOLD = ("import sys, time; from pathlib import Path; from kit.run import lock as run_lock\n"
        "with run_lock.locked(Path(sys.argv[1]), 'resume', run_lock.RESERVE_BYTES):\n"
        "    print('held', flush=True); time.sleep(120)\n")


def _held(command: str):
    """The run folder held by another kit process (as a `kit resume` in progress holds it)."""
    def make(scratch: Scratch) -> list[str]:
        run_dir = _run_folder(scratch)
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True,
                                  env=scratch.env())
        scratch.defer(lambda: (holder.kill(), holder.wait()))
        assert holder.stdout.readline().strip() == "held"
        return [command, str(run_dir)] + (["-o", str(scratch.outputs / "b.tar.gz")] if command == "bundle" else [])
    return make


def _unchanged_run(scratch: Scratch, ending: Ending) -> str | None:
    run_dir = scratch.inbox / RUN.name
    changed = [str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
               if p.is_file() and p.name != ".kit-lock" and p.read_bytes() != (RUN / p.relative_to(run_dir)).read_bytes()]
    return f"the held run folder changed: {changed}" if changed else None


def _old_bundle(scratch: Scratch) -> list[str]:
    return ["verify", str(shutil.copyfile(OLD_BUNDLE, scratch.inbox / OLD_BUNDLE.name))]


def _verifies(scratch: Scratch, ending: Ending) -> str | None:
    if ending.code != 0 or not ending.lines[-1].startswith("OK: 12 files match their checksums"):
        return f"the old kit's bundle does not verify: exit {ending.code}: {ending.lines[-3:]}"
    return None


def _forged_text(scratch: Scratch) -> list[str]:
    from kit.bundle.writer import write_bundle  # noqa: PLC0415
    from tests.bundle import mutations  # noqa: PLC0415
    from tests.bundle.conftest import synthetic_grid_run  # noqa: PLC0415

    run = synthetic_grid_run(scratch.inbox / "grid-toy")
    bundle = write_bundle([run], scratch.inbox / "base.tar.gz", environ={}).path.read_bytes()
    forged = mutations.edit(bundle, "{run}/records/on1.jsonl", reseal=True,
                            replace_text=['"text":"t1 t3"', '"text":"t1 t4"'])
    (scratch.inbox / "forged.tar.gz").write_bytes(forged)
    return ["verify", str(scratch.inbox / "forged.tar.gz")]


def _fails_on_the_record(scratch: Scratch, ending: Ending) -> str | None:
    named = any("is not the sha256 of its completion.text" in line for line in ending.lines)
    if ending.code != 1 or not named or not ending.lines[-1].startswith("FAILED: "):
        return f"the forged record was not caught: exit {ending.code}: {ending.lines[-3:]}"
    return None


CASES = [
    Case(cls="import file", name="report is a symlink to a credential", make=_report_link,
         needle="is a symbolic link", check=_nothing_copied),
    Case(cls="import file", name="companion manifest is a symlink to a credential", make=_manifest_link,
         needle="is a symbolic link", check=_nothing_copied),
    Case(cls="import file", name="calls file is /dev/zero", make=lambda s: _import(s, Path("/dev/zero")),
         needle="/dev/zero is a character device", timeout=30),
    Case(cls="import file", name="report is /dev/zero", make=lambda s: _import(s, _harness(s), "--report", "/dev/zero"),
         needle="/dev/zero is a character device", timeout=30),
    Case(cls="import file", name="calls file is a FIFO", make=lambda s: _import(s, _fifo(s, "run.jsonl")),
         needle="is a FIFO", timeout=30),
    Case(cls="import file", name="companion done marker is a FIFO", make=lambda s: _import(s, _fifo(s, "run.done.json")),
         needle="is a FIFO", timeout=30),
    Case(cls="import file", name="100,001 calls", make=_huge, needle="the kit imports at most 100000 calls",
         timeout=180),
    Case(cls="import file", name="one 17 MiB line", make=_one_long_line, needle="is longer than 16777216 bytes"),
    Case(cls="import file", name="a call nested 100,000 deep", make=_deep_call, needle="nested too deeply"),
    Case(cls="import file", name="companion manifest nested 100,000 deep", make=_deep_side_file,
         needle="nested too deeply"),
    Case(cls="run folder", name="manifest.json is a symlink (bundle)", make=_linked_manifest("bundle"),
         needle="is a symbolic link"),
    Case(cls="run folder", name="manifest.json is a symlink (resume)", make=_linked_manifest("resume"),
         needle="is a symbolic link"),
    Case(cls="run folder", name="manifest.json nested 100,000 deep", make=_deep_manifest, needle="nested too deeply"),
    Case(cls="concurrency and faults", name="resume of a run folder another kit holds", make=_held("resume"),
         needle="is in use by pid", check=_unchanged_run),
    Case(cls="concurrency and faults", name="bundle of a run folder another kit holds", make=_held("bundle"),
         needle="is in use by pid", check=_unchanged_run),
    Case(cls="bundle", name="a bundle an earlier kit wrote (gzip FNAME)", make=_old_bundle, expect="handled",
         check=_verifies, timeout=120),
    Case(cls="bundle", name="a record's completion.text forged, checksums resealed", make=_forged_text,
         expect="handled", check=_fails_on_the_record, timeout=120),
]
