"""Results bundles: one `.tar.gz` a reviewer can check without the author's machine.

A bundle holds one or more run folders (manifest, raw records, logs, the protocol as run, results and
analysis), an offline HTML report, a README, RO-Crate provenance and a sealed checksum list.
`writer.write_bundle` makes one, `verify.verify_bundle` re-checks it, `show.describe` summarises it once
verified. `archive_format` is the exact byte layout the writer produces and the reader accepts;
`safe_tar` reads it as a stream within `limits`.
"""

from __future__ import annotations

SCHEMA = "kit.bundle/1"
SCHEMA_VERSION = 1
INDEX = "bundle.json"
CHECKSUMS = "SHA256SUMS"
CRATE = "ro-crate-metadata.json"
REPORT = "report.html"
README = "README.md"
RUNS = "runs"
