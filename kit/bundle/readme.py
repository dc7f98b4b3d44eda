"""The README a reviewer reads first: what was run, on what, and how to re-check it."""

from __future__ import annotations

import re
from typing import Any

from kit.bundle import CHECKSUMS, CRATE, INDEX, REPORT, RUNS
from kit.bundle.content import BundledRun, summary
from kit.bundle.headline import HELD, headline
from kit.core.terminal_text import one_line

MARKDOWN_SPECIAL = re.compile(r"([\\`<>\[\]])")


def text(value: object) -> str:
    """A value from a manifest or the index as Markdown that shows it as written: on one line, with the
    characters that could start raw HTML, a link or code backslash-escaped (a reviewer is shown only this
    rendering: kit.bundle.reader_files)."""
    return MARKDOWN_SPECIAL.sub(r"\\\1", one_line(str(value)))


def render(runs: list[BundledRun], index: dict[str, Any], bundle_name: str) -> bytes:
    kit = found if isinstance(found := index.get("kit"), dict) else {}
    lines = [f"# Results bundle {text(bundle_name)}", "",
             f"Written {text(index.get('created'))} by the cache-divergence reproducibility kit "
             f"{text(kit.get('version'))} (commit {text(kit.get('git_commit'))}).", "",
             "## Headline", "",
             f"Per run, what diverged and how often (95% intervals), and whether its controls held; `{REPORT}` has "
             "the tables and figures.", ""]
    for h in map(headline, runs):
        lines.append(f"- **{text(h.run_id)}** ({text(h.kind)}, {text(h.status)})")
        lines.extend(f"  - {text(line)}" for line in h.verdict)
        lines.append(f"  - controls {HELD[h.held]}" + "".join(f"; {text(line)}" for line in h.controls))
    lines += ["", "## What was run", ""]
    for run in runs:
        info = summary(run)
        lines.append(f"### {text(run.run_id)}")
        lines.append("")
        lines.extend(f"- {key}: {text(value)}" for key, value in info.items() if key != "run" and value not in (None, ""))
        lines.append("")
    lines += [
        "## What is in here", "",
        f"- `{REPORT}`: the headline verdict of each run, its results and the paper's tables as tables, and the "
        "figures; no network or script needed. `kit verify` renders it (and this README) again from the "
        "verified files and compares; where it says NOT shown, the file is not what the kit renders: do not "
        "open it, open the page `kit show THIS_BUNDLE.tar.gz --report OUT.html` writes from the verified data.",
        f"- `{RUNS}/<run>/manifest.json`: the run's settings, engine, model sha256, seeds, host, GPUs, package "
        "versions and each pass's launch details and status (only passes with status OK are results).",
        f"- `{RUNS}/<run>/records/*.jsonl`: one JSON line per request: the exact request, the engine's raw "
        "response (its echoes of what the record holds kept as sha256 digests), token ids and log-probabilities, cache telemetry and the cache-state gate.",
        f"- `{RUNS}/<run>/logs/`: the engines' own logs. `{RUNS}/<run>/protocol/`: the protocol file as run.",
        f"- `{RUNS}/<run>/results/` and `analysis/`: what the kit computed from the records.",
        f"- `{INDEX}`: the bundle's index; `{CRATE}`: RO-Crate 1.1 provenance; `{CHECKSUMS}`: sha256 of "
        "every file, sealed by a last line over the list itself.",
        "", "## How to re-check it", "",
        "With the kit installed (`pip install cache-divergence-kit` or a checkout; best the version and commit "
        "named above, since another version may lay its results out differently, which shows as mismatches):", "",
        "    kit verify THIS_BUNDLE.tar.gz", "",
        "checks every checksum; recomputes from the raw records, with the bundled protocol, seeds and analysis "
        "settings, each run's results, its findings, every table, the data behind every figure and the "
        "comparison with the paper, and compares them number by number (figure images, and anything it cannot "
        "recompute, are checked by checksum only and listed as such); its last line says how many files and "
        "values it recomputed from how many records. It prints OK or each mismatch (file, key, bundled value, "
        "recomputed value) and exits non-zero on any mismatch or on an archive laid out otherwise than "
        "`kit bundle` writes it. `kit show THIS_BUNDLE.tar.gz` verifies the bundle the same way, then prints the "
        "headline results and provenance (`--no-verify` shows them unchecked, labelled UNVERIFIED).", "",
        f"Without the kit: `sha256sum -c {CHECKSUMS}` inside the unpacked folder checks the files (the last line, "
        "the seal over the list, is a comment to it). Checksums catch damage and careless edits; they "
        "do not prove who made the bundle.", "",
        "Secrets: the kit never copies environment dumps and replaces any value of a secret-looking "
        "environment variable (tokens, API keys) found in a file with `[REDACTED:<name>]`; "
        f"`{INDEX}` lists every such replacement (by variable name, never the value).", ""]
    return "\n".join(lines).encode()
