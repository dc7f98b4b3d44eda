"""Rule 4 in a real browser (docs/security.md; issue #35): headless Chromium opens a hostile bundle's report the
way a reviewer would, as a file: the page `kit verify` lets be shown (the bundle's own report.html only when
it is exactly this kit's rendering) and the page `kit show --report` writes. The test fails if a script runs
(it would retitle the page) or if any connection reaches the loopback listener every hostile URL points to.

It can fail: each hostile page opened on its own does run or load (checked first, so a listener or browser
that saw nothing would fail the test rather than pass it), and four of them passed the allow-list `kit verify`
used before (tests/bundle/hostile_pages.py: OLD_ALLOW_LIST_MISSED), which would have let them be shown."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kit.bundle import REPORT, report, safe_tar, writer
from kit.bundle.verify import verify_bundle
from kit.record.manifest import Manifest
from tests.bundle import mutations
from tests.bundle.conftest import synthetic_grid_run
from tests.bundle.hostile_pages import ACTIVE, SVG_FIGURE, fragment
from tests.bundle.kit_cli import run_kit

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (apt-get install chromium)")]
RAN = "SCRIPT-RAN"  # what a hostile script sets the page's title to


class Listener(http.server.ThreadingHTTPServer):
    """A loopback HTTP server that records every connection made to it (and answers 404)."""

    daemon_threads = True

    def __init__(self) -> None:
        self.seen: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                outer.seen.append(self.path)
                self.send_response(404)
                self.end_headers()

            do_POST = do_HEAD = do_GET  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def verify_request(self, request, client_address) -> bool:
        self.seen.append(f"connection from {client_address[0]}")
        return True

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def activity(page: Path, server: Listener, profile: Path, expected: bool = False) -> list[str]:
    """What opening `page` as a file in headless Chromium did: connections and requests that reached the
    listener, and whether a script ran. Every other host is unresolvable, so nothing leaves this machine.
    `expected`: wait up to 5 s for a connection (on a busy machine the listener may accept it late)."""
    before = len(server.seen)
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", f"--user-data-dir={profile}",
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--virtual-time-budget=3000", "--dump-dom",
         page.as_uri()], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    deadline = time.monotonic() + (5 if expected else 0.5)
    while time.monotonic() < deadline and not (expected and len(server.seen) > before):
        time.sleep(0.05)  # a connection made as the browser exited is accepted and recorded meanwhile
    return server.seen[before:] + ([f"a script ran ({RAN})"] if f"<title>{RAN}</title>" in done.stdout else [])


def _hostile(text: str, base: str) -> str:
    return fragment(text, base).replace("document.title='RAN'", f"document.title='{RAN}'")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A bundle whose index names another commit of the kit (what any stranger can write), so that a
    report differing from this kit's rendering verifies, noted, rather than failing the bundle."""
    root = tmp_path_factory.mktemp("hostile")
    run = synthetic_grid_run(root / "runs" / "grid-toy")
    path = writer.write_bundle([run], root / "b.tar.gz", environ={}).path
    path.write_bytes(mutations.apply(path.read_bytes(), {"op": "edit", "args": {
        "file": "/bundle.json", "set_json": {"kit.git_commit": "1" * 40}, "reseal": True}}))
    return path


def _opened_by_a_reviewer(bundle: Path, tmp_path: Path) -> tuple[list[Path], Path]:
    """(the pages a reviewer may open, the bundle's own report.html unpacked): none when `kit verify` fails the
    bundle; else the page `kit show --report` writes, and the bundle's own unless verify says it is not shown."""
    verdict = verify_bundle(bundle)
    own = safe_tar.extract(bundle, tmp_path / "unpacked") / REPORT
    assert own.is_file()
    if not verdict.ok:
        return [], own
    rendering = tmp_path / "rendered.html"
    shown = run_kit("show", str(bundle), "--report", str(rendering), scratch=tmp_path / "s")
    assert shown.code == 0, shown.text
    return [rendering] + ([] if REPORT in getattr(verdict, "not_shown", []) else [own]), own


@pytest.mark.parametrize("name", sorted(ACTIVE))
def test_a_hostile_report_runs_and_loads_nothing_where_a_reviewer_opens_it(bundle, listener, tmp_path, name):
    forged = tmp_path / "forged.tar.gz"
    data = bundle.read_bytes()
    for change in ([f'<meta http-equiv="Content-Security-Policy" content="{report.CSP}">', ""],  # as a forger would
                   ["</body>", _hostile(ACTIVE[name], listener.base) + "</body>"]):
        data = mutations.apply(data, {"op": "edit", "args": {"file": "/report.html", "replace_text": change,
                                                             "reseal": True}})
    forged.write_bytes(data)
    pages, own = _opened_by_a_reviewer(forged, tmp_path)
    assert activity(own, listener, tmp_path / "p-own", expected=True), f"{name}: the hostile page did nothing"
    for number, page in enumerate(pages):
        assert activity(page, listener, tmp_path / f"p{number}") == [], f"{name}: {page} is shown to a reviewer"


def test_hostile_data_in_the_kits_own_page_runs_and_loads_nothing(listener, tmp_path):
    """Text from the records and an SVG figure carrying a script, rendered by the kit: the escaping and the
    Content-Security-Policy hold; the SVG opened on its own (listed NOT shown by verify) does run."""
    hostile = _hostile(ACTIVE["script"] + ACTIVE["external image"], listener.base)
    run = synthetic_grid_run(tmp_path / "runs" / "grid-toy", model_name=f"</title></style>{hostile}")
    Manifest.load(run).update(reason=f'"><{hostile}')
    (run / "analysis").mkdir()
    (run / "analysis" / "figure.svg").write_text(fragment(SVG_FIGURE, listener.base))
    path = writer.write_bundle([run], tmp_path / "b.tar.gz", environ={}).path
    assert "runs/grid-toy/analysis/figure.svg" in verify_bundle(path).not_shown
    pages, own = _opened_by_a_reviewer(path, tmp_path)
    assert pages == [tmp_path / "rendered.html", own]  # the kit's page is the bundle's own, byte for byte
    assert activity(own, listener, tmp_path / "p-own") == []
    figure = own.parent / "runs" / "grid-toy" / "analysis" / "figure.svg"
    assert activity(figure, listener, tmp_path / "p-svg", expected=True)  # a script in it runs when opened alone


def test_the_content_security_policy_stops_what_escaping_would_have_let_through(bundle, listener, tmp_path):
    """The kit's page with a script, a handler, an image and style sheets written into it after rendering (as
    a bug in escaping would): nothing runs or loads. Without the policy the same page does. (A policy does not
    govern navigation: a <meta> refresh is kept out by the escaping alone.)"""
    page = safe_tar.extract(bundle, tmp_path / "unpacked") / REPORT
    injected = "".join(_hostile(ACTIVE[n], listener.base) for n in (
        "script", "event handler", "external image", "style sheet url()", "stylesheet link"))
    guarded = page.read_text().replace("<h1>", injected + "<h1>")
    assert f'content="{report.CSP}"' in guarded
    page.write_text(guarded)
    assert activity(page, listener, tmp_path / "p-guarded") == []
    page.write_text(guarded.replace(f'<meta http-equiv="Content-Security-Policy" content="{report.CSP}">', ""))
    assert activity(page, listener, tmp_path / "p-open", expected=True)
