"""Starting a run stays cheap: importing the runner or the kind registry loads no statistics, plotting
or terminal-UI library (they load inside the functions that compute or draw). Each check runs in a
fresh interpreter, since this test session has long imported them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kit.core.paths import REPO_ROOT
from kit.protocols import kinds

HEAVY = ("scipy", "statsmodels", "matplotlib", "arch", "textual", "pandas")


def imported_roots(module: str) -> set[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout))


KIND_PACKAGES = tuple(kinds.KINDS.shipped)  # the registry's names: reading them loads no kind


def kinds_loaded(code: str) -> list[str]:
    """The kind packages (kit/protocols/<kind>/) a fresh interpreter has imported after running `code`."""
    code += ("\nimport json, sys; print(json.dumps(sorted({m.split('.')[2] for m in sys.modules "
             f"if m.startswith('kit.protocols.') and m.split('.')[2] in {KIND_PACKAGES!r}}})))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_the_command_line_and_the_kind_registry_import_no_kind():
    assert kinds_loaded("import kit.cli, kit.run.runner, kit.protocols.kinds") == []


def test_a_reset_runs_setup_and_end_load_the_reset_kind_only():
    """What `kit run reset` (and `kit demo`) does before the engine starts and after its last request, less
    the engine: validate the protocol, check the executor, plan it, then write and print a run's results
    table (a recorded demo run folder, copied) and its note. The other kinds' packages stay unloaded."""
    run = REPO_ROOT / "tests" / "fixtures" / "records_v1" / "demo-20261201-070851"
    code = f"""
import shutil, tempfile
from pathlib import Path
from kit.app import console
from kit.protocols import kinds
from kit.protocols.procedure import RunInputs
from kit.run import executors, runner
for name in ("reset", "demo"):
    protocol, _, _ = kinds.load(name)
    kind = kinds.of(protocol)
    executors.check(runner.RunOptions(protocol=name), kind)
kind.prepare(protocol, RunInputs())
run_dir = Path(tempfile.mkdtemp()) / "run"
shutil.copytree({str(run)!r}, run_dir)
table = kinds.of_run(run_dir).results(run_dir)
assert console.results_view(table) is not None and kinds.for_table(table) is kind
console.results_note(run_dir, table)
shutil.rmtree(run_dir.parent)"""
    assert kinds_loaded(code) == ["reset"]
    assert kinds_loaded("from kit.protocols import kinds; kinds.load('sentinel')") == ["grid"]


@pytest.mark.parametrize("module", ["kit.run.runner", "kit.protocols.kinds"])
def test_importing_it_loads_no_statistics_plotting_or_ui_library(module):
    loaded = imported_roots(module)
    assert not loaded & set(HEAVY), f"import {module} loads {sorted(loaded & set(HEAVY))}"


@pytest.mark.parametrize("module", ["kit.stats", "kit.stats.intervals"])
def test_a_wilson_interval_loads_no_scipy(module):
    """A run writes its final table with a Wilson interval (kit.stats.intervals): importing the statistics
    package, or that module, must not load scipy (the GLMM and bootstrap modules do, about 2 s)."""
    loaded = imported_roots(f"{module}; from kit.stats import rate_interval, wilson_interval")
    assert not loaded & set(HEAVY), f"import {module} loads {sorted(loaded & set(HEAVY))}"


def test_a_reset_runs_final_table_loads_no_scipy():
    """The restored-state control's table (kit.protocols.reset.results) adds an exact McNemar test: its binomial
    tail is an exact integer sum, so it loads no scipy at all (scipy.stats alone is about 2 s)."""
    code = ("import json, sys; from kit.protocols.reset import results; from kit.stats import exact_mcnemar; "
            "exact_mcnemar(3, 9); print(json.dumps(sorted(m for m in sys.modules if m.startswith('scipy'))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_the_statistics_names_still_load_on_use():
    code = ("import sys, kit.stats as s; assert 'kit.stats.glmm' not in sys.modules; "
            "assert callable(s.fit_random_intercept_logit) and 'scipy' in sys.modules; "
            "assert set(s.__all__) <= set(dir(s))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH"))))}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


ENGINE_CLIENT = ("httpx", "trio", "kit.launch.provider", "kit.engines.http")  # what starts and talks to engines


def loaded_after(code: str) -> set[str]:
    """Every module a fresh interpreter has imported after running `code` (its last printed line)."""
    code += "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def engine_client(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m in ENGINE_CLIENT or m.startswith(tuple(f"{r}." for r in ENGINE_CLIENT)))


@pytest.mark.parametrize("module", ["kit.analysis.findings", "kit.bundle.verify", "kit.protocols.harness.calls",
                                    "kit.protocols.harness.files"])
def test_code_that_reads_run_folders_loads_no_engine_client_nor_statistics(module):
    """`kit analyze` and `kit verify` read records: importing them (or the harness's calls and files, which
    kit verify reads) loads neither the launch machinery (httpx, trio) nor the statistics stack."""
    loaded = loaded_after(f"import {module}")
    assert engine_client(loaded) == [], f"import {module} loads {engine_client(loaded)[:5]}"
    assert not {m.split('.')[0] for m in loaded} & set(HEAVY), f"import {module} loads a statistics library"


def test_looking_up_a_kind_that_is_read_loads_no_engine_client():
    """A kind's registration (its `protocol` module, imported when kit analyze or kit verify looks the kind up)
    names the launch machinery in annotations only, and imports it inside the functions that start servers."""
    loaded = loaded_after("from kit.protocols.kinds import KINDS\nfor name in ('reset', 'grid', 'harness'): KINDS[name]")
    assert engine_client(loaded) == []


def test_verifying_a_bundle_loads_no_engine_client_nor_statistics():
    bundle = REPO_ROOT / "tests" / "fixtures" / "bundles" / "demo-20261201-191112.tar.gz"
    loaded = loaded_after(f"""
import runpy, sys
sys.argv = ["kit", "verify", {str(bundle)!r}]
try:
    runpy.run_module("kit.cli", run_name="__main__")
except SystemExit as stop:
    assert stop.code in (0, None), stop.code""")
    assert engine_client(loaded) == [] and not {m.split('.')[0] for m in loaded} & set(HEAVY)


def test_analysing_runs_without_a_grid_run_loads_no_arch():
    """arch (statsmodels, pandas and matplotlib with it) chooses the grid intervals' block length only: kit
    analyze of a reset run computes its findings without it, and of a grid run loads it."""
    runs = REPO_ROOT / "tests" / "fixtures" / "records_v1"
    code = "from kit.analysis import findings\nfindings.compute([__import__('pathlib').Path({!r})])"
    assert "arch" not in loaded_after(code.format(str(runs / "demo-20261201-070851")))
    assert "arch" in loaded_after(code.format(str(runs / "grid-tiny-20261201-070919")))



def test_checking_an_out_folder_loads_no_engine_client():
    """Every command that writes checks its --out folder first (kit.run.preflight.check_out): that loads
    none of the engine build and launch machinery (httpx, trio), which only `kit run`'s checks use."""
    loaded = loaded_after("from kit.run.preflight import check_out")
    assert engine_client(loaded) == []


def test_kit_analyze_of_a_grid_run_loads_its_kind_only_and_no_engine_client(tmp_path):
    """`kit analyze` of a grid run looks up the grid kind only (not every registered kind) and reads its
    records: it loads no other kind's registration and none of the engine launch machinery (httpx, trio)."""
    run = REPO_ROOT / "tests" / "fixtures" / "records_v1" / "grid-tiny-20261201-070919"
    loaded = loaded_after(f"""
import runpy, sys
sys.argv = ["kit", "analyze", {str(run)!r}, "--out", {str(tmp_path / "out")!r}, "--no-figures"]
try:
    runpy.run_module("kit.cli", run_name="__main__")
except SystemExit as stop:
    assert stop.code in (0, None), stop.code""")
    assert engine_client(loaded) == [] and (tmp_path / "out" / "findings.json").is_file()
    registered = {f"kit.protocols.{name}.protocol" for name in KIND_PACKAGES}  # each kind's registration
    assert sorted(loaded & registered) == ["kit.protocols.grid.protocol"]


def test_a_reset_run_loads_no_numpy_nor_the_commands_it_does_not_run():
    """`kit run reset`'s process: the command line (other packages' commands load only when they run, or when
    `kit --help` lists them), the runner, the reset kind's table and its exact McNemar test, made plain JSON,
    load no numpy (a tenth of a second of every run's start) and no other command's module."""
    from kit.cli import _Commands  # noqa: PLC0415

    loaded = loaded_after("import json, kit.cli, kit.run.runner, kit.protocols.reset.results\n"
                          "from kit.stats import exact_mcnemar\nprint(json.dumps(exact_mcnemar(3, 9).to_json()))")
    assert "numpy" not in loaded
    used_by_run = {"kit.importers.cli", "kit.launch.engines_cli"}  # `kit run` options' choices are theirs
    assert not loaded & ({target.split(":")[0] for target in _Commands.LAZY.values()} - used_by_run)
    code = "import json\nfrom kit.stats import exact_mcnemar\nprint(json.dumps(exact_mcnemar(3, 9).to_json()))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"b": 3, "c": 9, "p": 0.14599609375}  # 2 * P(X <= 3), X ~ B(12, 1/2)


def test_every_command_loaded_on_use_is_found_by_its_name_and_listed():
    import click  # noqa: PLC0415

    from kit.cli import _Commands, cli  # noqa: PLC0415

    ctx = click.Context(cli, info_name="kit")
    for name in _Commands.LAZY:
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
    assert set(_Commands.LAZY) | {"run", "demo", "check", "analyze", "bundle", "verify"} <= set(cli.list_commands(ctx))
    assert cli.get_command(ctx, "no-such-command") is None
