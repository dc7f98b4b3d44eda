"""What a reviewer reads first about each bundled run: a headline verdict (what diverged, how often, with
its interval) and whether the run's controls held, plus its main table, all as plain strings.

The HTML report (kit.bundle.report) and `kit show` (kit.bundle.show) render the same headlines, so the
page and the terminal say the same thing. Each kind reads its own results table into a `Headline`
(`Kind.headline`, in its package's view.py; kit.protocols.headline); the registry says which kind wrote a
table (its `"table"` name). Tables are `kit.core.layout.Layout`s (caption, header, string cells, notes); the
paper's Tables III–VII come from `analysis/findings.json` when `kit analyze` left one in the run folder.
"""

from __future__ import annotations

from kit.analysis.findings_model import FILE, Table
from kit.analysis.tables import LAYOUTS
from kit.bundle.content import BundledRun
from kit.core.layout import Layout
from kit.core.paths import RunPaths
from kit.protocols.headline import Headline
from kit.protocols.kinds import for_table
from kit.protocols.results_model import NotResults

FINDINGS = f"analysis/{FILE}"  # written by `kit analyze RUN_DIR` (its default --out)
HELD = {True: "held", False: "did NOT hold", None: "not judged"}  # a Headline's `held`, in words
ODD = (AttributeError, KeyError, TypeError, ValueError, IndexError, ZeroDivisionError)  # fields laid out otherwise


def headline(run: BundledRun) -> Headline:
    """The run's headline from its results files (results/*.json with a `table` this kit knows)."""
    m = run.typed()
    h = Headline(run.run_id, str(m.protocol.kind), str(m.status))
    for name, data in run.tables().items():
        if not (name.startswith(f"{RunPaths.RESULTS}/") and name.endswith(".json") and isinstance(data, dict)):
            continue
        writer = for_table(data) if isinstance(data.get("table"), str) else None  # the kind that wrote the table
        if writer is None or writer.headline is None:
            continue
        try:
            writer.headline(writer.read(data), h)  # the table parsed once, by the model of the kind that wrote it
        except NotResults as exc:  # a kind's model refused it: the field and what is wrong, in one line
            h.verdict.append(f"{name} is not laid out as this kit reads it: "
                             f"{exc.message.removeprefix('results table: ')}; see the raw file")
            h.held = None
        except ODD as exc:
            h.verdict.append(f"{name} is not laid out as this kit reads it ({type(exc).__name__}): see the raw file")
            h.held = None
    if not h.verdict and not h.controls:
        h.verdict.append("no results file this kit can summarise" + (f" (status {h.status})"
                                                                     if h.status != "finished" else ""))
    h.qualitative = qualitative(run)
    return h


def qualitative(run: BundledRun) -> list[str]:
    """Whether the paper's qualitative findings hold on this run (kit.compare.claims): the summary line, then
    each claim it measures; read from analysis/findings.json when `kit analyze` left one, else from a
    restored-state results table. Empty when the run measures none of them."""
    from kit.compare import claims  # noqa: PLC0415
    from kit.compare.evidence import from_run  # noqa: PLC0415
    from kit.compare.names import model_display  # noqa: PLC0415
    from kit.compare.run_rows import FindingsShape  # noqa: PLC0415

    tables = run.tables()
    results = [data for name, data in tables.items() if name.startswith(f"{RunPaths.RESULTS}/")]
    engine = run.typed().engine
    try:
        evidence = from_run(tables.get(FINDINGS), results, model_display(str(engine.model_name or engine.model), {}))
    except FindingsShape as exc:
        return [f"qualitative: not judged ({exc})"]
    if evidence is None:
        return []
    judged = claims.judge(evidence)
    return [claims.summary_line(judged), *claims.claim_lines(judged, measured_only=True)]


def paper_tables(run: BundledRun) -> tuple[list[Layout], list[str]]:
    """The paper's Tables III–VII from the run's analysis/findings.json: the tables with rows, and one line
    per table not computed (with the reason). Empty when there is no findings file."""
    findings = run.tables().get(FINDINGS)
    tables = findings.get("tables") if isinstance(findings, dict) else None
    if not isinstance(tables, dict):
        return [], []
    shown, absent = [], []
    for name, make in LAYOUTS.items():
        try:
            layout = make(Table.model_validate(tables.get(name)))
        except ODD:
            absent.append(f"Table {name}: not laid out as this kit reads it")
            continue
        if layout.rows:
            shown.append(layout)
        else:
            absent.append(f"Table {name}: " + ("; ".join(layout.notes) or "no rows"))
    return shown, absent
