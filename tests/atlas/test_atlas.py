"""`kit atlas` on the kit's own fixture bundles (the AMD Zen 4 machine's demo, an Intel machine's demo and
grid of an earlier release) and a run folder: one row per engine x build x machine x backend x format x
cache, the paper's measures with intervals, cells that cannot be compared saying why, replay identity
between rows, a tampered bundle refused, and the HTML page in headless Chromium at 1280 and 800 px."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kit.atlas import render, sources, table
from kit.bundle import safe_tar
from kit.core.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ZEN4_DEMO = FIXTURES / "bundles" / "demo-20261201-191112.tar.gz"  # AMD EPYC (Zen 4), commit 6d600ca
XEON_DEMO = FIXTURES / "records_v1" / "bundles" / "demo-20261201-070851.tar.gz"
XEON_GRID = FIXTURES / "records_v1" / "bundles" / "grid-tiny-20261201-070919.tar.gz"
HOSTILE_CPU = "Another CPU <img src=x onerror=alert(1)>"  # a run folder's manifest is untrusted input
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def _run_folder(tmp: Path, cpu: str, change_output: bool = False) -> Path:
    """The Zen 4 demo's run folder, its host renamed (another machine, same requests); optionally with one
    answer's tokens changed in its records (results are recomputed from them, so the folder stays valid)."""
    unpacked = safe_tar.extract(ZEN4_DEMO, tmp / f"unpacked-{cpu.replace(' ', '-')}")
    run_dir = next((unpacked / "runs").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["provenance"]["host"]["cpu"] = cpu
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    if change_output:
        records = run_dir / "records" / "s1.jsonl"
        lines = records.read_text().splitlines()
        first = json.loads(lines[0])
        first["completion"]["token_ids"][-1] += 1
        lines[0] = json.dumps(first)
        records.write_text("\n".join(lines) + "\n")
    return run_dir


@pytest.fixture(scope="module")
def atlas(tmp_path_factory) -> table.Atlas:
    tmp = tmp_path_factory.mktemp("atlas")
    inputs = [ZEN4_DEMO, XEON_GRID, _run_folder(tmp, HOSTILE_CPU), _run_folder(tmp, "Third CPU", True)]
    with sources.verified(inputs) as runs:
        return table.build(runs)


def _column(atlas: table.Atlas, key: str) -> table.Column:
    return next(c for c in atlas.columns if c.key == key)


def test_rows_are_engine_build_machine_backend_format_cache(atlas):
    assert len(atlas.rows) == 4
    zen4, grid = atlas.rows[0], atlas.rows[1]
    keys = table.key_cells(zen4)
    assert keys["machine"].startswith("AMD EPYC") and keys["build"] == "b1-7e4c0a9 (the paper's build)"
    assert keys["weight format"] == "Q4_1" and keys["cache setting"] == "--cache-ram 0"
    assert keys["server binary or image"] == "/tmp/oldfx-bin/llama-server (sha256 not recorded)"
    assert table.key_cells(grid)["server binary or image"] == "the kit's own engine"
    assert table.key_cells(grid)["machine"].startswith("Intel(R) Xeon(R)")
    assert table.key_cells(grid)["CPU backend"].startswith("wheel (libggml-cpu ")
    assert [table.key_cells(r)["machine"].split(",")[0] for r in atlas.rows[2:]] == [HOSTILE_CPU, "Third CPU"]


def test_the_papers_measures_with_their_intervals(atlas):
    zen4 = atlas.rows[0]
    same = atlas.cell(zen4, _column(atlas, "IV:recompute_same_in_all"))
    assert same.why is None and same.text == "100.0% [34–100] (2/2)"
    per_session = atlas.cell(zen4, _column(atlas, "IV:paths_differ")).text
    assert per_session == "s1 0.0% [0–66] (0/2); s2 0.0% [0–66] (0/2)"
    assert atlas.cell(zen4, _column(atlas, "VII:mcnemar_p")).text == "p = 1"
    assert {c.group for c in atlas.columns} >= {"Table IV", "Table V", "Table VII", "replay identity", "size"}


def test_cells_that_cannot_be_compared_say_why(atlas):
    zen4, grid = atlas.rows[0], atlas.rows[1]
    on_grid = atlas.cell(grid, _column(atlas, "IV:recompute_reproduces"))
    assert on_grid.why == "not measured by this row's runs (grid)"
    assert on_grid.shown.startswith("cannot be compared: ")
    assert atlas.cell(zen4, _column(atlas, "V:path")).why == "not measured by this row's runs (reset)"


def test_replay_identity_between_rows(atlas):
    zen4, grid, same, changed = atlas.rows
    assert atlas.cell(zen4, _column(atlas, "identity")).text == \
        "#2: no request in common; #3: 16/16 identical; #4: 15/16 identical"
    assert "#1: 15/16 identical" in atlas.cell(changed, _column(atlas, "identity")).text
    assert atlas.cell(grid, _column(atlas, "identity")).why.startswith("no other row asked the same requests")
    assert atlas.cell(zen4, _column(atlas, "size")).text == "1 run(s): demo 16 requests; 2 passes"


def test_csv_has_a_line_per_row_and_every_column(atlas):
    text = render.csv_text(atlas)
    lines = text.splitlines()
    assert len(lines) == 1 + len(atlas.rows)
    assert lines[0].startswith("engine,build,machine,CPU backend,model,weight format,cache setting,server binary or image,"
                               "runs,")
    assert "cannot be compared: not measured by this row's runs (grid)" in lines[2]


def test_html_escapes_every_value_and_carries_the_strict_policy(atlas):
    page = render.html_page(atlas, title="<b>atlas</b>")
    assert "<b>atlas</b>" not in page and "&lt;b&gt;atlas&lt;/b&gt;" in page
    assert f'<meta http-equiv="Content-Security-Policy" content="{render.PAGE_CSP}">' in page
    assert "<script" not in page and "default-src 'none'" in render.PAGE_CSP
    assert "<img" not in page and "Another CPU &lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count("<tr>") == 2 + len(atlas.rows)


def _tampered(tmp: Path) -> Path:
    """The Zen 4 bundle with one record's answer changed (its checksum no longer matches)."""
    out = tmp / "tampered.tar.gz"
    with tarfile.open(ZEN4_DEMO) as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None
            if data is not None and member.name.endswith("records/s1.jsonl"):
                data = data.replace(b'"token_ids":[53,', b'"token_ids":[54,', 1)
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    return out


def test_a_tampered_bundle_is_refused_before_anything_is_read(tmp_path):
    with pytest.raises(ConfigError, match="does not verify"):
        with sources.verified([_tampered(tmp_path)]):
            pass
    result = subprocess.run([sys.executable, "-m", "kit.cli", "atlas", str(_tampered(tmp_path)), "-o",
                             str(tmp_path / "atlas.html")], capture_output=True, text=True, timeout=600)
    assert result.returncode != 0 and "kit: error:" in result.stderr and "does not verify" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "atlas.html").exists()


MEASURE = """<script>
const wide = [...document.querySelectorAll('.wide')].map(e => e.scrollWidth - e.clientWidth);
document.body.insertAdjacentHTML('beforeend', '<pre id="measure">' + JSON.stringify({
  page: document.documentElement.scrollWidth, window: window.innerWidth, boxes: wide.length,
  rows: document.querySelectorAll('table.atlas tbody tr').length}) + '</pre>');
</script>"""


@pytest.mark.engine  # Chromium: the tier of real outside programs (no engine: once, not once per CPU backend)
@pytest.mark.cpu_backends
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install chromium)")
@pytest.mark.parametrize("width", [1280, 800])
def test_the_page_never_scrolls_sideways_in_headless_chromium(atlas, tmp_path, width):
    page = render.html_page(atlas)
    policy = f'<meta http-equiv="Content-Security-Policy" content="{render.PAGE_CSP}">'
    probe = tmp_path / "measured.html"  # the page runs no script: the probe's copy drops the policy to measure
    probe.write_text(page.replace(policy, "").replace("</body>", MEASURE + "</body>"))
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}", "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND", f"--window-size={width},900"]
    dom = subprocess.run([*base, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    measured = json.loads(re.search(r'<pre id="measure">(.*?)</pre>', dom.stdout).group(1))
    assert measured["rows"] == len(atlas.rows) and measured["boxes"] == 1
    assert measured["page"] <= measured["window"], measured  # the wide table scrolls inside its box only
    (tmp_path / "atlas.html").write_text(page)
    shot = tmp_path / f"atlas-{width}.png"
    done = subprocess.run([*base, f"--screenshot={shot}", (tmp_path / "atlas.html").as_uri()], capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0 and shot.stat().st_size > 10_000
