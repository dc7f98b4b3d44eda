"""Long-to-wide reshaping for the table-based tests."""

import numpy as np
import pytest

from kit.stats import StatsInputError, divergence_cube, wide_table


def test_wide_table_places_values_and_marks_gaps():
    table, eps, labels = wide_table([5, 5, 7, 7, 7], ["Q8_0", "F16", "F16", "Q8_0", "Q4_K_M"], [1, 0, 1, 1, 0],
                                    columns=["F16", "Q8_0", "Q4_K_M"])
    assert list(eps) == [5, 7] and labels == ["F16", "Q8_0", "Q4_K_M"]
    np.testing.assert_array_equal(table, [[0, 1, np.nan], [1, 1, 0]])


def test_duplicates_and_unknown_columns_rejected():
    with pytest.raises(StatsInputError):
        wide_table([1, 1], ["F16", "F16"], [0, 1])
    with pytest.raises(StatsInputError):
        wide_table([1], ["BF16"], [0], columns=["F16"])


def test_cube_round_trip():
    rng = np.random.default_rng(0)
    cube = rng.integers(0, 2, (3, 5, 4))
    h, e, f = np.meshgrid(np.arange(3), np.arange(5), np.arange(4), indexing="ij")
    order = rng.permutation(cube.size)
    out, hs, eps, labels = divergence_cube(h.ravel()[order], e.ravel()[order], f.ravel()[order],
                                           cube.ravel()[order])
    np.testing.assert_array_equal(out, cube)
    with pytest.raises(StatsInputError):
        divergence_cube(h.ravel()[1:], e.ravel()[1:], f.ravel()[1:], cube.ravel()[1:])
