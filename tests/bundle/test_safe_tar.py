"""Hostile archives are refused and nothing is left behind; a bundle from a newer kit says so.
(The archives use the writer's exact framing, so each is refused for its hostile member.)"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.bundle import CHECKSUMS, INDEX, checksums, safe_tar
from kit.bundle.show import describe
from kit.bundle.verify import NewerBundle, verify_bundle
from kit.cli import cli
from kit.core.errors import KitError
from tests.bundle import archives


def _archive(path: Path, entries: list[tarfile.TarInfo], payload: bytes = b"owned\n") -> Path:
    members = [archives.member("b/README.md", b"hi\n")]
    members += [archives.raw_member(info, payload if info.isfile() else b"") for info in entries]
    return archives.write(path, archives.gzip_member(archives.tar(members)))


def _file(name: str) -> tarfile.TarInfo:
    return archives.info(name)


def _special(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    return archives.info(name, type=kind, linkname=target)


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
    return archives.write(path, archives.pack("b", files))


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
    bundle = _archive(tmp_path / "fine.tar.gz", [_file("b/sub/data.txt")], payload=bytes(range(256)) * 782)
    data = bytearray(bundle.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(bytes(data))
    with pytest.raises(KitError, match="is damaged: its (compressed data|CRC-32)"):
        safe_tar.extract(damaged, tmp_path / "dest")
    assert list((tmp_path / "dest").iterdir()) == []
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(bundle.read_bytes()[: len(data) // 2])
    with pytest.raises(KitError, match="is damaged: its compressed data stops before the deflate stream ends"):
        verify_bundle(truncated)
    with pytest.raises(KitError, match="no bundle at"):
        verify_bundle(tmp_path / "absent.tar.gz")
