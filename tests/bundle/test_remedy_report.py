"""The remedy's cost-by-prompt-length figure in the bundle's report: an SVG the kit draws from results/remedy.json
(each fixed arm's ratio to the unfixed arm per bin), embedded as a data: image, the same bytes on every rendering,
arm names escaped."""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from kit.bundle import report
from kit.bundle.content import BundledRun, runs_from_files
from kit.protocols import kinds
from kit.protocols.remedy.figure import NAME, cost_figure
from kit.protocols.remedy.results import RemedyResults
from tests.protocols.test_remedy_results import write_remedy_run

SVG = "{http://www.w3.org/2000/svg}"


def _results(tmp_path: Path) -> tuple[Path, RemedyResults]:
    folder = write_remedy_run(tmp_path / "remedy-run")
    return folder, kinds.KINDS["remedy"].read(kinds.KINDS["remedy"].results(folder))


def _bundled(folder: Path) -> BundledRun:
    files = {f"runs/{folder.name}/{p.relative_to(folder)}": p.read_bytes() for p in folder.rglob("*")
             if p.is_file() and p.relative_to(folder).parts[0] not in ("records", "logs")}
    return runs_from_files(files)[0]


def _svgs(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', page)]


def test_the_figure_plots_each_fixed_arm_s_ratio_per_bin(tmp_path):
    _, t = _results(tmp_path)
    figure = cost_figure(t)
    assert figure is not None and figure.media == "image/svg+xml" and figure.name == NAME
    root = ET.fromstring(figure.data)
    texts = [e.text or "" for e in root.iter(f"{SVG}text")]
    # two fixed arms x three bins x two panels (TTFT and latency), every one with a ratio in this run
    assert len(list(root.iter(f"{SVG}circle"))) == 2 * 3 * 2
    assert {"<=256", "1k-4k", ">4k"} <= set(texts) and "257-1k" not in texts  # only bins some arm measured
    assert any(s.startswith("fix-a (chunk-16)") for s in texts) and any(s.startswith("fix-b (--swa-full)")
                                                                       for s in texts)
    assert not any(s.startswith("unfixed") for s in texts)  # the baseline is the dashed 1.0 line, not a series
    # fix-a prefills twice as slowly: its TTFT point in the >4k bin sits above fix-b's (smaller y is higher)
    ttft = [c for c in root.iter(f"{SVG}circle") if float(c.get("cx", 0)) < 360]
    by_colour: dict[str, list[float]] = {}
    for c in ttft:
        by_colour.setdefault(c.get("fill", ""), []).append(float(c.get("cy", 0)))
    fix_a, fix_b = (by_colour[colour] for colour in ("#3b6ea5", "#c0392b"))
    assert fix_a[-1] < fix_b[-1]


def test_nothing_is_drawn_without_a_fixed_arm(tmp_path):
    _, t = _results(tmp_path)
    assert cost_figure(t.model_copy(update={"arms": t.arms[:1]})) is None


def test_arm_names_from_a_bundle_are_text_in_the_image(tmp_path):
    _, t = _results(tmp_path)
    t.arms[1].name = '</text><script>alert(1)</script><text x="0">'
    figure = cost_figure(t)
    assert figure is not None
    root = ET.fromstring(figure.data)
    assert not list(root.iter(f"{SVG}script")) and b"<script" not in figure.data
    assert any("<script>alert(1)</script>" in (e.text or "") for e in root.iter(f"{SVG}text"))


def test_the_report_embeds_it_and_renders_the_same_bytes_again(tmp_path):
    folder, t = _results(tmp_path)
    run = _bundled(folder)
    page = report.render([run], {"kit": {"version": "test"}})
    expected = cost_figure(t)
    assert expected is not None and _svgs(page) == [expected.data]
    assert "ratio to the unfixed arm in the same prompt-length bin" in page
    assert report.render([_bundled(folder)], {"kit": {"version": "test"}}) == page  # what kit verify compares
