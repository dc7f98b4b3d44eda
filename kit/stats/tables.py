"""Reshape long rows (one per episode and format) into the wide tables the tests take.

``permutation_trend_test`` and ``page_trend`` take an (episodes x formats) table and
``sweep_bootstrap`` / ``sweep_permutation_test`` a (histories x episodes x formats) cube.
"""

from __future__ import annotations

import numpy as np

from kit.stats.inputs import StatsInputError, same_length


def wide_table(episode, column, values, columns=None) -> tuple[np.ndarray, np.ndarray, list]:
    """(episodes x columns) float table of ``values``; NaN where a cell has no row.

    Returns the table, the sorted episode ids (rows) and the column labels (``columns`` order if
    given, else sorted). Two rows for the same cell are an error.
    """
    ep = np.asarray(episode)
    col = np.asarray(column)
    val = np.asarray(values, dtype=float)
    same_length(episode=ep, column=col, values=val)
    labels = list(columns) if columns is not None else sorted(set(col.tolist()))
    index = {c: i for i, c in enumerate(labels)}
    missing = set(col.tolist()) - set(index)
    if missing:
        raise StatsInputError(f"columns {sorted(map(str, missing))} are not in the column order",
                              "list every format in columns")
    episodes, row = np.unique(ep, return_inverse=True)
    cidx = np.array([index[c] for c in col.tolist()], dtype=int)
    hits = np.zeros((len(episodes), len(labels)), dtype=int)
    np.add.at(hits, (row, cidx), 1)
    if np.any(hits > 1):
        raise StatsInputError("more than one row for the same episode and format",
                              "aggregate repeated rows (e.g. sum over histories) before pivoting")
    table = np.full((len(episodes), len(labels)), np.nan)
    table[row, cidx] = val
    return table, episodes, labels


def divergence_cube(history, episode, column, values, columns=None):
    """(histories x episodes x columns) cube from long rows; every history must cover the same cells.

    Returns the cube, history ids, episode ids and column labels.
    """
    hist = np.asarray(history)
    ep = np.asarray(episode)
    same_length(history=hist, episode=ep)
    histories = np.unique(hist)
    tables = []
    labels: list = []
    episodes = None
    for h in histories:
        pick = hist == h
        table, eps, labels = wide_table(ep[pick], np.asarray(column)[pick], np.asarray(values)[pick], columns)
        if episodes is not None and not np.array_equal(eps, episodes):
            raise StatsInputError(f"history {h} covers different episodes than the others",
                                  "compare only episodes that every history ran")
        episodes = eps
        tables.append(table)
    cube = np.stack(tables)
    if np.isnan(cube).any():
        raise StatsInputError("some (history, episode, format) cells have no value",
                              "drop episodes that are missing a format in any history")
    return cube, histories, episodes, labels
