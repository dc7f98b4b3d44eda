"""Bundles of real CPU reset runs: they verify elsewhere, any changed byte is caught and named, rewritten
numbers are caught by recomputation, secrets never get in. (The grid protocol does not exist yet; these
use two real reset runs, one with two sessions and one with one.)"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.bundle import CHECKSUMS, CRATE, INDEX, checksums
from kit.bundle.show import describe
from kit.bundle.verify import verify_bundle
from kit.bundle.writer import write_bundle
from kit.cli import _bundle_after_run, cli
from kit.core.atomic_file import write_json_atomic
from kit.record.manifest import Manifest
from kit.core.paths import REPO_ROOT
from tests.bundle.conftest import read_members, repack

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def real_bundle(real_runs, tmp_path_factory) -> Path:
    return write_bundle(real_runs, tmp_path_factory.mktemp("bundle") / "two-runs.tar.gz", environ={}).path


def test_bundle_holds_every_raw_file_of_each_run(real_runs, real_bundle):
    root, files = read_members(real_bundle)
    assert root == "two-runs"
    for run_dir in real_runs:
        for path in run_dir.rglob("*"):
            if path.is_file():
                rel = f"runs/{run_dir.name}/{path.relative_to(run_dir).as_posix()}"
                assert files[rel] == path.read_bytes(), rel
        manifest = Manifest.load(run_dir).run
        assert files[f"runs/{run_dir.name}/protocol/reset.yaml"].decode() == manifest.protocol.content
    assert {"README.md", "report.html", INDEX, CRATE, CHECKSUMS} <= set(files)
    listed = checksums.parse(files[CHECKSUMS])
    assert listed.sealed and set(listed.digests) == set(files) - {CHECKSUMS}


def test_bundle_verifies_on_another_checkout_without_the_run_folders(run_copies, tmp_path):
    bundle = write_bundle(run_copies, tmp_path / "moved.tar.gz", environ={}).path
    for run_dir in run_copies:
        shutil.rmtree(run_dir)  # the author's run folders are gone
    checkout = tmp_path / "elsewhere" / "checkout"
    shutil.copytree(REPO_ROOT / "kit", checkout / "kit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "protocols", checkout / "protocols")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "PYTHONPATH": str(checkout),
           "KIT_CACHE_DIR": str(tmp_path / "cache"), "KIT_OUTPUTS": str(tmp_path / "outputs")}
    done = subprocess.run([sys.executable, "-c", "from kit.cli import main; main()", "verify", str(bundle)],
                          cwd=checkout.parent, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    _, files = read_members(bundle)
    summary = done.stdout.strip().splitlines()[-1]
    assert summary.startswith(f"OK: {len(files) - 1} files match their checksums; recomputed 4 files"), summary
    assert re.search(r"recomputed 4 files, \d+ values from \d+ records \(results: 4 files", done.stdout)


def test_changing_any_byte_of_any_file_fails_and_names_the_file(real_bundle, tmp_path):
    root, files = read_members(real_bundle)
    assert verify_bundle(real_bundle).ok
    for name, data in sorted(files.items()):
        for position in sorted({0, len(data) // 2, len(data) - 1}):
            altered = bytearray(data)
            altered[position] ^= 0x01
            bad = repack(root, {**files, name: bytes(altered)}, tmp_path / "altered.tar.gz")
            verdict = verify_bundle(bad)
            assert not verdict.ok, (name, position)
            assert name in verdict.named_files(), (name, position, verdict.lines())


def test_rewritten_numbers_with_fresh_checksums_are_caught_by_recomputation(real_bundle, tmp_path):
    root, files = read_members(real_bundle)
    run_id = json.loads(files[INDEX])["runs"][0]["run_id"]
    name = f"runs/{run_id}/results/reset_table.json"
    table = json.loads(files[name])
    true_value = table["sessions"][1]["paths_differ"]
    table["sessions"][1]["paths_differ"] = true_value + 1
    files[name] = json.dumps(table).encode()
    files[CHECKSUMS] = checksums.render({k: v for k, v in files.items() if k != CHECKSUMS})
    bad = repack(root, files, tmp_path / "forged.tar.gz")
    verdict = verify_bundle(bad)
    assert verdict.problems == []  # the checksums were redone, so only recomputation can catch it
    [mismatch] = verdict.mismatches
    assert (mismatch.file, mismatch.key) == (name, "sessions[1].paths_differ")
    assert (mismatch.bundled, mismatch.recomputed) == (true_value + 1, true_value)
    result = CliRunner().invoke(cli, ["verify", str(bad)])
    assert result.exit_code == 1
    assert f"MISMATCH {name} sessions[1].paths_differ: bundled {true_value + 1}, recomputed {true_value}" \
        in result.output


def test_planted_secrets_never_enter_the_bundle(run_copies, tmp_path):
    secret, other = "hf_PlantedSecretToken0123456789abcdefXYZ", "planted-api-key-value-987654"
    third = "not-in-this-shell-4242"  # only in the run's files, under a secret-looking name
    run_dir = run_copies[0]
    log = run_dir / "logs" / "server-s1.log"
    log.write_text(log.read_text() + f"\nAuthorization: Bearer {secret}\nkey={other}\n")
    manifest = Manifest.load(run_dir).run.to_json()
    manifest["engine"]["note"] = f"launched with HF_TOKEN={secret}"
    manifest["engine"]["headers"] = {"X-Api-Key": other}
    manifest["engine"]["config"] = {"Env": [f"HUGGING_FACE_HUB_TOKEN={third}", "PATH=/usr/bin"]}
    write_json_atomic(run_dir / "manifest.json", manifest)
    (run_dir / ".env").write_text(f"HF_TOKEN={secret}\n")
    (run_dir / "environment.json").write_text(json.dumps({"HF_TOKEN": secret}))
    written = write_bundle(run_copies, tmp_path / "scrubbed.tar.gz",
                           environ={"HF_TOKEN": secret, "SERVICE_API_KEY": other, "PATH": "/usr/bin"})
    raw = gzip.decompress(written.path.read_bytes())
    assert secret.encode() not in raw and other.encode() not in raw and third.encode() not in raw
    _, files = read_members(written.path)
    assert not any(n.endswith((".env", "environment.json")) for n in files)
    assert len(written.skipped) == 2
    redacted = {(r.file.split("/")[-1], r.what) for r in written.redactions}
    assert redacted == {("server-s1.log", "HF_TOKEN"), ("server-s1.log", "SERVICE_API_KEY"),
                        ("manifest.json", "HF_TOKEN"), ("manifest.json", "SERVICE_API_KEY"),
                        ("manifest.json", "HUGGING_FACE_HUB_TOKEN")}
    assert len(json.loads(files[INDEX])["redactions"]) == 5
    assert b"[REDACTED:HF_TOKEN]" in files[f"runs/{run_dir.name}/manifest.json"]
    assert verify_bundle(written.path).ok  # redaction keeps the bundle consistent


def test_crate_describes_every_file_and_each_run(real_runs, real_bundle, tmp_path):
    _, files = read_members(real_bundle)
    crate = json.loads(files[CRATE])
    assert crate["@context"] == "https://w3id.org/ro/crate/1.1/context"
    graph = {entity["@id"]: entity for entity in crate["@graph"]}
    assert graph[CRATE]["about"] == {"@id": "./"} and graph["./"]["@type"] == "Dataset"
    for name, data in files.items():
        if name not in (CRATE, CHECKSUMS):
            assert graph[name]["@type"] == "File" and graph[name]["sha256"] == checksums.sha256(data)
    for run_dir in real_runs:
        action = graph[f"#run-{run_dir.name}"]
        assert action["@type"] == "CreateAction" and action["startTime"]
        model_sha = Manifest.load(run_dir).run.engine.model_sha256
        assert {"@id": f"#model-{model_sha}"} in action["instrument"]
        assert {"@id": f"runs/{run_dir.name}/results/reset_table.json"} in action["result"]
    rocrate = pytest.importorskip("rocrate.rocrate")  # the reference RO-Crate library reads it back
    root = tmp_path / "crate"
    root.mkdir()
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    loaded = rocrate.ROCrate(root)
    assert {e.id for e in loaded.get_entities()} >= {"runs/" + real_runs[0].name + "/manifest.json"}
    assert loaded.root_dataset["name"].startswith("kit results bundle")


def test_show_prints_headline_and_provenance_without_extracting(real_runs, real_bundle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = "\n".join(describe(real_bundle))
    assert list(tmp_path.iterdir()) == []
    for run_dir in real_runs:
        manifest = Manifest.load(run_dir).run.to_json()
        table = json.loads((run_dir / "results" / "reset_table.json").read_text())
        assert f"run: {run_dir.name}" in text
        assert manifest["engine"]["model_sha256"] in text and manifest["provenance"]["kit"]["git_commit"] in text
        cells = [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]
        for row in table["sessions"]:  # the results as a Rich table, and the headline verdict from the same counts
            assert [row["session"], "OK", str(row["items"]), str(row["recompute_reproduces"]),
                    str(row["hit_reproduces"]), str(row["paths_differ"]), str(row["cache_caused"])] in cells
            assert (f"session {row['session']}: the cache-hit path differs from the recompute path in "
                    f"{row['paths_differ']}/{row['items']} items") in text
    result = CliRunner().invoke(cli, ["show", str(real_bundle)])
    assert result.exit_code == 0 and "model sha256" in result.output


def test_cli_bundle_and_the_bundle_written_after_a_run(run_copies, tmp_path):
    out = tmp_path / "cli.tar.gz"
    result = CliRunner().invoke(cli, ["bundle", *map(str, run_copies), "-o", str(out)])
    assert result.exit_code == 0, result.output
    verified = CliRunner().invoke(cli, ["verify", str(out)])
    assert verified.exit_code == 0 and verified.output.splitlines()[-1].startswith("OK: ")
    said = []
    _bundle_after_run(run_copies[1], said.append)
    automatic = run_copies[1].parent / "bundles" / f"{run_copies[1].name}.tar.gz"
    assert automatic.is_file() and str(automatic) in said[0]
    assert verify_bundle(automatic).ok


def test_a_run_still_in_progress_is_not_bundled(run_copies, tmp_path):
    manifest = Manifest.load(run_copies[0])
    manifest.update(status="started")
    result = CliRunner().invoke(cli, ["bundle", str(run_copies[0]), "-o", str(tmp_path / "x.tar.gz")])
    assert result.exit_code != 0 and "still running" in str(result.exception)
    assert not (tmp_path / "x.tar.gz").exists()


def test_crate_names_the_kit_that_ran_each_run(real_runs, real_bundle):
    _, files = read_members(real_bundle)
    graph = {entity["@id"]: entity for entity in json.loads(files[CRATE])["@graph"]}
    for run_dir in real_runs:
        kit = Manifest.load(run_dir).run.provenance.kit
        entity = graph[f"#kit-{run_dir.name}"]
        assert (entity["version"], entity["identifier"]) == (kit["version"], kit["git_commit"])
        assert {"@id": f"#kit-{run_dir.name}"} in graph[f"#run-{run_dir.name}"]["instrument"]


def test_missing_extra_and_swapped_protocol_files_are_named(real_bundle, tmp_path):
    root, files = read_members(real_bundle)
    run_id = json.loads(files[INDEX])["runs"][0]["run_id"]
    log, protocol = f"runs/{run_id}/logs/server-s1.log", f"runs/{run_id}/protocol/reset.yaml"
    changed = {k: v for k, v in files.items() if k != log}
    changed[f"runs/{run_id}/results/extra.json"] = b"{}"
    verdict = verify_bundle(repack(root, changed, tmp_path / "changed.tar.gz"))
    assert {(p.file, p.what) for p in verdict.problems} == {
        (log, "listed in the checksums but missing"),
        (f"runs/{run_id}/results/extra.json", "not in the checksum list")}
    swapped = {**files, protocol: files[protocol] + b"# edited after the run\n"}
    swapped[CHECKSUMS] = checksums.render({k: v for k, v in swapped.items() if k != CHECKSUMS})
    verdict = verify_bundle(repack(root, swapped, tmp_path / "swapped.tar.gz"))
    assert [(p.file, p.what) for p in verdict.problems] == [
        (protocol, "differs from the protocol sha256 in the manifest")]
