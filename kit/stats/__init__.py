"""Statistics for the cache-divergence kit: pure functions on arrays, no file I/O.

Methods follow Section III-G/IV of the paper and REFERENCE.md §4. Every result is a frozen
dataclass with ``to_json()`` giving plain numbers for findings.json.

The names below load on first use (PEP 562): ``from kit.stats import rate_interval`` imports only
kit.stats.intervals, so a run that writes a Wilson interval never loads scipy (the GLMM, bootstrap and
trend modules do, about 2 s). ``MODULES`` lists every submodule, for a caller that wants them all loaded
before forking workers (kit.analysis.parallel.import_before_forking).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "kit.stats.block_bootstrap": ("DependenceAwareInterval", "block_sensitivity", "choose_block_length",
                                  "circular_block_bootstrap_rates", "dependence_aware_interval"),
    "kit.stats.clogit": ("ConditionalLogitFit", "fit_conditional_logit"),
    "kit.stats.glmm": ("GlmmFit", "fit_random_intercept_logit"),
    "kit.stats.hazard": ("MARGIN_EDGES", "FlipHazard", "HazardBin", "flip_hazard_by_margin"),
    "kit.stats.inputs": ("StatsInputError",),
    "kit.stats.intervals": ("RateInterval", "rate_interval", "wilson_interval", "zero_event_upper_bound"),
    "kit.stats.margins": ("GroupComparison", "GroupSummary", "compare_episode_means", "episode_mean_table"),
    "kit.stats.mcnemar": ("McNemarResult", "exact_mcnemar", "paired_mcnemar"),
    "kit.stats.permutation": ("PermutationTrendResult", "permutation_trend_test", "sweep_permutation_test"),
    "kit.stats.position_trend": ("PositionTrendResult", "position_trend_test", "quartile_scores",
                                 "subset_sum_counts"),
    "kit.stats.tables": ("divergence_cube", "wide_table"),
    "kit.stats.trend": ("PageTrendResult", "page_trend"),
    "kit.stats.twoway_bootstrap": ("FormatRate", "TwoWayBootstrap", "sweep_bootstrap"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
MODULES = tuple(_EXPORTS)

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'kit.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
