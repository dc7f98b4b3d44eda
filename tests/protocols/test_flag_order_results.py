"""Flag × order results on a hand-written run folder (eight episodes per pass, divergences placed by the
test): counts, Wilson intervals, quartile split and trend test, order identity per setting, requests of
the first pass, servers per arm, and Table III from `kit analyze` reading the run as cells."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from click.testing import CliRunner

from kit.protocols.flag_order import results as flag_order_run
from kit.cli import cli
from kit.protocols import kinds
from kit.protocols.flag_order import protocol as flag_order
from tests.analysis.records_builder import position, write_grid_like

UNITS = [f"multi_turn_base_{i}" for i in range(8)]
# per cell: the episodes (positions in execution order) whose second cache-on pass diverges
DIVERGED = {"default-adjacent": {0, 1, 5}, "default-between": {0, 1, 2, 3, 6}, "disabled-adjacent": set(),
            "disabled-between": {0}}


def episode(unit: str, changed: bool, requests: int = 2):
    tokens = [position(7 if (changed and step == 1) else 3, 0.5, 4, 2) for step in range(requests)]
    return [(f"{unit} prompt {step}", [tokens[step]], 50 * step) for step in range(requests)]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    protocol, _, _ = kinds.load("flag-order", {"workload": {"episodes": 8}})
    folder = tmp_path_factory.mktemp("flag") / "flag-order-synthetic"
    passes = {}
    for plan in flag_order.pass_plan(protocol):
        changed = DIVERGED[plan.cell] if (plan.arm, plan.repeat) == ("on", 2) else set()
        if plan.cell == "disabled-between" and plan.arm == "on" and plan.repeat == 2:
            changed = set()  # its second pass matches disabled-adjacent-on2 ...
        passes[plan.pass_id] = {"arm": plan.arm, "order": UNITS,
                                "episodes": {u: episode(u, i in changed, 3 if plan.cell.startswith("default")
                                                        and i == 4 else 2) for i, u in enumerate(UNITS)}}
    # ... and its first pass differs on the first episode: the orders are not identical when disabled
    passes["disabled-between-on1"]["episodes"][UNITS[0]] = episode(UNITS[0], True)
    write_grid_like(folder, passes, model_name="Qwen2.5-7B-Instruct-Q4_K_M")
    manifest = json.loads((folder / "manifest.json").read_text())
    for plan in flag_order.pass_plan(protocol):
        arm = next(a for a in protocol.arms if a.name == plan.cell)
        argv = ["llama-server", "-m", "model.gguf"] + ([] if arm.cache_ram is None else ["--cache-ram", "0"])
        manifest["passes"][plan.pass_id].update(repeat=plan.repeat, order_index=0,
                                                launch={"pid": 100 + protocol.arms.index(arm), "argv": argv})
    manifest["cells"] = {name: cell.to_json() for name, cell in flag_order.cells(protocol).items()}
    manifest["protocol"]["kind"] = "flag_order"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_run_to_run_per_cell_with_wilson_interval(run_dir):
    table = flag_order_run.write(run_dir)
    assert json.loads((run_dir / "results" / "flag_order.json").read_text()) == table
    # disabled-between: on1 was changed on episode 0, on2 not: run-to-run sees episode 0
    expected = {"default-adjacent": 3, "default-between": 5, "disabled-adjacent": 0, "disabled-between": 1}
    for name, k in expected.items():
        r2r = table["cells"][name]["run_to_run"]
        assert (r2r["diverged"], r2r["episodes"]) == (k, 8), name
        z, p = 1.959964, k / 8
        centre = (p + z * z / 16) / (1 + z * z / 8)
        half = z * math.sqrt(p * (1 - p) / 8 + z * z / 256) / (1 + z * z / 8)
        assert r2r["interval"]["lo"] == pytest.approx(max(0.0, centre - half))
        assert r2r["interval"]["hi"] == pytest.approx(min(1.0, centre + half))
    assert table["cells"]["default-between"]["path"]["diverged"] == 0
    assert table["cells"]["disabled-between"]["path"]["diverged"] == 1
    assert "path" not in table["cells"]["default-adjacent"]


def test_quartile_split_and_exact_trend_match_enumeration(run_dir):
    table = flag_order_run.write(run_dir)
    quartiles = table["cells"]["default-between"]["run_to_run"]["quartiles"]
    assert quartiles["diverged"] == [2, 2, 0, 1] and quartiles["episodes"] == [2, 2, 2, 2]
    scores = [1, 1, 2, 2, 3, 3, 4, 4]
    observed = sum(scores[i] for i in DIVERGED["default-between"])
    null = [sum(scores[i] for i in c) for c in itertools.combinations(range(8), 5)]
    mean = sum(null) / len(null)
    two_sided = sum(abs(t - mean) >= abs(observed - mean) - 1e-9 for t in null) / len(null)
    assert quartiles["trend"]["statistic"] == observed
    assert quartiles["trend"]["p"] == pytest.approx(two_sided)
    assert quartiles["trend"]["p_less"] == pytest.approx(sum(t <= observed for t in null) / len(null))


def test_orders_compared_token_for_token_per_setting(run_dir):
    table = flag_order_run.write(run_dir)
    default = table["orders"]["default: default-adjacent vs default-between"]
    assert default["cache_on"]["on1"]["identical"] is True and default["cache_on"]["on1"]["tokens"] == 17
    assert default["cache_on"]["on2"]["identical"] is False  # different episodes diverged in the two orders
    assert default["identical"] is False and default["run_to_run_difference"] == pytest.approx(2 / 8)
    disabled = table["orders"]["disabled: disabled-adjacent vs disabled-between"]
    assert disabled["cache_on"]["on1"]["episodes_identical"] == 7 and disabled["cache_on"]["on2"]["identical"]
    assert disabled["identical"] is False
    assert len(table["orders"]) == 2  # never across settings


def test_requests_of_the_first_pass_and_servers(run_dir):
    table = flag_order_run.write(run_dir)
    assert table["cells"]["default-adjacent"]["requests_first_pass"] == 17  # episode 4 ran a third request here
    assert table["cells"]["disabled-adjacent"]["requests_first_pass"] == 16
    # a manifest written before server sessions were named: the process id stands for the server
    assert table["cells"]["disabled-between"]["server"] == {"pids": [103], "sessions": ["103"], "cache_ram_arg": ["0"],
                                                            "one_server": True}
    assert table["cells"]["default-between"]["server"]["cache_ram_arg"] == [None]
    assert table["fresh_server_per_arm"] is True
    rows = (run_dir / "results" / "flag_order.csv").read_text().splitlines()
    assert rows[0].startswith("cell,prompt_cache,lifetime,order") and len(rows) == 5


def test_kit_analyze_reads_the_cells_as_table_iii(run_dir, tmp_path):
    out = tmp_path / "analysis"
    result = CliRunner().invoke(cli, ["analyze", str(run_dir), "--out", str(out), "--no-figures",
                                      "--block-replicates", "200", "--cluster-replicates", "50"])
    assert result.exit_code == 0, result.output
    findings = json.loads((out / "findings.json").read_text())
    rows = {(r["prompt_cache"], r["order"]): (r["k"], r["n"]) for r in findings["tables"]["III"]["rows"]}
    assert rows == {("default", "adjacent"): (3, 8), ("default", "cache-off pass in between"): (5, 8),
                    ("disabled", "adjacent"): (0, 8), ("disabled", "cache-off pass in between"): (1, 8)}
    assert "Q4_K_M" in (out / "tables" / "table_III.md").read_text()


def test_a_manifest_cell_of_the_wrong_shape_is_refused_naming_the_key(run_dir, tmp_path):
    """The manifest's cells are read back as the CellSpec the run wrote: a cell whose run-to-run pair is not two
    pass ids is one line naming the cell and the key, not a traceback."""
    import shutil  # noqa: PLC0415

    folder = tmp_path / "run"
    shutil.copytree(run_dir, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["cells"]["default-between"]["flag_order"]["run_to_run"] = ["default-between-on1"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(flag_order_run.NotResults,
                       match=r"^manifest.json cells.default-between: flag_order.run_to_run: List should have at least 2"):
        flag_order_run.flag_order_table(folder)
    assert flag_order_run.flag_order_table(run_dir).cells["default-between"].passes  # the untouched run still reads
