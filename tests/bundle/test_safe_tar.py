"""Hostile archives are refused before anything is written; a bundle from a newer kit says so."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.bundle import CHECKSUMS, INDEX, checksums, safe_tar
from kit.bundle.show import describe
from kit.bundle.verify import NewerBundle, verify_bundle
from kit.cli import cli
from kit.errors import KitError


def _archive(path: Path, entries: list[tarfile.TarInfo], payload: bytes = b"owned\n") -> Path:
    with tarfile.open(path, "w:gz") as tar:
        ok = tarfile.TarInfo("b/README.md")
        ok.size = 3
        tar.addfile(ok, io.BytesIO(b"hi\n"))
        for info in entries:
            tar.addfile(info, io.BytesIO(payload) if info.isfile() else None)
    return path


def _file(name: str, size: int = 6) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


def _special(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


HOSTILE = {
    "traversal": (_file("b/../../escaped.txt"), "points outside the bundle"),
    "absolute": (_file("/tmp/kit-absolute-escape.txt"), "absolute path"),
    "symlink": (_special("b/link", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
    "hardlink": (_special("b/hard", tarfile.LNKTYPE, "b/README.md"), "hard link"),
    "device": (_special("b/dev", tarfile.CHRTYPE), "device file"),
    "fifo": (_special("b/pipe", tarfile.FIFOTYPE), "FIFO"),
    "second root": (_file("other/file.txt"), "top-level"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archive_is_refused_and_nothing_is_written(case, tmp_path):
    entry, why = HOSTILE[case]
    bundle = _archive(tmp_path / "hostile.tar.gz", [entry])
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(safe_tar.UnsafeBundle) as caught:
        safe_tar.extract(bundle, dest)
    assert why in str(caught.value)
    assert list(dest.iterdir()) == []
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/kit-absolute-escape.txt").exists()
    with pytest.raises(safe_tar.UnsafeBundle):
        verify_bundle(bundle)
    with pytest.raises(safe_tar.UnsafeBundle):
        describe(bundle)


def test_cli_verify_names_the_hostile_member_and_exits_non_zero(tmp_path):
    bundle = _archive(tmp_path / "hostile.tar.gz", [_special("b/link", tarfile.SYMTYPE, "../../etc/shadow")])
    result = CliRunner().invoke(cli, ["verify", str(bundle)])
    assert result.exit_code != 0
    assert "b/link" in str(result.exception) and "symbolic link" in str(result.exception)


def test_a_regular_archive_extracts(tmp_path):
    bundle = _archive(tmp_path / "fine.tar.gz", [_file("b/sub/data.txt")])
    root = safe_tar.extract(bundle, tmp_path / "dest")
    assert (root / "sub" / "data.txt").read_bytes() == b"owned\n" and root.name == "b"


def _bundle_with_schema(path: Path, schema: str) -> Path:
    files = {INDEX: json.dumps({"schema": schema, "runs": []}).encode()}
    files[CHECKSUMS] = checksums.render(files)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = _file(f"b/{name}", len(data))
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_bundle_from_a_newer_kit_gets_a_clear_message(tmp_path):
    bundle = _bundle_with_schema(tmp_path / "newer.tar.gz", "kit.bundle/2")
    with pytest.raises(NewerBundle, match=r"newer kit \(schema kit.bundle/2"):
        verify_bundle(bundle)
    with pytest.raises(NewerBundle, match="upgrade the kit"):
        describe(bundle)


def test_a_current_schema_bundle_without_runs_verifies(tmp_path):
    verdict = verify_bundle(_bundle_with_schema(tmp_path / "empty.tar.gz", "kit.bundle/1"))
    assert verdict.ok and verdict.files_checked == 1


def test_a_damaged_archive_is_an_error_not_a_traceback(tmp_path):
    bundle = _archive(tmp_path / "fine.tar.gz", [_file("b/sub/data.txt", 200_000)], payload=bytes(range(256)) * 782)
    data = bytearray(bundle.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(bytes(data))
    with pytest.raises(KitError, match="damaged or not a .tar.gz"):
        safe_tar.extract(damaged, tmp_path / "dest")
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(bundle.read_bytes()[: len(data) // 2])
    with pytest.raises(KitError, match="damaged or not a .tar.gz"):
        verify_bundle(truncated)
    with pytest.raises(KitError, match="no bundle at"):
        verify_bundle(tmp_path / "absent.tar.gz")
