"""`kit compare RUN_OR_ANALYSIS --reference paper`: this run's findings beside the paper's published values."""

from __future__ import annotations

from pathlib import Path

import click

from kit.analysis import findings_model
from kit.analysis.findings_model import Findings
from kit.core.errors import ConfigError
from kit.core.paths import RunPaths
from kit.core.terminal_text import one_line

FINDINGS = findings_model.FILE
FIX_ANALYZE = "run `kit analyze RUN_DIR` first and pass its analysis folder (or the run folder)"


def findings_path(target: Path) -> Path:
    """findings.json of an analysis folder, or of a run folder's analysis/; a ConfigError otherwise."""
    if (target / FINDINGS).is_file():
        return target / FINDINGS
    if RunPaths(target).manifest.is_file():
        inside = RunPaths(target).findings
        if inside.is_file():
            return inside
        raise ConfigError(f"{target} is a run folder with no analysis/{FINDINGS}",
                          f"run `kit analyze {target}` first, then `kit compare {target}`")
    raise ConfigError(f"{target} holds no {FINDINGS} and is not a run folder", FIX_ANALYZE)


def read_findings(path: Path) -> Findings:
    """The findings.json `kit analyze` wrote, read into the Findings model (a ConfigError naming what is
    wrong when it cannot be read or has not that shape)."""
    try:
        return findings_model.read(path)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", "check the path and its permissions") from None
    except findings_model.NotFindings as exc:
        fix = FIX_ANALYZE if "not a kit findings file" in str(exc) else "run `kit analyze` again"
        said = f"is {exc}" if str(exc).startswith("not ") else f"lacks the runs and tables `kit analyze` writes ({exc})"
        raise ConfigError(one_line(f"{path} {said}"), fix) from None


@click.command("compare")
@click.argument("target", metavar="RUN_OR_ANALYSIS",
                type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--reference", type=click.Choice(["paper"]), default="paper", show_default=True,
              help="Published values to compare with: the paper's (seed 000, Tables III-VII).")
def compare(target: Path, reference: str) -> None:
    """Set this run's findings beside the paper's published values (Tables III-VII), with a verdict per value.

    RUN_OR_ANALYSIS is the folder `kit analyze` wrote (it holds findings.json) or a run folder with
    analysis/findings.json. Each value is consistent (the published value inside this run's 95% interval;
    slopes and odds ratios: same sign and overlapping intervals; p-values: both significant or both not at
    0.05), inconsistent, underpowered (a smaller run than the paper's), or not comparable (a different model,
    format, engine or setting: the line says which). Writes compare-paper.md, .csv and .json beside
    findings.json.

    Beside the numbers, the paper's qualitative findings (each path reproduces itself, the two paths differ,
    the difference is the cache state's, ...) are judged on this run whatever its model or scale: holds, does
    not hold, inconclusive or not measured, with the counts. Writes them as compare-claims.md and .json.

    A remedy run's fixes are held against the paper's unfixed values: per table, closed (0, and its 95%
    interval below the smallest unfixed divergence the paper prints) or not closed (printed only).
    """
    from kit.compare import claims, outputs  # noqa: PLC0415
    from kit.compare.evidence import from_findings  # noqa: PLC0415
    from kit.core.safe_console import SafeConsole  # noqa: PLC0415
    from kit.compare.published import load_reference  # noqa: PLC0415
    from kit.compare.remedy import remedy_lines, table as remedy_table  # noqa: PLC0415
    from kit.protocols.results_model import NotResults  # noqa: PLC0415
    from kit.compare.run_rows import FindingsShape  # noqa: PLC0415
    from kit.compare.verdicts import compare as compare_findings  # noqa: PLC0415
    from kit.run.preflight import check_out  # noqa: PLC0415

    path = findings_path(target)
    findings = read_findings(path)
    published = load_reference(reference)
    try:
        comparison = compare_findings(findings, published)
        evidence = from_findings(findings, FINDINGS)
        remedies = remedy_lines(findings, published, FINDINGS)
    except (FindingsShape, NotResults) as exc:
        raise ConfigError(f"{path}: {exc}", "run `kit analyze` again to rewrite it") from None
    doc = outputs.document(comparison, path, findings.created, published, reference)
    judged = claims.judge(evidence)
    claims_doc = claims.document(judged, evidence, doc["created"], str(path), findings.created)
    check_out(path.parent, "RUN_OR_ANALYSIS")
    written = outputs.write_all(path.parent, doc, claims_doc)
    console = SafeConsole()
    console.print(outputs.terminal_table(comparison))
    for line in outputs.absent_lines(comparison):
        console.print(line, markup=False, highlight=False)
    console.print(f"rules: {'; '.join(outputs.RULES.values())}", markup=False, highlight=False)
    console.print(outputs.claims_table(judged))
    not_measured = claims.not_measured_tables(judged)
    if not_measured:
        console.print(f"not measured by this run: the claims of {', '.join(not_measured)}", markup=False,
                      highlight=False)
    if remedies:
        console.print(remedy_table(remedies))
    console.print(f"numeric: {outputs.summary_line(doc['counts'])} (consistent is kept for runs comparable with "
                  "the paper's)", markup=False, highlight=False)
    console.print(one_line(claims.summary_line(judged)), markup=False, highlight=False)
    console.print(one_line(f"written: {', '.join(str(p) for p in written)}"), markup=False, highlight=False)
