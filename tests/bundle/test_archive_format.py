"""The writer's bytes are exactly kit.bundle.archive_format (what verify accepts, docs/bundles.md), any
tar reader reads them, and the size limits hold on data as it streams, not only on declared sizes."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import tarfile

import pytest

from kit.bundle import archive_format as fmt
from kit.bundle import safe_tar
from kit.bundle.errors import UnsafeBundle
from kit.bundle.limits import Limits
from kit.bundle.verify import verify_bundle
from tests.bundle import archives


def test_the_writer_writes_the_documented_layout(synthetic_bundle, tmp_path):
    mtime = int.from_bytes(synthetic_bundle[4:8], "little")
    assert synthetic_bundle[:10] == fmt.gzip_header(mtime) == b"\x1f\x8b\x08\x00" + synthetic_bundle[4:8] + b"\x02\xff"
    plain = gzip.decompress(synthetic_bundle)
    assert len(plain) % fmt.RECORD == 0
    path = tmp_path / "b.tar.gz"
    path.write_bytes(synthetic_bundle)
    with tarfile.open(path) as tar:
        members = tar.getmembers()
        assert tar.pax_headers == {}
        rebuilt = b"".join(archives.member(m.name, tar.extractfile(m).read(), mtime) for m in members)
    assert all(m.isreg() and m.mode == 0o644 and m.mtime == mtime and (m.uid, m.gid, m.uname, m.gname) == (0, 0, "", "")
               and m.pax_headers == {} for m in members)
    assert plain == rebuilt + fmt.end_of_archive(len(rebuilt))


def test_long_and_non_ascii_names_use_one_pax_path_record_as_tarfile_does(tmp_path):
    for name in ["b/" + "a" * 120, "b/résumé/ü.json", "b/" + "é" * 60]:
        expected = tarfile.TarInfo(name)
        expected.size, expected.mtime, expected.mode = 5, archives.STAMP, 0o644
        assert fmt.member_header(name, 5, archives.STAMP) == expected.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict")
        bundle = archives.write(tmp_path / "long.tar.gz", archives.pack("b", {name[2:]: b"12345"}))
        listing = safe_tar.scan(bundle, tmp_path / "out", lambda _: None)
        assert list(listing.files) == [name[2:]]
        shutil.rmtree(tmp_path / "out", ignore_errors=True)


@pytest.mark.skipif(shutil.which("tar") is None, reason="no tar here")
def test_system_tar_lists_a_bundle(synthetic_bundle, tmp_path):
    path = archives.write(tmp_path / "b.tar.gz", synthetic_bundle)
    listed = subprocess.run(["tar", "-tzf", str(path)], capture_output=True, text=True, check=True).stdout.split()
    assert "base/SHA256SUMS" in listed and not any(name.endswith("/") for name in listed)


@pytest.mark.parametrize(("limits", "reason"), [
    (Limits(file_bytes=1000), "over the 1000-byte limit on one file"),
    (Limits(total_bytes=5000), "over the 5000-byte limit on a bundle"),
    (Limits(expansion=1, expansion_allowance=0), "a decompression bomb"),
    (Limits(members=4), "holds more than 4 files"),
    (Limits(read_whole_bytes=500), "the kit reads it whole and takes at most 500"),
    (Limits(name_bytes=20), "has a name longer than 20 bytes"),
])
def test_each_limit_refuses_a_real_bundle_past_it(limits, reason, synthetic_bundle, tmp_path):
    path = archives.write(tmp_path / "b.tar.gz", synthetic_bundle)
    assert verify_bundle(path).ok
    with pytest.raises(UnsafeBundle, match=reason):
        verify_bundle(path, limits)


def test_a_refused_extraction_leaves_nothing(synthetic_bundle, tmp_path):
    path = archives.write(tmp_path / "b.tar.gz", synthetic_bundle)
    with pytest.raises(UnsafeBundle):
        safe_tar.extract(path, tmp_path / "dest", Limits(members=6))
    assert list((tmp_path / "dest").iterdir()) == []
    root = safe_tar.extract(path, tmp_path / "dest")
    assert (root / "SHA256SUMS").is_file() and root.parent == tmp_path / "dest"
