"""The BFCL multi-turn base workload: an agent loop in BFCL's prompting mode.

BFCL itself (`bfcl-eval`) is installed into the kit cache with `ensure_bfcl` and only ever
imported in a separate worker process (`kit.workloads.bfcl.worker`), because its executor
`eval`s model output. The main process talks to that worker through `BfclWorker`. What model output
may reach BFCL at all is `call_policy`; how the worker process is confined is `confinement`.
"""

from kit.workloads.bfcl.agent import EpisodeResult, StepInfo, TurnResult, run_episode
from kit.workloads.bfcl.client import BfclWorker, Decoded, Episode, Execution, Score
from kit.workloads.bfcl.provision import (
    BFCL_PINS,
    BfclInstall,
    ensure_bfcl,
    kit_cache_dir,
)
from kit.workloads.bfcl.render import (
    RENDERERS,
    render_chatml,
    render_llama31,
    render_qwen25,
)
from kit.workloads.bfcl.scoring import score_episode

__all__ = [
    "BFCL_PINS",
    "BfclInstall",
    "BfclWorker",
    "Decoded",
    "Episode",
    "EpisodeResult",
    "Execution",
    "RENDERERS",
    "Score",
    "StepInfo",
    "TurnResult",
    "ensure_bfcl",
    "kit_cache_dir",
    "render_chatml",
    "render_llama31",
    "render_qwen25",
    "run_episode",
    "score_episode",
]
