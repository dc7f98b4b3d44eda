"""`kit compare`: a run's findings side by side with the published values of the paper (seed 000),
with a verdict per value: consistent, inconsistent, underpowered, or not comparable (and why).

kit.compare.published loads the values (kit/compare/paper.yaml); kit.compare.run_rows reads a
findings.json into the same quantities; kit.compare.verdicts matches and judges them;
kit.compare.outputs writes the terminal table, compare-paper.md/.csv/.json.
"""
