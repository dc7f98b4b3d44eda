"""The offline report opens in headless Chromium with every network path blocked and shows the tables
and the figure (checked in the screenshot's pixels; the screenshot was also looked at by a person).

Set KIT_SCREENSHOT_DIR to keep the screenshot."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kit.bundle import safe_tar
from kit.bundle.writer import write_bundle
from tests.bundle.png import bar_chart, count_colour

pytestmark = pytest.mark.engine

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
BAR = (214, 96, 24)          # the test figure's bars
TABLE_HEADER = (232, 238, 246)  # th background in the report's CSS (#e8eef6)


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--no-first-run", f"--user-data-dir={profile}", "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--hide-scrollbars"]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def report_with_figure(run_copies, tmp_path) -> Path:
    run_dir = run_copies[0]
    table = json.loads((run_dir / "results" / "reset_table.json").read_text())
    (run_dir / "analysis").mkdir()
    values = [row["items"] + row["paths_differ"] for row in table["sessions"]]
    (run_dir / "analysis" / "paths_by_session.png").write_bytes(bar_chart(values, BAR))
    bundle = write_bundle([run_dir], tmp_path / "with-figure.tar.gz", environ={}).path
    return safe_tar.extract(bundle, tmp_path / "unpacked") / "report.html"


def test_report_needs_no_network(report_with_figure):
    html = report_with_figure.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "<script" not in html and "@import" not in html
    assert html.count('src="data:image/png;base64,') == 1


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install chromium)")
def test_report_renders_tables_and_figure_in_headless_chromium(report_with_figure, tmp_path):
    url = report_with_figure.as_uri()
    dom = _chromium(["--dump-dom", url], tmp_path / "profile-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<table") >= 4 and "paths_differ" in dom.stdout and "data:image/png" in dom.stdout
    shot = tmp_path / "report.png"
    done = _chromium([f"--screenshot={shot}", "--window-size=1280,2600", url], tmp_path / "profile-shot")
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    if os.environ.get("KIT_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["KIT_SCREENSHOT_DIR"]) / "report.png")
    data = shot.read_bytes()
    assert count_colour(data, TABLE_HEADER, tolerance=2) > 2000  # table headers were laid out and painted
    assert count_colour(data, BAR, tolerance=4) > 1000  # the embedded figure was decoded and drawn
