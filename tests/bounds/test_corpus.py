"""The probe's corpus, one case at a time: every bad protocol file and bad option line gets one line naming
the key or option, a non-zero exit, no traceback, and nothing written."""

from __future__ import annotations

import pytest

from tests.bounds.cli_probe import BAD_OPTIONS, BAD_PROTOCOLS, expected, fill, places, run_kit, written


def test_corpus_sizes():
    assert len(BAD_PROTOCOLS) >= 88 and len(BAD_OPTIONS) >= 67


@pytest.mark.parametrize("protocol_file", BAD_PROTOCOLS, ids=lambda p: p.stem)
def test_bad_protocol_file(protocol_file, tmp_path, capsys):
    with places(tmp_path) as where:
        ending = run_kit(["run", str(protocol_file), "--out", where["out"]], capsys)
    assert ending.clear_error(expected(protocol_file)), ending
    assert not written(tmp_path)


@pytest.mark.parametrize("case", BAD_OPTIONS, ids=lambda c: " ".join(c["args"][:1] + c["args"][-2:]))
def test_bad_option_line(case, tmp_path, capsys):
    with places(tmp_path) as where:
        ending = run_kit(fill(case["args"], where), capsys)
    assert ending.clear_error(case["expect"]), ending
    assert not written(tmp_path)
