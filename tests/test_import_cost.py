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

HEAVY = ("scipy", "statsmodels", "matplotlib", "arch", "textual", "pandas")


def imported_roots(module: str) -> set[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout))


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
