"""BFCL multi-turn passes, the code every kind that serves them shares (grid, sweep, flag x order, remedy):
the protocol's common part and a pass's plan (`model`), one pass driven and gated (`one_pass`), passes run on
their servers as units with live verdicts (`drive`), and how Table III names a run's setting (`setting`)."""
