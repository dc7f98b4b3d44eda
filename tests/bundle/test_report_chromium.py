"""The offline report opens in headless Chromium with every network path blocked and shows the headline
verdict, the tables and the figure (checked in the screenshots' pixels; the screenshots at 1280 and 800 px
were also looked at by a person), logs nothing to the console, and never scrolls sideways.

Set KIT_SCREENSHOT_DIR to keep the screenshots."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kit.analysis import findings
from kit.bundle import report as report_module, safe_tar
from kit.bundle.writer import write_bundle
from tests.bundle.png import bar_chart, count_colour

pytestmark = pytest.mark.engine

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
BAR = (214, 96, 24)          # the test figure's bars
TABLE_HEADER = (232, 238, 246)  # th background in the report's CSS (#e8eef6)
VERDICT_BOX = (243, 246, 250)  # .verdict background (#f3f6fa)


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--no-first-run", f"--user-data-dir={profile}", "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--hide-scrollbars"]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=120, check=False)


# Appended to a copy of the report only (the report itself has no script, and a policy that runs none): the page's width and the widest
# table box against the window, written into the DOM that --dump-dom prints.
MEASURE = """<script>
const wide = [...document.querySelectorAll('.wide')].map(e => e.scrollWidth - e.clientWidth);
document.body.insertAdjacentHTML('beforeend', '<pre id="measure">' + JSON.stringify({
  page: document.documentElement.scrollWidth, window: window.innerWidth, boxes: wide.length,
  overflowing_boxes: wide.filter(d => d > 0).length}) + '</pre>');
</script>"""


def _measure(report: Path, width: int, profile: Path) -> dict:
    probe = report.with_name("measured.html")
    page = report.read_text()
    policy = f'<meta http-equiv="Content-Security-Policy" content="{report_module.CSP}">'
    assert policy in page  # the page lets no script run: the probe's copy drops the policy to measure
    probe.write_text(page.replace(policy, "").replace("</body>", MEASURE + "</body>"))
    dom = _chromium(["--dump-dom", f"--window-size={width},900", probe.as_uri()], profile)
    assert dom.returncode == 0, dom.stderr[-2000:]
    return json.loads(re.search(r'<pre id="measure">(.*?)</pre>', dom.stdout).group(1))


@pytest.fixture
def report_with_figure(run_copies, tmp_path) -> Path:
    run_dir = run_copies[0]
    table = json.loads((run_dir / "results" / "reset_table.json").read_text())
    fast = findings.Settings(block_bootstrap_replicates=200, sweep_replicates=20, cluster_replicates=20, workers=1)
    findings.analyze([run_dir], run_dir / "analysis", fast)  # Tables IV and VII, Fig. 3, findings.json
    values = [row["items"] + row["paths_differ"] for row in table["sessions"]]
    (run_dir / "analysis" / "paths_by_session.png").write_bytes(bar_chart(values, BAR))
    bundle = write_bundle([run_dir], tmp_path / "with-figure.tar.gz", environ={}).path
    return safe_tar.extract(bundle, tmp_path / "unpacked") / "report.html"


def test_report_needs_no_network(report_with_figure):
    html = report_with_figure.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "<script" not in html and "@import" not in html
    assert html.count('src="data:image/png;base64,') == 2  # the test's bars and Fig. 3
    assert f'<meta http-equiv="Content-Security-Policy" content="{report_module.CSP}">' in html  # nothing else could load


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install chromium)")
def test_report_renders_verdict_tables_and_figure_in_headless_chromium(report_with_figure, tmp_path):
    url = report_with_figure.as_uri()
    dom = _chromium(["--dump-dom", "--enable-logging=stderr", "--v=0", url], tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert ":CONSOLE" not in dom.stderr  # nothing logged to the page's console
    assert dom.stdout.count("<table") >= 5 and "data:image/png" in dom.stdout
    assert "<strong>Table IV.</strong>" in dom.stdout and "<strong>Table VII.</strong>" in dom.stdout
    assert "<h2>Headline</h2>" in dom.stdout and "<strong>Verdict</strong>" in dom.stdout
    assert "the cache-hit path differs from the recompute path in" in dom.stdout and "paths differ" in dom.stdout
    assert '<span class="held">controls held</span>' in dom.stdout
    assert '"sessions": [' not in dom.stdout and "{&quot;" not in dom.stdout  # the raw results are linked, not dumped
    for width, height in ((1280, 4200), (800, 5600)):
        shot = tmp_path / f"report-{width}.png"
        done = _chromium([f"--screenshot={shot}", f"--window-size={width},{height}", url], tmp_path / f"p{width}")
        assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
        if os.environ.get("KIT_SCREENSHOT_DIR"):
            shutil.copy(shot, Path(os.environ["KIT_SCREENSHOT_DIR"]) / shot.name)
        data = shot.read_bytes()
        assert count_colour(data, TABLE_HEADER, tolerance=2) > 2000  # table headers were laid out and painted
        assert count_colour(data, BAR, tolerance=4) > 1000  # the embedded figure was decoded and drawn
        assert count_colour(data, VERDICT_BOX, tolerance=1) > 20000  # the verdict box, near the top


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install chromium)")
@pytest.mark.parametrize("width", [1280, 800])
def test_report_never_scrolls_sideways(report_with_figure, tmp_path, width):
    measured = _measure(report_with_figure, width, tmp_path / "profile")
    assert measured["page"] <= measured["window"] == width, measured
    assert measured["boxes"] >= 3
    if width == 1280:
        assert measured["overflowing_boxes"] == 0, measured  # every table fits whole at 1280 px
