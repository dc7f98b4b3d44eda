"""Smallest hostile inputs: a bundle that is not a bundle, a run folder that is not a run folder."""

from __future__ import annotations

from tests.adversarial.corpus import Case, Scratch


def _not_a_bundle(scratch: Scratch) -> list[str]:
    fake = scratch.inbox / "results.tar.gz"
    fake.write_bytes(b"this is not a gzip stream\n")
    return ["verify", str(fake)]


CASES = [
    Case(cls="bundle", name="not a gzip file", make=_not_a_bundle, needle="results.tar.gz"),
]
