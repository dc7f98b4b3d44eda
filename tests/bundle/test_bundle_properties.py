"""Generated tampering: byte flips, appended gzip members, trailing data, metadata changes, size bombs,
path tricks, PAX keys, header bytes and content edits of a real bundle all fail `kit verify` with a
one-line reason, never a traceback, and leave nothing behind in the temporary or working folder."""

from __future__ import annotations

import gzip
import string

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kit.bundle import archive_format as fmt
from kit.bundle.limits import DEFAULT
from kit.core.terminal_text import one_line
from tests.bundle import mutations
from tests.bundle.kit_cli import run_kit

NAMES = ["{run}/manifest.json", "{run}/records/on1.jsonl", "{run}/results/grid.json", "/README.md", "/SHA256SUMS",
         "/bundle.json"]
PATH_TRICKS = ["{root}/../", "/", "{root}//", "{root}/./", "C:/", "{root}\\", "other/", "", "{root}/\x1b[", "{root}/\n"]
PAX_KEYS = ["mtime", "atime", "ctime", "uid", "gid", "uname", "gname", "size", "linkpath", "comment", "hdrcharset",
            "SCHILY.xattr.security.capability", "GNU.sparse.size", "LIBARCHIVE.creationtime"]
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _mutations(size: int):
    """(label, op, args) for the mutations of a bundle of `size` bytes."""
    member = st.sampled_from(NAMES)
    text = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=20)
    metadata = st.one_of(
        st.integers(0, 0o7777).filter(lambda m: m != fmt.MODE).map(lambda m: {"mode": m}),
        st.integers(1, 8**7 - 1).map(lambda u: {"uid": u}),
        st.integers(1, 8**7 - 1).map(lambda g: {"gid": g}),
        st.integers(-10**9, 10**6).filter(bool).map(lambda d: {"mtime_delta": d}),
        text.map(lambda u: {"uname": u[:31]}),
        text.map(lambda g: {"gname": g[:31]}),
        text.map(lambda target: {"linkname": target}),
        st.sampled_from(sorted(set(mutations.TYPES) - {"file", "global-pax"})).map(lambda k: {"kind": k}),
        st.sampled_from(["gnu", "ustar"]).map(lambda f: {"format": f, "uname": "x"}),
    )
    return st.one_of(
        st.tuples(st.just("byte flip"), st.just("flip"), st.integers(0, size - 1).map(lambda i: {"offset": i})),
        st.tuples(st.just("appended gzip member"), st.just("append"),
                  st.binary(max_size=200).map(lambda b: {"hex": gzip.compress(b).hex()})),
        st.tuples(st.just("trailing data"), st.just("append"), st.binary(min_size=1, max_size=64).map(
            lambda b: {"hex": b.hex()})),
        st.tuples(st.just("data after the tar end"), st.just("after_end"),
                  st.binary(min_size=1, max_size=11_000).map(lambda b: {"hex": b.hex()})),
        st.tuples(st.just("truncated"), st.just("truncate"), st.integers(0, size - 1).map(lambda k: {"keep": k})),
        st.tuples(st.just("gzip header byte"), st.just("set_byte"), st.tuples(st.integers(2, 9), st.integers(0, 255))
                  .map(lambda t: {"offset": t[0], "value": t[1]})),
        st.tuples(st.just("metadata change"), st.just("change"),
                  st.tuples(member, metadata).map(lambda t: {"member": t[0], **t[1]})),
        st.tuples(st.just("PAX keys"), st.just("change"), st.tuples(member, st.dictionaries(
            st.sampled_from(PAX_KEYS) | text, st.text(string.printable.strip(), min_size=1, max_size=20),
            min_size=1, max_size=3)).map(lambda t: {"member": t[0], "pax": t[1]})),
        st.tuples(st.just("declared size bomb"), st.just("declared_size"), st.tuples(
            st.sampled_from(NAMES[:3]), st.integers(DEFAULT.expansion_allowance + 1, 8**11 - 1)).map(
            lambda t: {"name": t[0].replace(".json", "-big.json"), "size": t[1]})),
        st.tuples(st.just("zero-filled bomb"), st.just("zero_file"), st.integers(300, 400).map(
            lambda mib: {"name": "{run}/logs/zeros.log", "mib": mib})),
        st.tuples(st.just("path trick"), st.just("rename"), st.tuples(member, st.sampled_from(PATH_TRICKS), text).map(
            lambda t: {"member": t[0], "to": t[1] + t[2]})),
        st.tuples(st.just("content byte flip"), st.just("edit"), st.tuples(member, st.integers(0, 200)).map(
            lambda t: {"file": t[0], "flip_at": t[1]})),
    )


@st.composite
def tampering(draw, size: int):
    label, op, args = draw(_mutations(size))
    return {"name": label, "op": op, "args": args}


def test_generated_mutations_all_fail_verify(synthetic_bundle, tmp_path_factory):
    seen: dict[str, int] = {}

    @SETTINGS
    @given(mutation=tampering(len(synthetic_bundle)))
    def check(mutation):
        folder = tmp_path_factory.mktemp("generated")
        bundle = folder / "bundle" / "tampered.tar.gz"
        bundle.parent.mkdir()
        try:
            tampered = mutations.apply(synthetic_bundle, mutation)
        except (ValueError, IndexError, KeyError, OverflowError):
            return  # a mutation that cannot be built (e.g. a flip beyond a short file) is not a bundle
        assume(not mutations.holds_the_same(synthetic_bundle, tampered))  # a flip deflate cannot see
        bundle.write_bytes(tampered)
        outcome = run_kit("verify", str(bundle), scratch=folder / "scratch")
        assert outcome.code == 1, (mutation, outcome.text)
        reason = outcome.one_line_reason()
        assert "Traceback" not in outcome.text and reason == one_line(reason), (mutation, outcome.text)
        assert outcome.left_behind == [] and [p.name for p in bundle.parent.iterdir()] == ["tampered.tar.gz"]
        seen[mutation["name"]] = seen.get(mutation["name"], 0) + 1

    check()
    assert sum(seen.values()) >= 50, seen
    assert len(seen) >= 10, seen  # every family was drawn


def test_flipping_any_sampled_byte_fails(synthetic_bundle, tmp_path):
    """Every 16th byte and each of the first 16 and last 24 (gzip header, deflate end, trailer) inverted:
    each fails verify, as a refusal or a failed check, unless the flip inflates to the very same archive
    (deflate has such bits, e.g. in a back-reference within zeros; then nothing the bundle holds changed) or
    changes a gzip header field that says nothing of the content (MTIME, XFL, OS)."""
    from kit.bundle.errors import BadBundle  # noqa: PLC0415
    from kit.bundle.verify import verify_bundle  # noqa: PLC0415

    size = len(synthetic_bundle)
    offsets = sorted(set(range(0, size, 16)) | set(range(16)) | set(range(size - 24, size)))
    path = tmp_path / "flipped.tar.gz"
    unseen = []
    for offset in offsets:
        flipped = mutations.flip(synthetic_bundle, offset)
        path.write_bytes(flipped)
        try:
            verdict = verify_bundle(path)
        except BadBundle:
            continue
        assert mutations.holds_the_same(synthetic_bundle, flipped), (offset, verdict.lines())
        unseen.append(offset)
    header_fields = set(range(4, 10))  # MTIME, XFL, OS: verify ignores them (kit.bundle.gzip_stream)
    assert header_fields <= set(unseen)
    assert len(offsets) > 300 and len(set(unseen) - header_fields) <= 3, unseen
