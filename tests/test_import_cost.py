"""Starting a run stays cheap: importing the runner or the kind registry loads no statistics, plotting
or terminal-UI library (they load inside the functions that compute or draw). Each check runs in a
fresh interpreter, since this test session has long imported them all."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kit.paths import REPO_ROOT

HEAVY = ("scipy", "statsmodels", "matplotlib", "arch", "textual", "pandas")


def imported_roots(module: str) -> set[str]:
    code = f"import json, sys, {module}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("module", ["kit.runner", "kit.protocols.kinds"])
def test_importing_it_loads_no_statistics_plotting_or_ui_library(module):
    loaded = imported_roots(module)
    assert not loaded & set(HEAVY), f"import {module} loads {sorted(loaded & set(HEAVY))}"
