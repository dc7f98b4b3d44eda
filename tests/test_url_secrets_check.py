"""`kit check` against a URL carrying credentials (`user:pass@`, `?api_key=`) on the real engine: the
engine is reached with them (llama-server ignores both), and no byte of them lands in the run folder
(manifest, records, logs), in what the CLI prints, or in the bundle (README, report, RO-Crate, ...)."""

from __future__ import annotations

import json
import tarfile
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from kit.cli import cli
from kit.core.errors import NoVerdict

pytestmark = pytest.mark.engine

PASSWORD, API_KEY = "pw-Zq81xLmv3", "ak-7Hc2Rt9Wn4Kd"
SECRETS = (PASSWORD.encode(), API_KEY.encode(), b"alice:")


@pytest.fixture(scope="module")
def checked(llama_server_url, tmp_path_factory):
    parts = urlsplit(llama_server_url)
    url = f"http://alice:{PASSWORD}@{parts.netloc}/?api_key={API_KEY}&model=x"
    out = tmp_path_factory.mktemp("runs")
    result = CliRunner().invoke(cli, ["check", url, "--kind", "openai", "--cycles", "1", "--per-arm", "2",
                                      "--max-tokens", "4", "--calibration-rounds", "1", "--always-fresh", "1",
                                      "--steady", "1", "--out", str(out)])
    [run_dir] = [p for p in out.iterdir() if (p / "manifest.json").is_file()]  # bundles/ is beside it
    bundle = tmp_path_factory.mktemp("bundles") / "check.tar.gz"
    bundled = CliRunner().invoke(cli, ["bundle", str(run_dir), "-o", str(bundle)], catch_exceptions=False)
    return result, run_dir, bundled, bundle, parts.netloc


def test_the_check_ran_through_the_url_and_recorded_it_without_secrets(checked):
    result, run_dir, _, _, netloc = checked
    manifest = (run_dir / "manifest.json").read_bytes()
    assert json.loads(manifest)["status"] == "finished", result.output  # the run folder, not wrapped console text
    if any(info["status"] == "OK" for info in json.loads(manifest)["passes"].values()):
        assert result.exit_code == 0, result.output
    else:  # an OpenAI-compatible URL cannot be reloaded: every pass VOID, no verdict (kit.core.errors.NoVerdict)
        assert isinstance(result.exception, NoVerdict), (result.output, result.exception)
    assert f'"url": "http://{netloc}?api_key=[REDACTED]&model=x"'.encode() in manifest


def test_no_secret_in_the_run_folder_or_the_output(checked):
    result, run_dir, bundled, _, _ = checked
    files = [path for path in run_dir.rglob("*") if path.is_file()]
    assert any(path.parent.name == "logs" for path in files) or files
    for path in files:
        data = path.read_bytes()
        for secret in SECRETS:
            assert secret not in data, (path, secret)
    for secret in SECRETS:
        assert secret.decode() not in result.output + bundled.output


def test_no_secret_in_any_bundle_file(checked):
    _, _, bundled, bundle, _ = checked
    assert bundled.exit_code == 0, bundled.output
    assert "redacted" not in bundled.output  # nothing left for the scrubber to catch: never stored at all
    with tarfile.open(bundle) as archive:
        names = archive.getnames()
        contents = {name: archive.extractfile(name).read() for name in names if archive.getmember(name).isfile()}
    assert any(name.endswith("README.md") for name in names) and any(name.endswith("report.html") for name in names)
    assert any(name.endswith("ro-crate-metadata.json") for name in names)
    for name, data in contents.items():
        for secret in SECRETS:
            assert secret not in data, (name, secret)
    assert any(b"api_key=[REDACTED]" in data for data in contents.values())
