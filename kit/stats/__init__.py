"""Statistics for the cache-divergence kit: pure functions on arrays, no file I/O.

Methods follow Section III-G/IV of the paper and REFERENCE.md §4. Every result is a frozen
dataclass with ``to_json()`` giving plain numbers for findings.json.
"""

from kit.stats.block_bootstrap import (
                                       DependenceAwareInterval,
                                       block_sensitivity,
                                       choose_block_length,
                                       circular_block_bootstrap_rates,
                                       dependence_aware_interval,
)
from kit.stats.clogit import ConditionalLogitFit, fit_conditional_logit
from kit.stats.glmm import GlmmFit, fit_random_intercept_logit
from kit.stats.hazard import MARGIN_EDGES, FlipHazard, HazardBin, flip_hazard_by_margin
from kit.stats.inputs import StatsInputError
from kit.stats.intervals import (
                                       RateInterval,
                                       rate_interval,
                                       wilson_interval,
                                       zero_event_upper_bound,
)
from kit.stats.margins import (
                                       GroupComparison,
                                       GroupSummary,
                                       compare_episode_means,
                                       episode_mean_table,
)
from kit.stats.mcnemar import McNemarResult, exact_mcnemar, paired_mcnemar
from kit.stats.permutation import (
                                       PermutationTrendResult,
                                       permutation_trend_test,
                                       sweep_permutation_test,
)
from kit.stats.position_trend import (
                                       PositionTrendResult,
                                       position_trend_test,
                                       quartile_scores,
                                       subset_sum_counts,
)
from kit.stats.tables import divergence_cube, wide_table
from kit.stats.trend import PageTrendResult, page_trend
from kit.stats.twoway_bootstrap import FormatRate, TwoWayBootstrap, sweep_bootstrap

__all__ = [
    "ConditionalLogitFit",
    "DependenceAwareInterval",
    "FlipHazard",
    "FormatRate",
    "GlmmFit",
    "GroupComparison",
    "GroupSummary",
    "HazardBin",
    "MARGIN_EDGES",
    "McNemarResult",
    "PageTrendResult",
    "PermutationTrendResult",
    "PositionTrendResult",
    "RateInterval",
    "StatsInputError",
    "TwoWayBootstrap",
    "block_sensitivity",
    "choose_block_length",
    "circular_block_bootstrap_rates",
    "compare_episode_means",
    "dependence_aware_interval",
    "divergence_cube",
    "episode_mean_table",
    "exact_mcnemar",
    "fit_conditional_logit",
    "fit_random_intercept_logit",
    "flip_hazard_by_margin",
    "page_trend",
    "paired_mcnemar",
    "permutation_trend_test",
    "position_trend_test",
    "quartile_scores",
    "rate_interval",
    "sweep_bootstrap",
    "subset_sum_counts",
    "sweep_permutation_test",
    "wide_table",
    "wilson_interval",
    "zero_event_upper_bound",
]
