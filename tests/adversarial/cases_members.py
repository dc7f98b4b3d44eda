"""Every member of a bundle is vouched for, or said not to be (issue #35, item 2; docs/security.md rule 4,
docs/bundles.md "What verify checks of each member"): the files an imported run was made from changed with
the digests the manifest keeps of them, changed alone, or passed off as an earlier kit's import; a side file
changed; a member no check covers added; and the bundles of runs that were stopped (a watch run ended by
Ctrl-C, a run that ended before its results) verify."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.adversarial.corpus import Case, Ending, Scratch


def _harness_bundle(scratch: Scratch) -> bytes:
    from kit.bundle.writer import write_bundle  # noqa: PLC0415
    from tests.bundle.harness_bundle import harness_run  # noqa: PLC0415

    run_dir = harness_run(scratch.tmp / "made")
    return write_bundle([run_dir], scratch.tmp / "made" / "harness.tar.gz", environ={}).path.read_bytes()


def _verify(change: Callable[[bytes], bytes], kind: str = "harness") -> Callable[[Scratch], list[str]]:
    """`kit verify` of a bundle of `kind` (an imported harness run, or a synthetic grid run) changed by `change`."""
    def make(scratch: Scratch) -> list[str]:
        if kind == "harness":
            bundle = _harness_bundle(scratch)
        else:
            from kit.bundle.writer import write_bundle  # noqa: PLC0415
            from tests.bundle.conftest import synthetic_grid_run  # noqa: PLC0415

            run = synthetic_grid_run(scratch.tmp / "made" / "grid-toy")
            bundle = write_bundle([run], scratch.tmp / "made" / "grid.tar.gz", environ={}).path.read_bytes()
        (scratch.inbox / "b.tar.gz").write_bytes(change(bundle))
        return ["verify", str(scratch.inbox / "b.tar.gz")]
    return make


def _changed(pin: bool, earlier: bool = False) -> Callable[[bytes], bytes]:
    def change(bundle: bytes) -> bytes:
        from tests.bundle.harness_bundle import changed_call, without_derivation  # noqa: PLC0415

        changed = changed_call(bundle, pin=pin)
        return without_derivation(changed) if earlier else changed
    return change


def _side_file(name: str) -> Callable[[bytes], bytes]:
    def change(bundle: bytes) -> bytes:
        from tests.bundle import mutations  # noqa: PLC0415

        return mutations.edit(bundle, f"records/imported/{name}", reseal=True, replace_text=['"', '" '])
    return change


def _added(name: str) -> Callable[[bytes], bytes]:
    def change(bundle: bytes) -> bytes:
        from tests.bundle import mutations  # noqa: PLC0415

        return mutations.add_file(bundle, name, "<script>fetch('https://example.com/x')</script>\n", reseal=True)
    return change


def _fails_naming(needle: str) -> Callable[[Scratch, Ending], str | None]:
    def check(scratch: Scratch, ending: Ending) -> str | None:
        named = any(needle in line and line.startswith(("FAIL ", "MISMATCH ")) for line in ending.lines)
        if ending.code != 1 or not named or not ending.lines[-1].startswith("FAILED: "):
            return f"not failed naming {needle!r}: exit {ending.code}: {ending.lines[-4:]}"
        return None
    return check


def _listed_not_checked(needle: str) -> Callable[[Scratch, Ending], str | None]:
    def check(scratch: Scratch, ending: Ending) -> str | None:
        listed = any(line.startswith("note: NOT CHECKED: ") and needle in line for line in ending.lines)
        if not listed or "not checked beyond the checksum list" not in ending.lines[-1]:
            return f"{needle} is not listed as not checked: exit {ending.code}: {ending.lines[-4:]}"
        return None
    return check


def _stopped_watch(scratch: Scratch) -> list[str]:
    """A watch run as `kit watch` leaves it when Ctrl-C stops it: the recorder closed by the stop."""
    from tests.watch.test_watch_units import _watch_run  # noqa: PLC0415

    recorder, _ = _watch_run(scratch.inbox / "runs")
    return ["bundle", str(recorder.run_dir), "-o", str(scratch.outputs / "watch.tar.gz")]


def _stopped_run(scratch: Scratch) -> list[str]:
    """A run that ended before it wrote its results, packed as it is."""
    from tests.stopped_run import stopped_run  # noqa: PLC0415

    return ["bundle", str(stopped_run(scratch.inbox)), "--allow-unfinished", "-o",
            str(scratch.outputs / "stopped.tar.gz")]


def _bundle_verifies(name: str) -> Callable[[Scratch, Ending], str | None]:
    def check(scratch: Scratch, ending: Ending) -> str | None:
        from kit.bundle.verify import verify_bundle  # noqa: PLC0415

        path = scratch.outputs / name
        if ending.code != 0 or not path.is_file():
            return f"kit bundle failed: exit {ending.code}: {ending.lines[-3:]}"
        verdict = verify_bundle(path)
        unexplained = [f for f, c in verdict.coverage.items() if c.by.startswith("a file the kit does not write")]
        if not verdict.ok or unexplained:
            return f"its bundle does not verify, or holds members nothing covers: {verdict.lines()[-3:]} {unexplained}"
        return None
    return check


def _manifest_results_removed(bundle: bytes) -> bytes:
    """A finished run whose manifest still says finished, its results/ taken out: the note says the bundle
    holds none, and nothing is said to be recomputed and equal that was not."""
    from tests.bundle import mutations  # noqa: PLC0415

    decoded = mutations.decode(bundle)
    decoded.members = [(n, d) for n, d in decoded.members if "/results/" not in n]
    mutations._reseal(decoded)
    return decoded.pack()


def _no_results_said(scratch: Scratch, ending: Ending) -> str | None:
    """Said to hold no results, none counted as recomputed and equal; the report rendered with them fails
    where this very kit wrote it (a checkout with local changes is another kit: its report is not compared)."""
    said = any("results/ is not in the bundle" in line for line in ending.lines)
    last = ending.lines[-1] if ending.lines else ""
    passed = ending.code == 0 and "recomputed 0 files, 0 values" in last
    failed = ending.code == 1 and any(line.startswith("FAIL report.html") for line in ending.lines)
    if not said or not (passed or failed):
        return f"a bundle without results is not said to hold none: exit {ending.code}: {ending.lines[-3:]}"
    return None


def _json_edit(path: str, edit: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    def change(bundle: bytes) -> bytes:
        from tests.bundle import mutations  # noqa: PLC0415

        decoded = mutations.decode(bundle)
        i = decoded.index(path)
        value = json.loads(decoded.members[i][1])
        edit(value)
        decoded.members[i] = (decoded.members[i][0], json.dumps(value).encode())
        mutations._reseal(decoded)
        return decoded.pack()
    return change


def _nested_side_manifest(bundle: bytes) -> bytes:
    """The harness manifest kept beside the first calls file made JSON nested deeper than a parser follows,
    its sha256 in the run's manifest changed to match, resealed: verify reads it to make the records again."""
    import hashlib  # noqa: PLC0415

    from tests.bundle import mutations  # noqa: PLC0415

    side = "fixture-churn-cuda.manifest.json"
    data = b'{"box": ' * 100_000 + b"1" + b"}" * 100_000
    decoded = mutations.decode(bundle)
    i = decoded.index(f"records/imported/{side}")
    decoded.members[i] = (decoded.members[i][0], data)
    j = decoded.index("/manifest.json")
    manifest = json.loads(decoded.members[j][1])
    manifest["imported"]["sha256"][side] = hashlib.sha256(data).hexdigest()
    decoded.members[j] = (decoded.members[j][0], json.dumps(manifest).encode())
    mutations._reseal(decoded)
    return decoded.pack()


def _drop_imported_runs(manifest: dict) -> None:
    manifest["imported"].pop("runs")


def _calls_outside(manifest: dict) -> None:
    """The first calls file named as a path out of the bundle, to a credential the case plants."""
    manifest["imported"]["runs"][0]["calls"] = "../../../../../../../../home/.ssh/id_ed25519"


CASES = [
    Case(cls="bundle", name="imported calls and their calls_sha256 changed together, resealed",
         make=_verify(_changed(pin=True)), expect="handled", check=_fails_naming("records/calls.jsonl"),
         timeout=120),
    Case(cls="bundle", name="imported calls changed, their calls_sha256 kept, resealed",
         make=_verify(_changed(pin=False)), expect="handled",
         check=_fails_naming("differs from its sha256 imported.runs[0].calls_sha256"), timeout=120),
    Case(cls="bundle", name="imported calls and digests changed, the import passed off as an earlier kit's",
         make=_verify(_changed(pin=True, earlier=True)), expect="handled",
         check=_fails_naming("records/calls.jsonl"), timeout=120),
    Case(cls="bundle", name="an imported done marker changed, resealed", make=_verify(_side_file(
        "fixture-churn-cuda.done.json")), expect="handled", check=_fails_naming("fixture-churn-cuda.done.json"),
         timeout=120),
    Case(cls="bundle", name="an imported report changed, resealed", make=_verify(_side_file(
        "fixture-churn-study.report.json")), expect="handled",
         check=_fails_naming("fixture-churn-study.report.json"), timeout=120),
    Case(cls="bundle", name="an imported run's manifest without its list of calls files", make=_verify(
        _json_edit("/manifest.json", _drop_imported_runs)), expect="handled", check=_fails_naming("manifest.json"),
         timeout=120),
    Case(cls="bundle", name="an imported run's manifest naming a calls file out of the bundle", make=_verify(
        _json_edit("/manifest.json", _calls_outside)), expect="handled",
         check=_fails_naming("but missing from the bundle"), timeout=120),
    Case(cls="bundle", name="an imported side manifest nested too deeply, its sha256 changed to match, resealed",
         make=_verify(_nested_side_manifest), expect="handled", check=_fails_naming("nested too deeply"),
         timeout=120),
    Case(cls="bundle", name="a member nothing covers added to a run folder, resealed",
         make=_verify(_added("{run}/notes.html"), kind="grid"), expect="handled",
         check=_listed_not_checked("notes.html"), timeout=120),
    Case(cls="bundle", name="a member nothing covers added beside an imported run's calls, resealed",
         make=_verify(_added("{run}/records/imported/extra.jsonl")), expect="handled",
         check=_listed_not_checked("records/imported/extra.jsonl"), timeout=120),
    Case(cls="bundle", name="a member nothing covers added at the bundle's top, resealed",
         make=_verify(_added("{root}/index.html"), kind="grid"), expect="handled",
         check=_listed_not_checked("index.html"), timeout=120),
    Case(cls="bundle", name="a finished run's results taken out, resealed", make=_verify(_manifest_results_removed,
                                                                                         kind="grid"),
         expect="handled", check=_no_results_said, timeout=120),
    Case(cls="bundle", name="the bundle of a watch run stopped by Ctrl-C", make=_stopped_watch, expect="handled",
         check=_bundle_verifies("watch.tar.gz"), timeout=120),
    Case(cls="bundle", name="the bundle of a run that ended before its results", make=_stopped_run,
         expect="handled", check=_bundle_verifies("stopped.tar.gz"), timeout=120),
]
