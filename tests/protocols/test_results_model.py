"""Each typed kind's results table (kit.protocols.results_model) writes the bytes earlier kits wrote: every
results/*.json in the fixtures (run folders and bundles of earlier releases) read through its kind's model and
written back is the stored file byte for byte, and recomputed from the fixture's records through the model it is
too; a table of the wrong shape is refused in one line naming the file and the field."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from kit.bundle.recompute import RAW_INPUTS
from kit.protocols import kinds
from kit.protocols.grid.results import GridResults
from kit.protocols.pinning.table import PinningResults
from kit.protocols.reset.results import ResetResults
from kit.protocols.results_model import NotResults, Results

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RUNS = FIXTURES / "records_v1"
MODELS: dict[str, type[Results]] = {"restored-state control": ResetResults, "grid": GridResults,
                                    "pinning": PinningResults}  # each typed kind's table name -> its model


def _text(data: dict) -> bytes:
    """JSON as kit.core.atomic_file.write_json_atomic writes it."""
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _stored() -> list[tuple[str, bytes]]:
    """(where, bytes) of every results/*.json the fixtures hold: run folders, then bundles' members."""
    found = [(str(p.relative_to(FIXTURES)), p.read_bytes()) for p in sorted(FIXTURES.rglob("results/*.json"))]
    for archive in sorted(FIXTURES.rglob("*.tar.gz")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isfile() and "/results/" in member.name and member.name.endswith(".json"):
                    found.append((f"{archive.name}:{member.name}", tar.extractfile(member).read()))
    return found


STORED = _stored()


def test_the_fixtures_hold_a_table_of_every_typed_kind():
    tables = {json.loads(data)["table"] for _, data in STORED}
    assert set(MODELS) <= tables and len(STORED) >= 8


@pytest.mark.parametrize(("where", "data"), STORED, ids=[where for where, _ in STORED])
def test_a_stored_table_written_through_its_model_is_the_stored_bytes(where, data):
    table = json.loads(data)
    model = MODELS.get(table["table"])
    if model is None:
        pytest.skip(f"{table['table']}: no model yet")
    typed = model.of(table, where)
    assert type(typed) is model
    assert _text(typed.to_json()) == data


@pytest.mark.parametrize("run", sorted(p.parent.parent.name for p in RUNS.glob("*/results/*.json")))
def test_results_recomputed_through_the_model_are_the_stored_bytes(run, tmp_path):
    source = RUNS / run
    copy = tmp_path / run
    copy.mkdir()
    for name in RAW_INPUTS:
        if (source / name).is_dir():
            shutil.copytree(source / name, copy / name)
        elif (source / name).is_file():
            shutil.copy2(source / name, copy / name)
    kind = kinds.of_run(copy)
    typed = kind.read(kind.results(copy))
    if typed.table not in MODELS:
        pytest.skip(f"{typed.table}: no model yet")
    for stored in sorted((source / "results").glob("*.json")):
        assert (copy / "results" / stored.name).read_bytes() == stored.read_bytes(), stored.name
    assert type(typed) is MODELS[typed.table]


def _demo_table() -> dict:
    return json.loads((RUNS / "demo-20261201-070851" / "results" / "reset_table.json").read_text())


@pytest.mark.parametrize(("change", "field"), [
    (lambda t: t["sessions"][0].update(items="2"), "sessions.0.items"),
    (lambda t: t["sessions"][0].update(paths_differ=True), "sessions.0.paths_differ"),
    (lambda t: t["sessions"][0].update(hit_reproduces=-1), "sessions.0.hit_reproduces"),
    (lambda t: t["sessions"][0].pop("items"), "sessions.0"),
    (lambda t: t.update(sessions={"s1": {}}), "sessions"),
    (lambda t: t["across_sessions"].update(items=1.5), "across_sessions.items"),
])
def test_a_table_of_the_wrong_shape_is_refused_in_one_line_naming_file_and_field(change, field):
    table = _demo_table()
    change(table)
    with pytest.raises(NotResults) as refused:
        ResetResults.of(table, "runs/x/results/reset_table.json")
    line = str(refused.value)
    assert line.startswith(f"runs/x/results/reset_table.json: {field}") and "\n" not in line


def test_a_kind_reading_a_table_of_the_wrong_shape_says_which_field():
    table = _demo_table()
    table["sessions"][1]["paths_differ"] = "many"
    with pytest.raises(NotResults, match=r"^results/reset_table\.json: sessions\.1\.paths_differ"):
        kinds.KINDS["reset"].read(table, "results/reset_table.json")


@pytest.mark.parametrize("name", list(kinds.KINDS.shipped))
def test_every_kind_carries_its_results_model_and_reads_a_table_through_it(name):
    kind = kinds.KINDS[name]
    assert kind.results_model is not Results and issubclass(kind.results_model, Results)
    assert kind.results_model.__module__.startswith(f"kit.protocols.{name}.")
    with pytest.raises(NotResults):
        kind.read({"table": kind.table, "run_id": 3})


def test_the_sessions_and_passes_that_did_not_end_ok_are_read_from_the_typed_table():
    """The launcher's status lines (kit.tui.screens.results): each not-OK session or pass that says why."""
    table = _demo_table()
    assert ResetResults.of(table).not_ok() == []
    table["sessions"][1] = {"session": table["sessions"][1]["session"], "status": "VOID", "reason": "engine went away"}
    table["sessions"].append({"session": "s9", "status": None})  # listed without an ending: nothing to say
    assert ResetResults.of(table).not_ok() == [(table["sessions"][1]["session"], "VOID", "engine went away")]
    grid = {"table": "grid", "passes": [{"pass": "p1", "status": "OK"}, {"pass": "p2", "status": "FAILED",
                                                                        "reason": "timeout"}], "comparisons": {}}
    assert GridResults.of(grid).not_ok() == [("p2", "FAILED", "timeout")]
    assert Results.of({"table": "other"}).not_ok() == []
