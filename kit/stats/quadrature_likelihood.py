"""Marginal likelihood of a random-intercept logistic model by adaptive Gauss–Hermite quadrature.

Model, for rows j of cluster (episode) i:  logit P(y_ij = 1 | u_i) = b0 + b1 * x_ij + u_i,
u_i ~ Normal(0, sd^2). Parameters are theta = (b0, b1, log sd).

Clusters with identical rows ("patterns") have identical likelihood contributions, so the data are
held as a small set of patterns, each with a count. Everything is batched over B datasets that share
the same patterns but differ in their counts, which is what a bootstrap over clusters produces.

Adaptive quadrature: for each pattern the integrand's mode u* (in u) is found by Newton's method and
its curvature gives the scale s = (-h''(u*))^(-1/2); the K Gauss–Hermite nodes t_k are placed at
u* + sqrt(2) s t_k. With K = 100 the result is the integral to near machine precision, so the
gradient and Hessian are computed as quadrature averages of the complete-data derivatives under
the normalised integrand (Louis' identity), holding the node placement fixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import expit

LOG_SD_MIN = -7.0
"""Lower bound for log sd: below this the random intercept is treated as absent (boundary fit)."""
LOG_SD_MAX = 6.0


@dataclass(frozen=True)
class Patterns:
    """Distinct cluster patterns: padded rows x, y and a 0/1 mask, each of shape (P, M)."""

    x: np.ndarray
    y: np.ndarray
    mask: np.ndarray


@dataclass(frozen=True)
class Quadrature:
    """Gauss–Hermite nodes t and log(weight * exp(t^2)) for K nodes."""

    nodes: np.ndarray
    log_weights: np.ndarray

    @classmethod
    def of_size(cls, k: int) -> "Quadrature":
        return _gauss_hermite(int(k))


@lru_cache(maxsize=8)
def _gauss_hermite(k: int) -> Quadrature:
    """Nodes and weights are a pure function of K; cached because hermgauss(100) is slow-ish."""
    t, w = np.polynomial.hermite.hermgauss(k)
    t.setflags(write=False)
    log_w = np.log(w) + t * t
    log_w.setflags(write=False)
    return Quadrature(t, log_w)


def find_modes(patterns: Patterns, theta: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mode u* (B, P) of each pattern's integrand and the scale s (B, P) from its curvature."""
    b0, b1, sd = theta[:, 0], theta[:, 1], np.exp(theta[:, 2])
    eta0 = b0[:, None, None] + b1[:, None, None] * patterns.x[None]  # (B, P, M)
    prec = (1.0 / sd**2)[:, None]
    u = start.copy()
    for _ in range(100):
        p = expit(eta0 + u[:, :, None])
        grad = np.sum(patterns.mask * (patterns.y - p), axis=2) - u * prec
        curv = np.sum(patterns.mask * p * (1 - p), axis=2) + prec
        step = np.clip(grad / curv, -4.0, 4.0)
        u = u + step
        if np.max(np.abs(step)) < 1e-9:
            break
    p = expit(eta0 + u[:, :, None])
    curv = np.sum(patterns.mask * p * (1 - p), axis=2) + prec
    return u, 1.0 / np.sqrt(curv)


def _logsumexp_last(a: np.ndarray) -> np.ndarray:
    top = np.max(a, axis=-1, keepdims=True)
    shifted = np.subtract(a, top)
    return top[..., 0] + np.log(np.sum(np.exp(shifted, out=shifted), axis=-1))


SAFE_ETA = 100.0
"""Above this |linear predictor| the fast product form could overflow; the stable form is used instead."""


def logistic_terms(lin: np.ndarray, u: np.ndarray, mask: np.ndarray, derivatives: bool):
    """sum over rows of log(1 + e^eta) (B, P, K) and, if asked, p = expit(eta) (B, P, M, K).

    eta = lin (B, P, M) + u (B, P, K). exp(eta) = exp(lin) * exp(u), and the row sum of logs is the
    log of a row product, so no transcendental function is evaluated on the 4-D array (these
    dominate the run time). When |eta| could exceed SAFE_ETA the numerically stable form is used.
    """
    bound = np.max(np.abs(lin)) + np.max(np.abs(u))
    if bound <= SAFE_ETA:
        odds = (np.exp(lin) * mask)[:, :, :, None] * np.exp(u)[:, :, None, :]
        one_plus = odds + 1.0
        total = np.log(np.prod(one_plus, axis=2))
        return total, (np.divide(odds, one_plus, out=odds) if derivatives else None)
    eta = lin[:, :, :, None] + u[:, :, None, :]
    small = np.exp(-np.abs(eta))
    total = np.einsum("pm,bpmk->bpk", mask, np.maximum(eta, 0.0) + np.log1p(small))
    prob = np.where(eta >= 0, 1.0, small) / (1.0 + small) if derivatives else None
    return total, prob


def evaluate(patterns: Patterns, counts: np.ndarray, theta: np.ndarray, quad: Quadrature,
             modes: np.ndarray, derivatives: bool = True):
    """Log-likelihood (B,), and if asked its gradient (B, 3) and Hessian (B, 3, 3), plus new modes.

    ``counts`` (B, P) are pattern multiplicities; ``modes`` (B, P) warm-start the mode search.
    """
    u_star, scale = find_modes(patterns, theta, modes)
    b0, b1, log_sd = theta[:, 0], theta[:, 1], theta[:, 2]
    var = np.exp(2 * log_sd)[:, None, None]
    u = np.sqrt(2.0) * scale[:, :, None] * quad.nodes  # (B, P, K)
    u += u_star[:, :, None]
    lin = b0[:, None, None] + b1[:, None, None] * patterns.x[None]  # (B, P, M)
    log_partition_sum, prob = logistic_terms(lin, u, patterns.mask, derivatives)
    mask, x, y = patterns.mask, patterns.x, patterns.y
    y_total = np.sum(mask * y, axis=1)  # (P,)
    # sum_m y*eta = sum_m y*lin + u * sum_m y  (linear in u, no need for the 4-D array)
    y_lin = np.sum(mask * y * lin, axis=2)  # (B, P)
    # The (B, P, K) and (B, P, M, K) arrays below are worked out in place, each operation the one the plain
    # expression would do on the same operands (addition and multiplication swap operands exactly): the
    # same numbers with fewer arrays made and filled.
    log_terms = u * y_total[None, :, None]  # the log-likelihood of each row, then of each node
    log_terms += y_lin[:, :, None]
    log_terms -= log_partition_sum
    u2 = u * u
    u2 /= var
    scratch = 0.5 * u2
    log_terms -= scratch
    log_terms -= log_sd[:, None, None]
    log_terms -= 0.5 * np.log(2 * np.pi)
    log_terms += quad.log_weights
    log_terms += np.log(np.sqrt(2.0) * scale)[:, :, None]
    log_lik_pattern = _logsumexp_last(log_terms)  # (B, P)
    log_lik = counts_dot(counts, log_lik_pattern)
    if not derivatives:
        return log_lik, None, None, u_star
    log_terms -= log_lik_pattern[:, :, None]
    post = np.exp(log_terms, out=log_terms)  # normalised weights over nodes
    info = np.subtract(1.0, prob)
    info *= prob
    mx, mxx = mask * x, mask * x * x
    s0 = np.einsum("pm,bpmk->bpk", mask, prob)
    s1 = np.einsum("pm,bpmk->bpk", mx, prob)
    s = (np.subtract(y_total[None, :, None], s0, out=s0), np.subtract(np.sum(mx * y, axis=1)[None, :, None], s1, out=s1),
         u2 - 1.0)  # complete-data scores (B, P, K)
    h_complete = {(0, 0): np.negative(np.einsum("pm,bpmk->bpk", mask, info)),
                  (0, 1): np.negative(np.einsum("pm,bpmk->bpk", mx, info)),
                  (1, 1): np.negative(np.einsum("pm,bpmk->bpk", mxx, info)), (0, 2): 0.0, (1, 2): 0.0,
                  (2, 2): -2.0 * u2}
    mean_s = [np.sum(np.multiply(post, si, out=scratch), axis=2) for si in s]  # (B, P) each
    grad = np.stack([counts_dot(counts, m) for m in mean_s], axis=1)
    hess = np.empty((theta.shape[0], 3, 3))
    for (i, j), hc in h_complete.items():
        np.multiply(s[i], s[j], out=scratch)
        scratch += hc
        scratch *= post
        e = np.sum(scratch, axis=2) - mean_s[i] * mean_s[j]
        hess[:, i, j] = hess[:, j, i] = counts_dot(counts, e)
    return log_lik, grad, hess, u_star


def counts_dot(counts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Sum over patterns weighted by their counts: (B, P) x (B, P) -> (B,)."""
    return np.einsum("bp,bp->b", counts, values)
