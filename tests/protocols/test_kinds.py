"""The kind registry: every shipped kind is registered completely, and a toy kind registered here (not
shipped: one module's worth of code plus its YAML file) is validated, run, has its results computed at
the end of the run, read by `kit analyze`, recomputed by `kit verify`, listed by the launcher's catalog
and printed by the console, all through its one registration."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from click.testing import CliRunner
from pydantic import Field, ValidationError
from rich.table import Table

from kit.analysis.collect import collect
from kit.bundle.verify import verify_bundle
from kit.cli import cli
from kit.app.console import results_view
from kit.core.errors import ConfigError
from kit.core.atomic_file import write_json_atomic
from kit.core.digests import sha256_text
from kit.record.manifest import Manifest, now
from kit.core.paths import protocols_dir
from kit.engines.registry import VLLM
from kit.protocols import kinds
from kit.protocols.kind import Analysis, Kind, Launcher, Lazy, Number, rough_duration
from kit.protocols.procedure import Prepared, RunContext, RunInputs
from kit.protocols.results_model import Count, Results
from kit.protocols.spec import ProtocolBase
from kit.record.model import Gate, RequestRecord, ResetRecord
from kit.record.files import RecordWriter, read_records
from kit.tui import form
from kit.tui.catalog import EMBEDDED, Capabilities, catalog
from kit.tui.widgets.divergence_plot import rows_for
from tests.answers import answer, prompt_body
from tests.console_text import printed


# --- the toy kind: what a new kind's module holds ---------------------------------------------------

class ToyProtocol(ProtocolBase):
    """Writes `notes` records, one pass, no engine."""

    protocol: Literal["toy"]
    notes: int = Field(3, ge=1, le=50)


@dataclass(frozen=True, kw_only=True)
class ToyRecord(RequestRecord):
    """A toy note: the fields every record has, and its text."""

    text: str


def prepare(protocol: ToyProtocol, inputs: RunInputs) -> Prepared:
    return Prepared(plan={"requests": protocol.notes}, workload={"source": "toy notes"})


def run(protocol: ToyProtocol, prepared: Prepared, ctx: RunContext) -> None:
    file = "records/p1.jsonl"
    ctx.manifest.set_pass("p1", file=file, status="running", started=now())
    with RecordWriter(ctx.run_dir / file) as writer:
        for seq in range(protocol.notes):
            ctx.checkpoint()
            text = f"note {seq}"
            writer.write(ToyRecord(**ctx.stamp("p1", "toy"), seq=seq, prompt_sha256=sha256_text(text), text=text))
    ctx.manifest.set_pass("p1", status="OK", reason=None, records=writer.count, ended=now())


class ToyResults(Results):
    """results/toy.json: how many notes, and the last."""

    notes: Count
    last: str | None = None


RESULTS_CALLED: list[Path] = []


def results(run_dir: Path) -> dict[str, Any]:
    RESULTS_CALLED.append(run_dir)
    records = read_records(run_dir / "records/p1.jsonl").records
    table = ToyResults(table="toy notes", run_id=run_dir.name, files={"toy": "results/toy.json"},
                       notes=len(records), last=records[-1]["text"] if records else None).to_json()
    (run_dir / "results").mkdir(exist_ok=True)
    write_json_atomic(run_dir / "results/toy.json", table)
    return table


def render(table: ToyResults) -> Table:
    view = Table(title="Toy notes")
    view.add_column("notes")
    view.add_column("last")
    view.add_row(str(table.notes), str(table.last))
    return view


TOY = Kind(
    name="toy", model=ToyProtocol, prepare=prepare, run=run, results=results, table="toy notes", render=render,
    results_model=ToyResults,
    launcher=Launcher(measures="toy notes written without an engine", needs="nothing at all",
                      estimate=lambda data: f"{data.get('notes', 3)} notes, about {rough_duration(1)} on a CPU",
                      size=Number("Notes", "notes", 3, high=50)),
    analysis=Analysis("reset"), record=ToyRecord)

TOY_YAML = "protocol: toy\ndescription: A toy kind that writes notes.\nnotes: 4\n"


@pytest.fixture
def toy(monkeypatch, tmp_path) -> Path:
    """The toy kind registered, and its protocol file."""
    monkeypatch.setitem(kinds.KINDS, "toy", TOY)
    RESULTS_CALLED.clear()
    folder = tmp_path / "protocols"
    folder.mkdir()
    (folder / "toy.yaml").write_text(TOY_YAML)
    return folder / "toy.yaml"


# --- the shipped kinds ---------------------------------------------------------------------------------

def test_every_shipped_kind_is_registered_whole_under_its_own_name():
    assert list(kinds.KINDS) == list(kinds.KINDS.shipped)  # no kind installed from outside the kit here
    tables = [kind.table for kind in kinds.KINDS.values()]
    assert len(set(tables)) == len(tables)
    for name, kind in kinds.KINDS.items():
        assert kind.name == name
        assert kind.model.model_fields["protocol"].annotation == Literal[name]
        assert callable(kind.render.resolve() if isinstance(kind.render, Lazy) else kind.render)
        assert kind.launcher.measures and kind.launcher.needs and kind.launcher.size.label
        # a findings family of the analysis, or the kind's own results table under its own name
        assert kind.analysis is None or kind.analysis.family in ("reset", "grid", "sweep", "harness", None) or (
            kind.analysis.family == name and kind.analysis.table is not None)
        assert kinds.for_table({"table": kind.table}) is kind
        assert issubclass(kind.record, RequestRecord) and kind.record is not RequestRecord
    # what vLLM serves, each kind says on its own registration
    assert [name for name, kind in kinds.KINDS.items() if kind.engine_rules] == ["grid", "sweep", "flag_order"]


def test_each_record_class_is_its_first_registered_kinds_procedure():
    """The record classes come from the registry: each under the first kind registering it, a class each."""
    classes = kinds.record_classes()
    assert len(set(classes.values())) == len(classes) and set(classes) <= set(kinds.KINDS)
    for name, kind in kinds.KINDS.items():
        procedure = next(p for p, cls in classes.items() if cls is kind.record)
        assert list(kinds.KINDS).index(procedure) <= list(kinds.KINDS).index(name)
        assert (procedure == name) == (kinds.KINDS[procedure] is kind)
    # every BFCL pass writes the grid's records whatever its kind; a remedy's arms write the reset's
    assert {name: p for name in ("sweep", "flag_order", "remedy") for p, cls in classes.items()
            if cls is kinds.KINDS[name].record} == {"sweep": "grid", "flag_order": "grid", "remedy": "reset"}


def test_a_record_is_checked_against_its_procedures_class(tmp_path):
    with RecordWriter(tmp_path / "p1.jsonl", run_id="r", pass_id="p1", protocol="reset") as writer:
        four = {"token": "4", "logprob": -0.5, "id": 19, "top": []}
        writer.answered(ResetRecord, answer([four], body=prompt_body("2+2?")), unit="i0", step=0, gate=Gate(True),
                        phase="cold", phase_index=0, expect="cold")
    [record] = read_records(tmp_path / "p1.jsonl").records
    assert isinstance(kinds.validate_record(record), ResetRecord)
    with pytest.raises(ValidationError, match="expect"):
        kinds.validate_record({**record, "expect": "lukewarm"})
    with pytest.raises(ValidationError, match="phase"):  # the reset class's own field, required
        kinds.validate_record({k: v for k, v in record.items() if k != "phase"})
    # a procedure no kind registers: the fields every record has
    assert type(kinds.validate_record({**record, "protocol": "batch"})) is RequestRecord


def test_the_launchers_plot_shows_the_rows_each_kind_declares():
    reset = {"table": "restored-state control", "sessions": [  # laid out as results/reset_table.json is
        {"session": "s1", "status": "OK", "items": 8, "recompute_reproduces": 8, "hit_reproduces": 8, "paths_differ": 2},
        {"session": "s2", "status": "VOID", "reason": "engine gone"}], "across_sessions": {"sessions": 1}}
    [(label, k, n, lo, hi)] = rows_for(reset)
    assert (label, k, n) == ("s1 paths differ", 2, 8) and 0 < lo < 2 / 8 < hi < 1
    grid = {"table": "grid", "passes": [], "comparisons": {
        "path": {"passes": ["on1", "off1"], "diverged": 3, "episodes": 10, "interval": {"rate": 0.3, "lo": 0.1, "hi": 0.6}},
        "run-to-run cache-off": {"passes": ["off1", "off2"], "skipped": "one pass only"}}}
    assert rows_for(grid) == [("path", 3, 10, 0.1, 0.6)]
    assert rows_for({"table": "sweep"}) == [] and rows_for({}) == []


def test_vllm_refuses_a_kind_it_does_not_serve_and_what_the_kind_itself_refuses():
    reset, _, _ = kinds.load("demo")
    with pytest.raises(ConfigError, match=r"reset protocols do not run on vLLM \(it serves grid, sweep and "
                                          r"flag_order;"):
        kinds.refuse_unserved(reset, VLLM, starts_servers=True)
    shared, _, _ = kinds.load("grid-cpu")
    assert shared.server == "shared"
    with pytest.raises(ConfigError, match="server: shared"):
        kinds.refuse_unserved(shared, VLLM, starts_servers=False)
    alternating, _, _ = kinds.load("grid-vllm", {"passes": ["on", "off", "on", "off"]})
    kinds.refuse_unserved(alternating, VLLM, starts_servers=False)  # servers reached by URL: both up is theirs to allow
    with pytest.raises(ConfigError, match="keep a cache-on and a cache-off vLLM server up at once"):
        kinds.refuse_unserved(alternating, VLLM, starts_servers=True)
    with pytest.raises(ConfigError, match="sets cache_ram"):
        kinds.refuse_unserved(kinds.load("flag-order")[0], VLLM, starts_servers=True)
    kinds.refuse_unserved(kinds.load("flag-order-vllm")[0], VLLM, starts_servers=True)


def test_every_protocol_file_loads_as_its_kind():
    for path in sorted(protocols_dir().glob("*.yaml")):
        protocol, _, _ = kinds.load(path.stem)
        assert kinds.of(protocol) is kinds.KINDS[yaml.safe_load(path.read_text())["protocol"]]


def test_the_documented_names_and_kinds_are_the_protocol_files_own():
    """docs/protocols.md's table of protocol names, their kinds and the procedure their records name."""
    documented: dict[str, tuple[str, str]] = {}
    text = (Path(__file__).resolve().parents[2] / "docs/protocols.md").read_text()
    table = text[text.index("| protocol (file) | kind |"):].split("\n\n")[0]
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4:
            for name in re.findall(r"`([\w-]+)`", cells[0]):
                documented[name] = (cells[1].strip("`"), cells[2].strip("`"))
    files = {path.stem: yaml.safe_load(path.read_text())["protocol"] for path in protocols_dir().glob("*.yaml")}
    assert {name: kind for name, (kind, _) in documented.items() if name in files} == files
    procedure = {record: name for name, record in kinds.record_classes().items()}
    assert {kind: procedure[kinds.KINDS[kind].record] for kind, _ in documented.values()} == {
        kind: written for kind, written in documented.values()}
    assert documented["determinism-harness"] == ("harness", "harness")


# --- the toy kind, through every door ------------------------------------------------------------------

def test_a_registered_kind_is_validated_with_the_file_key_and_allowed_values(toy):
    protocol, path, _ = kinds.load(str(toy))
    assert isinstance(protocol, ToyProtocol) and protocol.notes == 4 and kinds.of(protocol) is TOY
    toy.write_text(TOY_YAML.replace("notes: 4", "notes: 0"))
    with pytest.raises(ConfigError, match=r"toy\.yaml: key 'notes'"):
        kinds.load(str(toy))
    toy.write_text(TOY_YAML.replace("protocol: toy", "protocol: toys"))
    with pytest.raises(ConfigError) as raised:
        kinds.load(str(toy))
    assert "toy" in raised.value.line() and "reset" in raised.value.line()


def test_a_registered_kind_is_listed_and_sized_by_the_launcher(toy, tmp_path):
    [entry] = catalog(Capabilities((EMBEDDED,)), toy.parent)
    assert (entry.kind, entry.runnable, entry.measures, entry.needs) == (
        "toy", True, "toy notes written without an engine", "nothing at all")
    assert entry.estimate == "4 notes, about 1 s on a CPU"
    setup = form.defaults(str(toy), "toy", yaml.safe_load(TOY_YAML), tmp_path)
    assert setup.size == "4" and form.problems(setup, Capabilities((EMBEDDED,)), set()) == {}
    setup.size = "51"
    assert "from 1 to 50" in form.problems(setup, Capabilities((EMBEDDED,)), set())["size"]
    setup.size = "7"
    assert form.overrides(setup) == {"notes": 7}
    assert form.estimate_line(setup) == "this setup: 7 notes, about 1 s on a CPU"


def test_a_registered_kind_runs_and_its_results_are_reached_through_its_one_entry(toy, tmp_path):
    out = tmp_path / "runs"
    done = CliRunner().invoke(cli, ["run", str(toy), "--engine-url", "http://127.0.0.1:9", "--out", str(out)])
    assert done.exit_code == 0, done.output
    [run_dir] = [p for p in out.iterdir() if p.name.startswith("toy-")]
    # the run: one record file, its pass OK, the results written at its end
    written = read_records(run_dir / "records/p1.jsonl").records
    assert [r["text"] for r in written] == [f"note {i}" for i in range(4)]
    assert {(r["protocol"], r["protocol_name"], r["protocol_kind"]) for r in written} == {("toy", "toy", "toy")}
    manifest = Manifest.load(run_dir).run
    assert (manifest.status, manifest.protocol.kind, manifest.passes["p1"].status) == (
        "finished", "toy", "OK")
    assert manifest.results == {"toy": "results/toy.json"} and RESULTS_CALLED == [run_dir]
    # the console: the kind's own renderer printed the table at the end of `kit run`
    assert printed("Toy notes", done.output) and printed("note 3", done.output)  # a Rich table: may wrap
    assert isinstance(results_view({"table": "toy notes", "notes": 1, "last": "x"}), Table)
    # `kit analyze`: the run folder is read the way the kind's analysis entry says
    [folder] = collect([run_dir]).runs
    assert (folder.kind, list(folder.ok_passes)) == ("reset", ["p1"])
    kinds.KINDS["toy"] = replace(TOY, analysis=None)
    [skipped] = collect([run_dir]).skipped
    assert "protocol kind 'toy' has no analysis yet" in skipped["reason"]
    # `kit verify`: the bundle written after the run recomputes the results through the same entry
    [bundle] = (out / "bundles").iterdir()
    verdict = verify_bundle(bundle)
    assert verdict.ok, verdict.lines()
    assert verdict.results_compared == [f"runs/{run_dir.name}/results/toy.json"]
    assert len(RESULTS_CALLED) == 2 and RESULTS_CALLED[1].name == run_dir.name and RESULTS_CALLED[1] != run_dir


def test_a_run_folder_of_a_kind_this_kit_does_not_know_is_refused_with_the_fix(toy, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_json_atomic(run_dir / "manifest.json", {"schema": "kit.manifest/1", "run_id": "r", "status": "finished",
                                                  "protocol": {"kind": "batch"}})
    [skipped] = collect([run_dir]).skipped
    assert "protocol kind 'batch' is not one this kit knows" in skipped["reason"]
    assert "toy" in skipped["reason"]
