"""How to add a kind and an engine (docs/architecture.md, "How to add"), done from outside the kit: the toy kind
of tests/protocols/toy_kind/ is copied into a temporary folder on sys.path as a package of its own (`toy_kind`),
registered the documented way (its distribution's entry point `toy = toy_kind` in the group `kit.kinds`, what
`pip install` writes from `[project.entry-points."kit.kinds"]`), and run through `kit run` against the fake
llama-server (tests/fake_engine), then `kit analyze`, `kit bundle`, `kit verify` and `kit show`, each through
the kit's real entry point. The toy engine of tests/protocols/toy_engine/ is installed the same way (`toy =
toy_engine` in the group `kit.engines`), its dialect served by `ToyServer` here (a tests.fake_engine dialect),
and the toy kind runs on it by URL through the same commands. The files this test writes are the whole of
adding a kind and an engine: no file of the kit."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

import httpx

from kit.engines import registry
from kit.engines.identify import identify
from kit.protocols import kinds
from kit.protocols.kind import Kind
from tests.bundle import mutations
from tests.bundle.kit_cli import run_here
from tests.console_text import printed
from tests.fake_engine.core import FakeEngine
from tests.fake_engine.llamacpp import LlamaCpp

TOY_SOURCE = Path(__file__).resolve().parent / "toy_kind"
TOY_ENGINE = Path(__file__).resolve().parent / "toy_engine"
TOY_YAML = "protocol: toy\ndescription: One prompt, asked four times.\nrepeats: 4\nmax_tokens: 3\n"


def install(site: Path, entry_points: str, name: str = "toy_kind") -> None:
    """A distribution in `site` as `pip install` leaves it: the package and its metadata, entry points included."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def site(tmp_path, monkeypatch):
    """An empty folder on sys.path, where the test installs its packages; their modules are forgotten after."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for module in [name for name in sys.modules if name.split(".")[0] in ("toy_kind", "broken_kind", "toy_engine")]:
        del sys.modules[module]


@pytest.fixture
def toy(site, tmp_path) -> Path:
    """The toy kind installed from its own package, and its protocol file."""
    shutil.copytree(TOY_SOURCE, site / "toy_kind", ignore=shutil.ignore_patterns("__pycache__"))
    install(site, "[kit.kinds]\ntoy = toy_kind\n")
    protocol = tmp_path / "toy.yaml"
    protocol.write_text(TOY_YAML)
    return protocol


@pytest.fixture
def toy_engine(site) -> str:
    """The toy engine installed from its own package: its name."""
    shutil.copytree(TOY_ENGINE, site / "toy_engine", ignore=shutil.ignore_patterns("__pycache__"))
    install(site, "[kit.engines]\ntoy = toy_engine\n", "toy_engine")
    return "toy"


class ToyServer(FakeEngine):
    """The toy engine's dialect (tests/protocols/toy_engine/client.py): `POST /generate` answers `ANSWER`'s words
    as its tokens, `GET /toy/version` its version."""

    ANSWER = ["The", " answer", " is", " 4."]

    def answer(self, request: httpx.Request, path: str, body: Any) -> httpx.Response:
        if path == "/toy/version" and request.method == "GET":
            return httpx.Response(200, json={"toy": "0.1"})
        if path == "/generate" and request.method == "POST" and isinstance(body.get("prompt"), str):
            tokens = self.ANSWER[:body["max_tokens"]]
            return httpx.Response(200, json={"text": "".join(tokens), "tokens": tokens, "finish": "length"})
        return httpx.Response(404, json={"error": "not found"})


def ok(*args: str) -> str:
    done = run_here(*args)
    assert done.returncode == 0 and not done.stderr, done.stdout + done.stderr
    return done.stdout


def test_a_kind_in_a_package_of_its_own_runs_is_analysed_bundled_verified_and_shown(toy, tmp_path, monkeypatch):
    assert "toy" not in kinds.KINDS.shipped and "toy" in kinds.KINDS  # found by its entry point, not listed here
    assert kinds.KINDS["toy"].record.__module__ == "toy_kind.protocol"
    out = tmp_path / "runs"
    fake = LlamaCpp()
    with fake.serve() as url:
        said = ok("run", str(toy), "--engine-url", url, "--out", str(out))
    [run_dir] = [p for p in out.iterdir() if p.name.startswith("toy-")]
    assert printed("Toy answers", said)  # the kind's own renderer, at the end of `kit run`
    assert len(fake.posted("/completion")) == 4
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (manifest["status"], manifest["protocol"]["kind"], manifest["passes"]["asked"]["status"]) == (
        "finished", "toy", "OK")
    assert manifest["results"] == {"toy": "results/toy.json"}
    records = [json.loads(line) for line in (run_dir / "records/asked.jsonl").read_text().splitlines()]
    assert [(r["protocol"], r["protocol_kind"], r["repeat"]) for r in records] == [("toy", "toy", i) for i in range(4)]
    assert all(type(kinds.validate_record(r)).__name__ == "ToyRecord" for r in records)
    table = json.loads((run_dir / "results/toy.json").read_text())
    assert (table["answers"], table["distinct"]) == (4, 1)

    said = ok("analyze", str(run_dir), "--no-figures")
    assert "runs: 1 (toy)" in said and printed("Toy answers", said)
    findings = json.loads((run_dir / "analysis/findings.json").read_text())
    assert [(run["answers"], run["distinct"]) for run in findings["kinds"]["toy"]] == [(4, 1)]

    bundle = tmp_path / "toy.tar.gz"
    assert f"bundle: {bundle}" in ok("bundle", str(run_dir), "-o", str(bundle))
    verdict = ok("verify", str(bundle)).splitlines()[-1]
    # its results recomputed from the raw records by the toy kind, and the findings `kit analyze` kept
    assert verdict.startswith("OK: ") and "from 4 records (results: 1 file, " in verdict, verdict
    assert "findings: 1 file, " in verdict and "all equal" in verdict
    shown = ok("show", str(bundle)).splitlines()
    assert shown[0] == f"verified: {verdict}"
    assert {f"run: {run_dir.name}", "protocol: toy (kind toy)", "  - 1 distinct answer(s) in 4"} <= set(shown)

    # a record changed in the bundle: its checksum fails; with the checksum list resealed over the change, the
    # record's own digest does, as the records are read again to recompute the toy kind's results
    digest = "asked.jsonl:1: output_sha256 ae758477f843… is not the sha256 of its completion.text"
    for reseal, reason in ((False, "records/asked.jsonl: content differs from its checksum"), (True, digest)):
        changed = tmp_path / "changed.tar.gz"
        changed.write_bytes(mutations.edit(bundle.read_bytes(), "{run}/records/asked.jsonl", reseal=reseal,
                                           replace_text=['"text":"The answer is 4."', '"text":"The answer is 5."']))
        refused = run_here("verify", str(changed))
        assert refused.returncode == 1 and refused.stdout.splitlines()[-1].startswith("FAILED"), refused.stdout
        assert reason in refused.stdout
    refused = run_here("show", str(changed))  # shows nothing of a bundle that does not verify
    assert refused.returncode == 1 and "distinct answer" not in refused.stdout + refused.stderr

    # where the kind's package is not installed, its bundle cannot be recomputed: it does not verify
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(toy.parent / "site")])
    refused = run_here("verify", str(bundle))
    assert refused.returncode == 1 and "protocol kind 'toy' cannot be recomputed by this kit" in refused.stdout
    assert "install the package that registers the kind" in refused.stdout


def test_a_kind_registered_by_an_entry_point_is_gone_with_its_package(toy, monkeypatch):
    assert "toy" in kinds.KINDS and isinstance(kinds.KINDS["toy"], Kind)
    assert kinds.for_table({"table": "toy answers"}) is kinds.KINDS["toy"]
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(toy.parent / "site")])
    assert "toy" not in kinds.KINDS and list(kinds.KINDS) == list(kinds.KINDS.shipped)
    assert kinds.for_table({"table": "toy answers"}) is None
    assert all(kind.name in kinds.KINDS.shipped for kind in kinds.KINDS.loaded())
    with pytest.raises(KeyError):
        kinds.KINDS["toy"]


@pytest.mark.parametrize(("entry_points", "module", "refusal"), [
    ("[kit.kinds]\nreset = broken_kind\n", None, "registers a kind this kit ships"),
    ("[kit.kinds]\ntoy = broken_kind:KIND\n", None, "names an object, not a module"),
    ("[kit.kinds]\ntoy = broken_kind\n", "KIND = None\n", "broken_kind.KIND is a NoneType, not the kind 'toy'"),
    ("[kit.kinds]\ntoy = broken_kind\n", "from kit.protocols.kinds import KINDS\nKIND = KINDS['reset']\n",
     "broken_kind.KIND registers the kind 'reset', not the kind 'toy'"),
    ("[kit.kinds]\ntoy = broken_kind\n", "X = 1\n", "cannot be loaded"),
    ("[kit.kinds]\ntoy = no_such_module\n", None, "cannot be loaded"),
    ("[kit.engines]\nvllm = broken_kind\n", None, "registers an engine this kit ships"),
    ("[kit.engines]\ntoy = broken_kind:ENGINE\n", None, "names an object, not a module"),
    ("[kit.engines]\ntoy = broken_kind\n", "ENGINE = 'toy'\n", "broken_kind.ENGINE is a str, not the engine 'toy'"),
    ("[kit.engines]\ntoy = broken_kind\n", "from kit.engines.registry import OPENAI as ENGINE\n",
     "broken_kind.ENGINE registers the engine 'openai', not the engine 'toy'"),
    ("[kit.engines]\ntoy = broken_kind\n", "X = 1\n", "cannot be loaded"),
])
def test_a_bad_registration_is_refused_in_one_line_naming_it(site, tmp_path, entry_points, module, refusal):
    """A kind's or an engine's (both registries are kit.core.plugs.Registry, read by `kit run`: its protocol's
    kind, its --engine choices)."""
    if module is not None:
        (site / "broken_kind").mkdir()
        (site / "broken_kind" / "__init__.py").write_text(module)
    install(site, entry_points, "broken_kind")
    protocol = tmp_path / "toy.yaml"
    protocol.write_text(TOY_YAML)
    group = entry_points.split("]")[0][1:]
    engine = ("--engine", "toy") if group == "kit.engines" else ()
    done = run_here("run", str(protocol), *engine, "--engine-url", "http://127.0.0.1:9", "--out",
                    str(tmp_path / "runs"))
    [line] = done.stderr.splitlines()
    assert done.returncode != 0 and line.startswith("kit: error: ") and refusal in line, done.stderr
    assert group in line and not (tmp_path / "runs").exists()  # nothing written before the refusal


def test_two_packages_registering_one_kind_name_are_refused(toy, site, tmp_path):
    install(site, "[kit.kinds]\ntoy = toy_kind\n", "other_toys")
    done = run_here("run", str(toy), "--engine-url", "http://127.0.0.1:9", "--out", str(tmp_path / "runs"))
    assert done.returncode != 0 and done.stderr.startswith("kit: error: the entry point toy = 'toy_kind' of the "), \
        done.stderr
    assert "another package registers a kind 'toy' too; uninstall one of the two packages" in done.stderr


def test_a_kind_runs_on_an_engine_in_a_package_of_its_own_analysed_bundled_verified_and_shown(toy, toy_engine,
                                                                                                tmp_path):
    assert toy_engine not in registry.ENGINES.shipped and toy_engine in registry.run_choices()  # by its entry point
    assert registry.named(toy_engine).client_class == "toy_engine.client:ToyEngine"
    assert "--engine [llamacpp|vllm|toy]" in ok("run", "--help")  # the choices read when asked, not at import
    out, fake = tmp_path / "runs", ToyServer()
    with fake.serve() as url:
        assert identify(url, transport=fake.transport()).line() == "engine: Toy engine (GET /toy/version)"  # its own proof, asked by the kit
        said = ok("run", str(toy), "--engine", toy_engine, "--engine-url", url, "--out", str(out))
    assert [body["prompt"] for body in fake.posted("/generate")] == ["Say hi."] * 4
    assert fake.paths()[-5:] == ["/toy/version"] + ["/generate"] * 4  # the run asks it in its own dialect only
    [run_dir] = [p for p in out.iterdir() if p.name.startswith("toy-")]
    assert printed("Toy answers", said)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (manifest["status"], manifest["options"]["engine"]) == ("finished", "toy")
    assert manifest["passes"]["asked"]["launch"] == {"engine": "Toy engine", "url": url}
    records = [json.loads(line) for line in (run_dir / "records/asked.jsonl").read_text().splitlines()]
    assert [r["completion"]["text"] for r in records] == ["The answer is"] * 4  # max_tokens 3

    assert printed("Toy answers", ok("analyze", str(run_dir), "--no-figures"))
    bundle = tmp_path / "toy.tar.gz"
    ok("bundle", str(run_dir), "-o", str(bundle))
    verdict = ok("verify", str(bundle)).splitlines()[-1]
    assert verdict.startswith("OK: ") and "from 4 records (results: 1 file, " in verdict, verdict
    shown = ok("show", str(bundle)).splitlines()
    assert shown[0] == f"verified: {verdict}" and "  - 1 distinct answer(s) in 4" in shown


def test_an_engine_the_kit_does_not_start_needs_its_url(toy, toy_engine, tmp_path):
    done = run_here("run", str(toy), "--engine", toy_engine, "--out", str(tmp_path / "runs"))
    assert done.returncode != 0 and done.stderr == ("kit: error: the kit does not start Toy engine itself; give the "
                                                    "URL of a running server: --engine toy --engine-url URL\n")
    assert not (tmp_path / "runs").exists()
