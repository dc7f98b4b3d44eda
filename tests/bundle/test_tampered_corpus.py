"""The tampered-bundle corpus (tests/fixtures/bundles/mutations.json, rebuilt from what a probe found
getting past `kit verify`, plus the classic archive tricks): every one is refused by `kit verify` and
`kit show` with exit 1 and its own one-line reason, no traceback, and nothing left on disk."""

from __future__ import annotations

import pytest

from tests.bundle import mutations
from tests.bundle.kit_cli import run_kit

CORPUS = mutations.load_corpus()


@pytest.fixture(scope="module")
def tampered(synthetic_bundle, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tampered")
    paths = {}
    for number, mutation in enumerate(CORPUS):
        paths[mutation["name"]] = folder / f"{number:03d}.tar.gz"
        paths[mutation["name"]].write_bytes(mutations.apply(synthetic_bundle, mutation))
    return paths


def test_the_corpus_names_each_mutation_once():
    names = [m["name"] for m in CORPUS]
    assert len(names) == len(set(names)) and len(names) >= 86
    assert all(m["op"] in mutations.OPS and m["expect"] for m in CORPUS)


def test_the_untampered_bundle_and_its_rebuild_verify(synthetic_bundle, tmp_path):
    """The corpus changes only what each mutation names: the bundle rebuilt member by member verifies."""
    for number, data in enumerate([synthetic_bundle, mutations.decode(synthetic_bundle).pack()]):
        path = tmp_path / f"{number}.tar.gz"
        path.write_bytes(data)
        outcome = run_kit("verify", str(path), scratch=tmp_path / f"scratch{number}")
        assert outcome.code == 0 and outcome.out.splitlines()[-1].startswith("OK: "), outcome.text
        assert outcome.left_behind == []


@pytest.mark.parametrize("mutation", CORPUS, ids=[m["name"] for m in CORPUS])
def test_kit_verify_refuses_it_with_its_reason(mutation, tampered, tmp_path):
    outcome = run_kit("verify", str(tampered[mutation["name"]]), scratch=tmp_path)
    assert outcome.code == 1, outcome.text
    reason = outcome.one_line_reason()
    assert mutation["expect"] in reason, reason
    assert "Traceback" not in outcome.text and "\x1b" not in outcome.text
    assert outcome.left_behind == []


@pytest.mark.parametrize("mutation", CORPUS, ids=[m["name"] for m in CORPUS])
def test_kit_show_refuses_it_too(mutation, tampered, tmp_path):
    outcome = run_kit("show", str(tampered[mutation["name"]]), scratch=tmp_path)
    assert outcome.code == 1 and outcome.out == "", outcome.text
    reason = outcome.one_line_reason()
    assert mutation["expect"] in reason or "does not verify (FAILED:" in reason, reason
    assert outcome.left_behind == []
