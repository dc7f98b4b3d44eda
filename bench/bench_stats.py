"""Time the random-intercept GLMM and the two-way bootstrap on paper-sized synthetic data.

Not a test: prints seconds. Paper-sized means 11 histories x 80 episodes x 4 formats, 2,000
bootstrap replicates with the GLMM refitted in every drawn history.

    PYTHONPATH=. python bench/bench_stats.py [--replicates 2000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from kit.stats import fit_random_intercept_logit, sweep_bootstrap


def synthetic_cube(histories: int, episodes: int, formats: int, seed: int) -> np.ndarray:
    """0/1 divergence cube with an episode effect (SD 1.4) and slope 0.8 per format step."""
    rng = np.random.default_rng(seed)
    u = rng.normal(0.0, 1.4, episodes)
    p = 1.0 / (1.0 + np.exp(-(-0.6 + 0.8 * np.arange(formats) + u[None, :, None])))
    return (rng.random((histories, episodes, formats)) < p).astype(int)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=2000)
    parser.add_argument("--histories", type=int, default=11)
    args = parser.parse_args()
    cube = synthetic_cube(args.histories, 80, 4, seed=1)
    ep = np.repeat(np.arange(80), 4)
    sc = np.tile(np.arange(4), 80)
    fit_random_intercept_logit(ep, sc, cube[0].ravel())  # warm-up (imports, quadrature nodes)
    runs = []
    for h in range(args.histories):
        t = time.perf_counter()
        fit_random_intercept_logit(ep, sc, cube[h].ravel())
        runs.append(time.perf_counter() - t)
    print(f"one GLMM fit with LR test, 320 rows: median {np.median(runs):.4f} s, max {max(runs):.4f} s")
    t = time.perf_counter()
    fit_random_intercept_logit(ep, sc, cube[0].ravel(), lr_test=False)
    print(f"one GLMM fit without LR test: {time.perf_counter() - t:.4f} s")
    t = time.perf_counter()
    res = sweep_bootstrap(cube, replicates=args.replicates)
    print(f"two-way bootstrap, {args.replicates} replicates x {args.histories} histories with GLMM refits: "
          f"{time.perf_counter() - t:.1f} s (OR {res.odds_ratio:.2f} [{res.or_lo:.2f}, {res.or_hi:.2f}], "
          f"failed fits {res.failed_fits})")


if __name__ == "__main__":
    main()
