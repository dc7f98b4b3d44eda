"""During a run the collector's young threshold is raised; afterwards the earlier setting is back."""

import gc

from kit.run.gc_pacing import RUN_THRESHOLD, fewer_collections


def test_the_threshold_is_raised_for_the_block_and_restored_after_it():
    before = gc.get_threshold()
    try:
        with fewer_collections():
            assert gc.get_threshold() == (max(RUN_THRESHOLD, before[0]), *before[1:])
            raise RuntimeError("the run failed")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before
