"""The manifest read into one typed model (kit.record.manifest.RunManifest): every manifest the kit wrote before
reads into it and writes back unchanged, keys it does not name included; a field of the wrong type is
refused in one line naming it, before anything is written; RunPaths names the files old run folders hold."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from kit.core.errors import ConfigError
from kit.record.manifest import READ, SCHEMA, V1, WRITTEN, Manifest, PassInfo, RunManifest, parsed
from kit.core.paths import RunPaths
from tests.bundle.kit_cli import run_here as kit
from tests.test_cli_errors import one_line_error
from tests.source_trees import syntax_tree

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RUN_FOLDERS = sorted(p.parent for p in (FIXTURES / "records_v1").glob("*/manifest.json"))
BUNDLES = sorted([*(FIXTURES / "bundles").glob("*.tar.gz"), *(FIXTURES / "records_v1" / "bundles").glob("*.tar.gz")])


def _bundled_manifests() -> list[tuple[str, bytes]]:
    """(bundle/member, bytes) of every manifest.json in the bundles of earlier releases under tests/fixtures."""
    found = []
    for bundle in BUNDLES:
        with tarfile.open(bundle) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.endswith(f"/{RunPaths.MANIFEST}"):
                    found.append((f"{bundle.name}/{member.name}", tar.extractfile(member).read()))
    return found


BUNDLED = _bundled_manifests()


def test_the_fixtures_hold_manifests_of_each_kind():
    assert len(RUN_FOLDERS) == 3 and len(BUNDLED) >= 5
    kinds = {json.loads(data)["protocol"]["kind"] for _, data in BUNDLED}
    assert {"reset", "grid", "pinning"} <= kinds


@pytest.mark.parametrize("name, data", BUNDLED, ids=[name for name, _ in BUNDLED])
def test_every_bundled_manifest_reads_and_writes_back_unchanged(name, data):
    original = json.loads(data)
    manifest = parsed(json.loads(data), name)
    assert manifest.schema_id == original["schema"] == V1
    assert manifest.to_json() == original  # every key, those the model does not name too, as written
    assert manifest.run_id == original["run_id"] and manifest.protocol.kind == original["protocol"]["kind"]
    assert set(manifest.passes) == set(original["passes"])


@pytest.mark.parametrize("folder", RUN_FOLDERS, ids=lambda p: p.name)
def test_an_old_run_folder_reads_typed_and_is_rewritten_with_nothing_lost(folder, tmp_path):
    run_dir = shutil.copytree(folder, tmp_path / folder.name)
    original = json.loads((run_dir / RunPaths.MANIFEST).read_text())
    manifest = Manifest.load(run_dir)
    for pass_id, info in manifest.run.passes.items():
        assert isinstance(info, PassInfo) and info.status == original["passes"][pass_id]["status"]
        assert info.file == RunPaths.records_name(pass_id) == original["passes"][pass_id]["file"]
        assert (run_dir / info.file).is_file()
    assert manifest.run.engine.model_sha256 == original["engine"]["model_sha256"]
    assert manifest.run.provenance.cpu_backend == original["provenance"].get("cpu_backend")
    manifest.update(status="interrupted", reason="a test")  # what a resume's first write does
    rewritten = json.loads((run_dir / RunPaths.MANIFEST).read_text())
    assert rewritten == {**original, "status": "interrupted", "reason": "a test"}
    assert rewritten["schema"] == V1  # rewritten with the schema it was read with


def test_keys_the_model_does_not_name_are_kept_at_every_level(tmp_path):
    run_dir = shutil.copytree(RUN_FOLDERS[0], tmp_path / "run")
    data = json.loads((run_dir / RunPaths.MANIFEST).read_text())
    data["from_a_later_kit"] = {"x": [1, 2]}
    data["engine"]["gpu_layers"] = 99
    first = next(iter(data["passes"]))
    data["passes"][first]["kv_cache_bytes"] = 123
    (run_dir / RunPaths.MANIFEST).write_text(json.dumps(data))
    manifest = Manifest.load(run_dir)
    manifest.set_pass(first, reason="kept?")
    after = json.loads((run_dir / RunPaths.MANIFEST).read_text())
    assert after["from_a_later_kit"] == {"x": [1, 2]} and after["engine"]["gpu_layers"] == 99
    assert after["passes"][first]["kv_cache_bytes"] == 123 and after["passes"][first]["reason"] == "kept?"


def test_a_manifest_saying_schema_2_reads_the_same(tmp_path):
    run_dir = shutil.copytree(RUN_FOLDERS[0], tmp_path / "run")
    data = json.loads((run_dir / RunPaths.MANIFEST).read_text())
    (run_dir / RunPaths.MANIFEST).write_text(json.dumps({**data, "schema": SCHEMA}))
    manifest = Manifest.load(run_dir)
    assert manifest.run.schema_id == SCHEMA and manifest.run.to_json() == {**data, "schema": SCHEMA}
    assert READ == (V1, SCHEMA)


def test_a_new_manifest_holds_what_was_given_and_the_written_schema(tmp_path):
    manifest = Manifest.create(tmp_path, protocol={"name": "p", "kind": "reset"}, seeds={"request_seed": 7})
    manifest.set_pass("s1", status="running", file=RunPaths.records_name("s1"))
    manifest.set_pass("s1", status="OK", records=3)
    written = json.loads((tmp_path / RunPaths.MANIFEST).read_text())
    assert written["schema"] == WRITTEN == V1  # what `kit verify` of earlier releases reads
    assert set(written) == {"schema", "run_id", "status", "started", "protocol", "seeds", "passes"}
    assert written["protocol"] == {"name": "p", "kind": "reset"}  # no nulls for keys never given
    assert written["passes"] == {"s1": {"status": "OK", "file": "records/s1.jsonl", "records": 3}}
    assert Manifest.load(tmp_path).run == manifest.run


@pytest.mark.parametrize("change, field, problem", [
    (lambda m: m["engine"].update(model_sha256=5), "engine.model_sha256", "Input should be a valid string"),
    (lambda m: m.update(passes={"s1": {"status": "OK", "records": "three"}}), "passes.s1.records",
     "Input should be a valid integer, unable to parse string as an integer"),
    (lambda m: m.update(protocol=["reset"]), "protocol", "Input should be a valid dictionary"),
    (lambda m: m.update(resumed={"at": "now"}), "resumed", "Input should be a valid list"),
    (lambda m: m["provenance"].update(cpu_backend="wheel"), "provenance.cpu_backend",
     "Input should be a valid dictionary"),
])
def test_a_field_of_the_wrong_type_is_refused_naming_it(tmp_path, change, field, problem):
    run_dir = shutil.copytree(RUN_FOLDERS[0], tmp_path / "run")
    data = json.loads((run_dir / RunPaths.MANIFEST).read_text())
    change(data)
    (run_dir / RunPaths.MANIFEST).write_text(json.dumps(data))
    with pytest.raises(ConfigError) as caught:
        Manifest.load(run_dir)
    assert caught.value.message == f"{run_dir / RunPaths.MANIFEST}: {field}: {problem}"
    assert "\n" not in caught.value.line()


def test_the_cli_refuses_a_wrongly_typed_manifest_in_one_line_and_writes_nothing(tmp_path):
    run_dir = shutil.copytree(RUN_FOLDERS[0], tmp_path / "run")
    data = json.loads((run_dir / RunPaths.MANIFEST).read_text())
    data["workload"]["items"] = "many"
    (run_dir / RunPaths.MANIFEST).write_text(json.dumps(data))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    one_line_error(kit("bundle", str(run_dir), "-o", str(tmp_path / "out.tar.gz")),
                   "manifest.json: workload.items: Input should be a valid integer", "restore it from a bundle")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_schema_this_kit_does_not_read_is_refused_in_one_line(tmp_path):
    run_dir = shutil.copytree(RUN_FOLDERS[0], tmp_path / "run")
    data = json.loads((run_dir / RunPaths.MANIFEST).read_text())
    (run_dir / RunPaths.MANIFEST).write_text(json.dumps({**data, "schema": "kit.manifest/3"}))
    one_line_error(kit("bundle", str(run_dir)), "has schema 'kit.manifest/3'", "this kit reads kit.manifest/1 and "
                   "kit.manifest/2; upgrade the kit")


def test_run_paths_name_the_layout_of_old_run_folders():
    for folder in RUN_FOLDERS:
        paths = RunPaths(folder)
        assert paths.manifest.is_file() and paths.records.is_dir() and paths.results.is_dir()
        assert paths.logs.is_dir()
        results = json.loads(paths.manifest.read_text())["results"]
        assert all((folder / name).is_file() for name in results.values())
    assert RunPaths.result_name("grid", ".csv") == "results/grid.csv"
    assert RunPaths.episodes_name("on1") == "records/on1.episodes.jsonl"
    assert RunPaths(Path("r")).superseded == Path("r/records/superseded")
    assert RunPaths(Path("r")).findings == Path("r/analysis/findings.json")


def test_a_model_round_trip_keeps_aliases():
    data = {"schema": V1, "imported": {"from": "determinism-harness", "run_name": "x"}}
    manifest = RunManifest.model_validate(data)
    assert manifest.imported.from_ == "determinism-harness"
    assert manifest.to_json() == data and json.load(io.StringIO(json.dumps(manifest.to_json()))) == data


def _layout_literals() -> list[str]:
    """`module:line` of each run-folder name written out in kit/ rather than taken from RunPaths: a path
    joined with "records", "results", "logs", "replay" or "manifest.json", or a string (not a docstring)
    that starts with "records/", "results/" or "logs/"."""
    import ast  # noqa: PLC0415

    kit_dir = Path(__file__).resolve().parents[1] / "kit"
    names = ("manifest.json", "records", "results", "logs", "replay", "analysis")
    found = []
    for path in sorted(kit_dir.rglob("*.py")):
        if path == kit_dir / "core" / "paths.py":
            continue
        tree = syntax_tree(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            joined = isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and \
                isinstance(node.right, ast.Constant) and node.right.value in names
            spelled = isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and (node.value == "manifest.json" or node.value.startswith(("records/", "results/", "logs/")))
            if joined or spelled:
                found.append(f"{path.relative_to(kit_dir.parent)}:{node.lineno}")
    return found


def test_the_run_folder_layout_is_spelled_in_run_paths_only():
    assert _layout_literals() == []
