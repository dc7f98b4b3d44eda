"""Maximum likelihood for the random-intercept logit, batched over B datasets that share their patterns.

A safeguarded Newton method on theta = (b0, b1, log sd) with the analytic gradient and Hessian of
:func:`kit.stats.quadrature_likelihood.evaluate`. Only the datasets still iterating are evaluated
(a bootstrap batch converges unevenly), and the line search re-evaluates only the datasets whose
step it is still shortening.

Near sd = 0 the likelihood in log sd behaves like a + c e^(2 log sd), on which Newton's method crawls
in steps of 1/2: down towards the bound when the maximum is at sd -> 0, up when a bootstrap refit
starts at a boundary estimate but its own maximum is inside. A step that moves log sd that far also
tries longer moves along log sd (and, downwards, the bound itself) and keeps the best point when its
likelihood is at least as high as the Newton point's; the iteration ends at the same maximum, sooner.
"""

from __future__ import annotations

import numpy as np

from kit.stats.quadrature_likelihood import (
    LOG_SD_MAX,
    LOG_SD_MIN,
    Patterns,
    Quadrature,
    evaluate,
)

MAX_STEP = 3.0
"""Largest change of any parameter in one Newton step."""
HALVINGS = 30
CRAWL = 0.25
LONGER_UP = (6.0,)
LONGER_DOWN = (1e9,)
"""A Newton step moving log sd by more than CRAWL also tries that move times these (1e9: the bound)."""
COARSE_NODES = 30


def newton_steps(theta: np.ndarray, grad: np.ndarray, hess: np.ndarray, free: np.ndarray):
    """Capped Newton steps (B, 3) and the coordinates held fixed (B, 3).

    The Hessian's eigenvalues are made negative-definite; log sd is held at its lower bound while
    the gradient pushes it further down (boundary fit); fixed coordinates get unit curvature.
    """
    fixed = np.broadcast_to(~free, theta.shape).copy()
    fixed[:, 2] |= (theta[:, 2] <= LOG_SD_MIN + 1e-12) & (grad[:, 2] < 0)
    g = np.where(fixed, 0.0, grad)
    h = np.where(fixed[:, :, None] | fixed[:, None, :], 0.0, hess)
    h = h - np.eye(3)[None] * fixed[:, :, None]
    vals, vecs = np.linalg.eigh(-h)
    vals = np.maximum(np.abs(vals), 1e-8)
    step = np.einsum("bij,bj,bkj,bk->bi", vecs, 1.0 / vals, vecs, g)
    step = np.where(fixed, 0.0, step)
    biggest = np.max(np.abs(step), axis=1, keepdims=True)
    return step * np.minimum(1.0, MAX_STEP / np.maximum(biggest, 1e-300)), fixed


def _bounded(theta: np.ndarray) -> np.ndarray:
    theta[:, 2] = np.clip(theta[:, 2], LOG_SD_MIN, LOG_SD_MAX)
    return theta


class _Batch:
    """theta, log-likelihood, gradient, Hessian and quadrature modes of B datasets."""

    def __init__(self, theta, ll, grad, hess, modes):
        self.theta, self.ll, self.grad, self.hess, self.modes = theta, ll, grad, hess, modes

    @classmethod
    def evaluated(cls, patterns: Patterns, counts, theta, quad: Quadrature, modes) -> _Batch:
        ll, grad, hess, modes = evaluate(patterns, counts, theta, quad, modes)
        return cls(theta, ll, grad, hess, modes)

    def take(self, rows) -> _Batch:
        return _Batch(self.theta[rows], self.ll[rows], self.grad[rows], self.hess[rows], self.modes[rows])

    def put(self, rows, other: _Batch) -> None:
        for name in ("theta", "ll", "grad", "hess", "modes"):
            getattr(self, name)[rows] = getattr(other, name)


def _line_search(patterns: Patterns, counts, here: _Batch, step, quad: Quadrature) -> _Batch:
    """Halve each step until the likelihood does not fall (after HALVINGS halvings the step is taken)."""
    found = here.take(np.arange(step.shape[0]))  # a copy
    factor = np.ones(step.shape[0])
    pending = np.arange(step.shape[0])
    for attempt in range(HALVINGS):
        cand = _bounded(here.theta[pending] + factor[pending, None] * step[pending])
        trial = _Batch.evaluated(patterns, counts[pending], cand, quad, here.modes[pending])
        old = here.ll[pending]
        done = (trial.ll >= old - 1e-10 * np.maximum(1.0, np.abs(old))) | (attempt == HALVINGS - 1)
        found.put(pending[done], trial.take(done))
        pending = pending[~done]
        if pending.size == 0:
            break
        factor[pending] /= 2.0
    return found


def _long_log_sd_steps(patterns: Patterns, counts, here: _Batch, step, fixed, quad: Quadrature,
                       found: _Batch) -> None:
    """Where Newton crawls in log sd, also try longer moves along it and keep the best if no worse."""
    rows = np.flatnonzero(~fixed[:, 2] & (np.abs(step[:, 2]) > CRAWL))
    if rows.size == 0:
        return
    base = here.theta[rows] + step[rows]
    longer = np.where(step[rows, 2:3] < 0, np.array(LONGER_DOWN)[None, :], np.array(LONGER_UP)[None, :])
    targets = here.theta[rows, 2:3] + step[rows, 2:3] * longer  # (R, J), the bound where beyond it
    n_try = targets.shape[1]
    cand = np.repeat(base, n_try, axis=0)
    cand[:, 2] = targets.ravel()
    trial = _Batch.evaluated(patterns, np.repeat(counts[rows], n_try, axis=0), _bounded(cand), quad,
                             np.repeat(here.modes[rows], n_try, axis=0))
    ll = np.where(np.isfinite(trial.ll), trial.ll, -np.inf).reshape(rows.size, n_try)
    best = np.argmax(ll, axis=1)
    pick = np.arange(rows.size) * n_try + best
    better = ll[np.arange(rows.size), best] >= found.ll[rows]
    found.put(rows[better], trial.take(pick[better]))


def maximise(patterns: Patterns, counts: np.ndarray, start: np.ndarray, quad: Quadrature,
             free: np.ndarray, max_iter: int = 60, step_tol: float = 1e-6, grad_tol: float = 1e-8,
             final_evaluation: bool = True):
    """Maximise the likelihood for each of B datasets (counts (B, P), start (B, 3)).

    ``free`` (3,) marks the parameters being estimated; the others stay at their start values. Log sd
    is kept in [LOG_SD_MIN, LOG_SD_MAX]. A dataset has converged once a Newton step moved no
    parameter by more than ``step_tol`` (with quadratic convergence the remaining error is then of
    order step_tol^2) or its free gradient is below ``grad_tol``.

    With ``final_evaluation=False`` (callers that need only theta) that last step below ``step_tol`` is
    taken without evaluating the likelihood at its end; the returned log-likelihood and Hessian of
    such datasets are then those one step before theta.

    Returns theta (B, 3), log-likelihood (B,), Hessian (B, 3, 3), converged (B,), iterations.
    """
    theta = np.array(start, dtype=float)
    state = _Batch.evaluated(patterns, counts, theta, quad, np.zeros((theta.shape[0], patterns.x.shape[0])))
    converged = np.zeros(theta.shape[0], dtype=bool)
    iterations = 0
    for iterations in range(1, max_iter + 1):
        rows = np.flatnonzero(~converged)
        step, fixed = newton_steps(state.theta[rows], state.grad[rows], state.hess[rows], free)
        if not final_evaluation:
            last = np.max(np.abs(step), axis=1) < step_tol
            state.theta[rows[last]] = _bounded(state.theta[rows[last]] + step[last])
            converged[rows[last]] = True
            rows, step, fixed = rows[~last], step[~last], fixed[~last]
            if rows.size == 0:
                break
        here, sub_counts = state.take(rows), counts[rows]
        found = _line_search(patterns, sub_counts, here, step, quad)
        if free[2]:
            _long_log_sd_steps(patterns, sub_counts, here, step, fixed, quad, found)
        moved = np.max(np.abs(found.theta - here.theta), axis=1)
        state.put(rows, found)
        g_free = np.where(fixed, 0.0, found.grad)
        converged[rows] = (moved < step_tol) | (np.max(np.abs(g_free), axis=1) < grad_tol)
        if converged.all():
            break
    return state.theta, state.ll, state.hess, converged, iterations


def maximise_staged(patterns: Patterns, counts: np.ndarray, start: np.ndarray, nodes: int, free: np.ndarray,
                    final_evaluation: bool = True):
    """Maximise the K-node likelihood, first getting close with a cheaper 30-node rule.

    The answer is the maximum of the K-node likelihood (the second stage runs to convergence with
    K nodes); the coarse stage only supplies a starting point, which saves most K-node evaluations.
    """
    if nodes > COARSE_NODES:
        start, _, _, _, _ = maximise(patterns, counts, start, Quadrature.of_size(COARSE_NODES), free,
                                     final_evaluation=False)
    return maximise(patterns, counts, start, Quadrature.of_size(nodes), free, final_evaluation=final_evaluation)
