"""The gzip header's optional fields are harmless and skipped, so that a bundle an earlier kit wrote
(through tarfile: FNAME set) or one recompressed by another tool still verifies; what is unsafe or
inconsistent in the header is still refused in one line (kit.bundle.gzip_stream)."""

from __future__ import annotations

import re
import struct
import zlib

import pytest

from kit.bundle.errors import BadBundle
from kit.bundle.verify import verify_bundle
from tests.bundle import mutations


def with_header(bundle: bytes, flags: int = 0, fields: bytes = b"", mtime: int | None = None, xfl: int | None = None,
                os_byte: int | None = None, header_crc: bool = False) -> bytes:
    """The bundle with its 10-byte gzip header rewritten and `fields` (already in RFC 1952 order) after it."""
    stamp = struct.unpack("<I", bundle[4:8])[0] if mtime is None else mtime
    head = bundle[:3] + bytes([flags | (0x02 if header_crc else 0)]) + struct.pack("<I", stamp) \
        + bytes([bundle[8] if xfl is None else xfl, bundle[9] if os_byte is None else os_byte]) + fields
    if header_crc:
        head += struct.pack("<H", zlib.crc32(head) & 0xFFFF)
    return head + bundle[10:]


HARMLESS = {
    "FNAME, as tarfile writes it": dict(flags=0x08, fields=b"results.tar\0"),
    "FCOMMENT": dict(flags=0x10, fields=b"made on a laptop\0"),
    "FEXTRA": dict(flags=0x04, fields=b"\x04\x00AB\x00\x00"),
    "FTEXT": dict(flags=0x01),
    "FHCRC that matches": dict(header_crc=True),
    "every optional field at once": dict(flags=0x1D, fields=b"\x02\x00xy" + b"name\0" + b"comment\0", header_crc=True),
    "another MTIME": dict(mtime=0),
    "XFL 0 and OS 3 (unix)": dict(xfl=0, os_byte=3),
}


@pytest.mark.parametrize("change", HARMLESS.values(), ids=list(HARMLESS))
def test_a_harmless_gzip_header_field_verifies(change, synthetic_bundle, tmp_path):
    path = tmp_path / "recompressed.tar.gz"
    path.write_bytes(with_header(synthetic_bundle, **change))
    verdict = verify_bundle(path)
    assert verdict.ok and verdict.values_compared > 0, verdict.lines()
    assert mutations.holds_the_same(synthetic_bundle, path.read_bytes()) == (not change.get("flags")
                                                                              and not change.get("header_crc"))


@pytest.mark.parametrize("change, reason", [
    (dict(flags=0x08, fields=b"a" * 70_000 + b"\0"), "file name (FNAME) longer than 65536 bytes"),
    (dict(flags=0x10, fields=b"c" * 70_000 + b"\0"), "comment (FCOMMENT) longer than 65536 bytes"),
    (dict(flags=0x40), "reserved bits 0x40"),
], ids=["FNAME too long", "FCOMMENT too long", "reserved bit"])
def test_an_unsafe_gzip_header_is_refused(change, reason, synthetic_bundle, tmp_path):
    path = tmp_path / "odd.tar.gz"
    path.write_bytes(with_header(synthetic_bundle, **change))
    with pytest.raises(BadBundle, match=re.escape(reason)):
        verify_bundle(path)


def test_a_header_crc_that_does_not_match_is_refused(synthetic_bundle, tmp_path):
    good = with_header(synthetic_bundle, flags=0x08, fields=b"x.tar\0", header_crc=True)
    path = tmp_path / "bad-crc.tar.gz"
    path.write_bytes(good[:16] + bytes([good[16] ^ 0xFF]) + good[17:])  # the FHCRC's first byte
    with pytest.raises(BadBundle, match="header CRC"):
        verify_bundle(path)


def test_a_header_that_ends_inside_its_name_is_damaged(tmp_path):
    path = tmp_path / "cut.tar.gz"
    path.write_bytes(b"\x1f\x8b\x08\x08\0\0\0\0\x02\xffresults.ta")
    with pytest.raises(BadBundle, match="ends inside its file name"):
        verify_bundle(path)
