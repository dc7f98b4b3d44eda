"""One protocol run, start to finish: the runner, its preflight checks, lock, faults and GC pacing."""
