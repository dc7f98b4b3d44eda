"""Recomputing a run's `analysis/` folder from the bundle's raw records: what `kit analyze` wrote
(findings.json, the tables III–VII as CSV, Markdown and LaTeX, the data of each figure) and what
`kit compare` wrote beside it (compare-paper.json, .csv, .md, and compare-claims.json, .md: the paper's
qualitative findings judged on the run; a bundle of an earlier kit has none, and is verified without them).

The findings are computed again (kit.analysis.findings.compute) from the raw copies of the runs
findings.json names, with the settings it records (seed, replicate counts); the tables, figure data
and comparison are rendered again from them with this kit. `compare` then applies each file's rule
(docs/bundles.md, "How each file is compared"):

- JSON: value by value (kit.bundle.value_diff), leaving out what describes the analyst's machine or the
  moment rather than the records (`VOLATILE`) and tolerating keys this kit adds that an older kit did not
  write (`ADDED_SINCE`);
- rendered tables (CSV, Markdown, LaTeX): kit.bundle.rendered (cell by cell in this kit's layout, number
  by number in another kit's);
- figure images (PNG, PDF): not compared (their bytes depend on the matplotlib version); the data each
  figure draws, `figures/<stem>.json`, is.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.core import limits
from kit.analysis.findings_model import FILE, SCHEMA, Findings
from kit.bundle.value_diff import Mismatch, compare_json
from kit.bundle.content import FIGURE_TYPES, load_json
from kit.bundle.rendered import Outcome, compare_table, leaves

FINDINGS = f"analysis/{FILE}"
COMPARE_STEM = "analysis/compare-paper"
CLAIMS_STEM = "analysis/compare-claims"
TABLES = "analysis/tables/"
FIGURES = "analysis/figures/"

# the kinds of recomputed file `kit verify` counts, in the order it prints them
RESULTS, FINDINGS_KIND, TABLES_KIND, FIGURE_DATA, COMPARISON = (
    "results", "findings", "tables", "figure data", "comparison with the paper")
ARTIFACT_KINDS = (RESULTS, FINDINGS_KIND, TABLES_KIND, FIGURE_DATA, COMPARISON)

# key paths ("*": every element of a list) left out of the comparison: when and where the analysis ran,
# how long it took, what files it wrote, the folders it was given and how many processes it used
VOLATILE = {FINDINGS_KIND: (("created",), ("timings_seconds",), ("files",), ("skipped_inputs",),
                            ("settings", "workers"), ("runs", "*", "path")),
            COMPARISON: (("created",), ("findings",), ("findings_created",))}  # compare-paper and compare-claims
# keys this kit writes that the findings of an older kit lack: compared where the bundle has them
ADDED_SINCE = (("settings", "harness_thresholds"), ("runs", "*", "engine"), ("runs", "*", "prompt_cache"),
               ("tables", "V", "rows", "*", "compared_on"), ("tables", "IV", "rows", "*", "cache_caused"))
# labels the kit derives from a run's manifest (itself checked), reworded by later kits to say more: the
# bundled label also matches when it is an older, shorter wording found within this kit's ("disabled" within
# "per request: ... (server-level prompt cache disabled)")
REWORDED = (("runs", "*", "prompt_cache"),)


class NotRecomputed(Exception):
    """The analysis folder cannot be recomputed from this bundle; the message says why."""


@dataclass
class Expected:
    """One analysis file as this kit recomputes it: its kind, its bytes, and the JSON it was rendered from
    (for rendered tables: the numbers an older layout may show)."""

    kind: str
    data: bytes
    source: Any = None
    relaid: str | None = None  # how the layout of this rendered table changed since older kits wrote it


@dataclass
class Recomputed:
    """An analysis folder recomputed: the files by name within the run, and the files that could not be
    (name -> why)."""

    files: dict[str, Expected] = field(default_factory=dict)
    not_recomputed: dict[str, str] = field(default_factory=dict)
    carried: list[str] = field(default_factory=list)  # values taken from the bundle, not recomputed: why
    findings: Findings | None = None  # the findings recomputed (what findings.json was compared with)
    runs: list[str] = field(default_factory=list)  # the runs they were computed from
    settings: Any = None  # and the kit.analysis.findings.Settings they were computed with


def _int_setting(settings: dict[str, Any], key: str, low: int, high: int) -> int:
    value = settings.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise NotRecomputed(f"its settings.{key} is {value!r}, not a whole number from {low} to {high}")
    return value


def settings_of(findings: dict[str, Any]):
    """The kit.analysis.findings.Settings a findings.json was computed with (workers: this machine's)."""
    from kit.analysis.findings import Settings  # noqa: PLC0415

    given = findings.get("settings")
    if not isinstance(given, dict):
        raise NotRecomputed("it records no settings (seed, replicate counts)")
    thresholds = given.get("harness_thresholds")
    if thresholds is not None and not (isinstance(thresholds, list) and len(thresholds) == 2 and all(
            isinstance(t, (int, float)) and not isinstance(t, bool) for t in thresholds)):
        raise NotRecomputed(f"its settings.harness_thresholds is {thresholds!r}, not two numbers")
    return Settings(seed=_int_setting(given, "seed", 0, limits.SEED_MAX),
                    block_bootstrap_replicates=_int_setting(given, "block_bootstrap_replicates", 1,
                                                            limits.REPLICATES_MAX),
                    sweep_replicates=_int_setting(given, "sweep_replicates", 1, limits.REPLICATES_MAX),
                    cluster_replicates=_int_setting(given, "cluster_replicates", 1, limits.REPLICATES_MAX),
                    harness_thresholds=tuple(thresholds) if thresholds else None)


def run_ids(findings: dict[str, Any]) -> list[str]:
    """The runs a findings.json was computed from, in its order (a cell `run/cell` counts as its run)."""
    runs = findings.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(r.get("run"), str) for r in runs):
        raise NotRecomputed("its `runs` is not a list of runs with their ids")
    return list(dict.fromkeys(r["run"].split("/", 1)[0] for r in runs))


def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def findings_files(fresh: Findings) -> dict[str, Expected]:
    """findings.json, the tables and the figure data, as this kit writes them from `fresh` findings."""
    from kit.analysis import figures, tables  # noqa: PLC0415

    out = {FINDINGS: Expected(FINDINGS_KIND, fresh.text().encode())}
    for name in tables.LAYOUTS:
        table = fresh.table(name)
        for ext, text in tables.render(name, table).items():
            out[f"{TABLES}table_{name}.{ext}"] = Expected(TABLES_KIND, text.encode(), table.to_json(),
                                                          tables.RELAID.get(name))
    for stem, data in figures.figure_data(fresh)["data"].items():
        out[f"{FIGURES}{stem}.json"] = Expected(FIGURE_DATA, _json_bytes(data))
    return out


def comparison_files(fresh: Findings, bundled_doc: Any) -> dict[str, Expected]:
    """compare-paper.json, .csv and .md as `kit compare` writes them from `fresh` findings, with the bundled
    document's time stamps and findings path (which say when and where it ran, not what it found)."""
    from kit.compare import outputs  # noqa: PLC0415
    from kit.compare.published import load_reference  # noqa: PLC0415
    from kit.compare.run_rows import FindingsShape  # noqa: PLC0415
    from kit.compare.verdicts import compare as compare_findings  # noqa: PLC0415

    if not isinstance(bundled_doc, dict) or not isinstance(bundled_doc.get("reference"), str):
        raise NotRecomputed("compare-paper.json names no reference")
    try:
        reference = load_reference(bundled_doc["reference"])
        comparison = compare_findings(fresh, reference)
    except FindingsShape as exc:
        raise NotRecomputed(f"the recomputed findings do not fit kit compare: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - an unknown reference name is a KitError
        raise NotRecomputed(f"its reference {bundled_doc['reference']!r} is not one this kit holds ({exc})") from None
    doc = outputs.document(comparison, Path(str(bundled_doc.get("findings"))),
                           bundled_doc.get("findings_created"), reference, bundled_doc["reference"])
    doc.update({key[0]: bundled_doc.get(key[0]) for key in VOLATILE[COMPARISON]})
    return {f"{COMPARE_STEM}.json": Expected(COMPARISON, _json_bytes(doc)),
            f"{COMPARE_STEM}.csv": Expected(COMPARISON, outputs.csv_text(doc).encode(), doc["lines"]),
            f"{COMPARE_STEM}.md": Expected(COMPARISON, outputs.markdown(doc).encode(), doc["lines"])}


def claims_files(fresh: Findings, bundled_doc: Any) -> dict[str, Expected]:
    """compare-claims.json and .md as `kit compare` writes them from `fresh` findings, with the bundled
    document's time stamps and findings path."""
    from kit.compare import claims  # noqa: PLC0415
    from kit.compare.evidence import from_findings  # noqa: PLC0415
    from kit.compare.run_rows import FindingsShape  # noqa: PLC0415

    if not isinstance(bundled_doc, dict):
        raise NotRecomputed("compare-claims.json is not a JSON object")
    try:
        evidence = from_findings(fresh, FILE)
    except FindingsShape as exc:
        raise NotRecomputed(f"the recomputed findings do not fit the claims: {exc}") from None
    held = {key[0]: bundled_doc.get(key[0]) for key in VOLATILE[COMPARISON]}
    doc = claims.document(claims.judge(evidence), evidence, str(held["created"]), str(held["findings"]),
                          held["findings_created"])
    doc.update(held)
    return {f"{CLAIMS_STEM}.json": Expected(COMPARISON, _json_bytes(doc)),
            f"{CLAIMS_STEM}.md": Expected(COMPARISON, claims.markdown(doc).encode(), doc["claims"])}


def recompute(bundled: dict[str, bytes], copies: dict[str, Path], cache: dict[str, Any]) -> Recomputed:
    """The analysis files of one run (`bundled`: name within the run -> bytes, analysis/ only) recomputed
    from the raw copies of the bundle's runs (`copies`: run id -> folder). `cache` keeps findings already
    computed for the same runs and settings (several runs may carry the same analysis)."""
    from kit.analysis import findings as analysis  # noqa: PLC0415

    out = Recomputed()
    names = sorted(bundled)
    try:
        if FINDINGS not in bundled:
            raise NotRecomputed(f"the folder holds no {FINDINGS}, which the other analysis files are computed with")
        try:
            held = load_json(bundled[FINDINGS])
        except (ValueError, UnicodeDecodeError):
            raise NotRecomputed(f"its {FINDINGS} is not valid JSON") from None
        if not isinstance(held, dict) or held.get("schema") != SCHEMA:
            raise NotRecomputed(f"its {FINDINGS} is not a kit findings file (schema {SCHEMA})")
        settings, ids = settings_of(held), run_ids(held)
        missing = [run for run in ids if run not in copies]
        if missing:
            raise NotRecomputed(f"its findings were computed from runs this bundle does not hold "
                                f"({', '.join(missing)}); bundle them together to have them recomputed")
        key = json.dumps([ids, repr(settings)])
        if key not in cache:
            cache[key] = analysis.compute([copies[run] for run in ids], settings)
        fresh = copy.deepcopy(cache[key])
        out.carried = carry_correctness(held, fresh)
        out.findings, out.runs, out.settings = fresh, ids, settings
        out.files.update(findings_files(fresh))
        for stem, render in ((COMPARE_STEM, comparison_files), (CLAIMS_STEM, claims_files)):
            if not any(name.startswith(stem) for name in names):
                continue  # kit compare did not run (compare-claims: or an earlier kit ran it)
            try:
                out.files.update(render(fresh, load_json(bundled.get(f"{stem}.json", b"null"))))
            except (ValueError, UnicodeDecodeError, NotRecomputed) as exc:
                stem_name = stem.rsplit("/", 1)[-1]
                why = str(exc) if isinstance(exc, NotRecomputed) else f"{stem_name}.json is not valid JSON"
                out.not_recomputed.update({n: why for n in names if n.startswith(stem)})
    except NotRecomputed as exc:
        out.not_recomputed.update({name: str(exc) for name in names})
    return out


CORRECTNESS = ("correct_recompute", "correct_hit", "flips", "mcnemar")


def carry_correctness(held: dict[str, Any], fresh: Findings) -> list[str]:
    """Table VII's correctness needs the GSM8K file the run's manifest names (its reference answers), which the
    bundle does not hold: where this machine lacks it, the bundled counts of that row stand in the recomputed
    findings (so the tables and the comparison render the same), and each such row is reported."""
    carried = []
    bundled_rows = ((held.get("tables") or {}).get("VII") or {}).get("rows")
    for i, row in enumerate(fresh.table("VII").rows):
        theirs = bundled_rows[i] if isinstance(bundled_rows, list) and i < len(bundled_rows) else None
        if "correctness_skipped" not in row or not isinstance(theirs, dict) or "correctness_skipped" in theirs:
            continue
        carried.append(f"Table VII correctness of {row.get('run')} (the GSM8K answers: {row['correctness_skipped']})")
        del row["correctness_skipped"]
        row.update({key: theirs[key] for key in CORRECTNESS if key in theirs})
    return carried


def is_image(name: str) -> bool:
    """A figure image (PNG, SVG, JPEG, PDF): compared through the data beside it, never byte for byte."""
    return name.startswith(FIGURES) and name.rsplit(".", 1)[-1].lower() in {t[1:] for t in FIGURE_TYPES} | {"pdf"}


def _at(doc: Any, path: tuple[str, ...]) -> list[tuple[dict, str]]:
    """Every (parent dict, key) a key path reaches in doc; '*' walks every element of a list."""
    parents = [doc]
    for part in path[:-1]:
        step = []
        for parent in parents:
            if part == "*" and isinstance(parent, list):
                step.extend(parent)
            elif isinstance(parent, dict) and part in parent:
                step.append(parent[part])
        parents = step
    return [(p, path[-1]) for p in parents if isinstance(p, dict)]


def comparable(kind: str, bundled: Any, fresh: Any) -> tuple[Any, Any]:
    """The two documents without their volatile keys, and without the keys this kit added that the bundled
    one lacks (both are changed in place)."""
    for path in VOLATILE.get(kind, ()):
        for doc in (bundled, fresh):
            for parent, key in _at(doc, path):
                parent.pop(key, None)
    if kind == FINDINGS_KIND:
        for added in ADDED_SINCE:
            kept = _at(bundled, added)
            for i, (parent, key) in enumerate(_at(fresh, added)):
                if i >= len(kept) or key not in kept[i][0]:
                    parent.pop(key, None)
        for path in REWORDED:
            for (theirs, key), (ours, _) in zip(_at(bundled, path), _at(fresh, path)):
                old, new = theirs.get(key), ours.get(key)
                if isinstance(old, str) and isinstance(new, str) and old and old in new:
                    ours[key] = old
    return bundled, fresh


def compare(file: str, name: str, data: bytes, expected: Expected) -> Outcome:
    """A bundled analysis file against this kit's recomputation, by the file's rule."""
    if not name.endswith(".json"):
        return compare_table(file, data, expected.data, expected.source, expected.relaid)
    try:
        bundled = load_json(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return Outcome([Mismatch(file, "", f"<unreadable: {type(exc).__name__}: {exc}>", "<readable>")], 0)
    bundled, fresh = comparable(expected.kind, bundled, json.loads(expected.data))
    return Outcome(compare_json(bundled, fresh, file), sum(1 for _ in leaves(bundled)))

