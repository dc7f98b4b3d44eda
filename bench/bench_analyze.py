"""Time `kit analyze` end to end on paper-scale synthetic records, with the paper's replicate counts.

Generates the records first unless they exist (bench/synthetic_records.py: the full grid, an
11-history x 4-format sweep with top-5 log-probabilities, the reset control and the GSM8K bridge),
then runs `kit analyze` on all of them in a subprocess and prints the wall time, the size of the
records read, and the per-step times from findings.json (the slowest first).

    PYTHONPATH=. python bench/bench_analyze.py [--data /tmp/kit-bench-records] [--out DIR]

Side by side with an earlier release (`--baseline-ref REF`, e.g. edcf597, main's tip before the
read path was reworked): a detached `git worktree` of REF is made under the output folder, and both
trees analyse the same records in turn (baseline, this tree, this tree, baseline, ...: both see the same
load), `--repeats` times each. Prints min and median wall seconds of each and the ratio of the medians
(this tree / baseline), and checks that both wrote the same outputs: findings.json (less its creation
time, step timings and output folder), every table and every figure's data (not the images, which carry
their creation time), byte for byte.

    PYTHONPATH=. python bench/bench_analyze.py --baseline-ref edcf597 --repeats 3

Step by step in CPU seconds (`--cpu-steps`, with or without `--baseline-ref`): each tree analyses the records
in one process (`--workers 1`) with the step timer counting that process's CPU time instead of the clock, so
that other work on the machine does not inflate the steps; prints each step's median CPU seconds (baseline
beside this tree) and the load average. The steps' wall seconds of a parallel run overlap and stretch under
load; these add up to the analysis's CPU time.

    PYTHONPATH=. python bench/bench_analyze.py --baseline-ref main --cpu-steps --repeats 2

Target: under 15 s on 2 cores (the release before this one: about 57 s).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_run_overhead import compile_bytecode  # this folder's: each tree's bytecode, as installed kits have it

HERE = Path(__file__).resolve().parents[1]
VOLATILE = ("created", "timings_seconds")  # findings.json keys that differ between any two runs


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.jsonl"))


def cpu_of_children() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def analyze(root: Path, data: Path, out: Path) -> tuple[float, float, subprocess.CompletedProcess]:
    """One `kit analyze` of every part of `data` with the kit of tree `root`: (wall seconds, CPU seconds of
    it and its worker processes, the process). Under load from other work the CPU seconds vary less."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    parts = [str(data / p) for p in ("grid", "sweep", "reset", "bridge")]
    cpu, started = cpu_of_children(), time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "kit.cli", "analyze", *parts, "--out", str(out)], env=env,
                          cwd=root, capture_output=True, text=True, check=False)
    return time.monotonic() - started, cpu_of_children() - cpu, proc


# One analysis in one process with the step timer (kit.analysis.findings.Timer) on this process's CPU clock: with
# one worker every step runs here, so each step's figure is its CPU seconds. Prints one JSON line.
CPU_STEPS = """
import json, resource, sys, time
from pathlib import Path
time.perf_counter = time.process_time
started = time.process_time()
from kit.analysis import findings
imported = time.process_time() - started
data = Path(sys.argv[1])
result = findings.analyze([data / p for p in ("grid", "sweep", "reset", "bridge")], Path(sys.argv[2]),
                          findings.Settings(workers=1))
used = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"import kit.analysis": round(imported, 3), **result.timings_seconds,
                  "total CPU of the process": round(used.ru_utime + used.ru_stime, 3)}))
"""


def cpu_steps(root: Path, data: Path, out: Path) -> dict[str, float]:
    """CPU seconds per step of one single-process analysis with the kit of tree `root` (CPU_STEPS)."""
    proc = subprocess.run([sys.executable, "-c", CPU_STEPS, str(data), str(out)], cwd=root, capture_output=True,
                          text=True, check=False, env={**os.environ, "PYTHONPATH": str(root)})
    if proc.returncode != 0:
        raise SystemExit(f"{root}: the single-process analysis exited {proc.returncode}\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def steps_side_by_side(trees: dict[str, Path], data: Path, work: Path, repeats: int) -> None:
    """Each tree's CPU seconds per step (`cpu_steps`), the trees in turn `repeats` times; prints the medians."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    loads = []
    for repeat in range(repeats):
        for name in (list(trees) if repeat % 2 == 0 else list(trees)[::-1]):
            runs[name].append(cpu_steps(trees[name], data, work / f"cpu-{name.replace(' ', '-')}"))
            loads.append(os.getloadavg()[0])
    medians = {name: {step: round(statistics.median(r.get(step, 0.0) for r in found), 2)
                      for step in dict.fromkeys(k for r in found for k in r)} for name, found in runs.items()}
    names = list(trees)
    steps = sorted(dict.fromkeys(k for m in medians.values() for k in m), key=lambda k: -medians[names[-1]].get(k, 0))
    print(f"CPU seconds per step, median of {repeats} (one process each; load average 1 min "
          f"{min(loads):.1f}-{max(loads):.1f})")
    print(f"{'step':72s}" + "".join(f"{name:>12s}" for name in names))
    for step in steps:
        print(f"{step[:72]:72s}" + "".join(f"{medians[name].get(step, float('nan')):12.2f}" for name in names))


def outputs(out: Path) -> dict[str, bytes]:
    """Every file `kit analyze` wrote under `out`, findings.json less what differs between any two runs
    (its creation time, step timings, and the output folder's own name)."""
    found = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.name == "findings.json":
            findings = {k: v for k, v in json.loads(data).items() if k not in VOLATILE}
            data = json.dumps(findings, sort_keys=True).replace(str(out), "OUT").encode()
        elif path.suffix in (".png", ".pdf"):
            continue  # images carry their creation time; the data beside each figure is compared
        found[str(path.relative_to(out))] = data
    return found


def baseline_tree(ref: str, where: Path) -> Path:
    """A detached worktree of `ref` (made once, reused while it is at that commit)."""
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--verify", f"{ref}^{{commit}}"], check=True,
                            capture_output=True, text=True).stdout.strip()
    tree = where / f"baseline-{commit[:10]}"
    if not (tree / "kit").is_dir():
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", str(tree), commit], check=True,
                       capture_output=True)
    return tree


def single(args: argparse.Namespace) -> None:
    out = args.out or args.data / "analysis"
    wall, cpu, proc = analyze(HERE, args.data, out)
    print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
    findings = json.loads((out / "findings.json").read_text())
    steps = sorted(findings["timings_seconds"].items(), key=lambda kv: -kv[1])
    print(json.dumps({"exit": proc.returncode, "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
                      "cpus": os.cpu_count(),
                      "records_gb": round(folder_bytes(args.data) / 1e9, 2), "runs": len(findings["runs"]),
                      "settings": findings["settings"], "slowest_step": steps[0][0] if steps else None,
                      "steps_seconds": dict(steps)}, indent=1))


def side_by_side(args: argparse.Namespace) -> int:
    work = args.out or args.data.parent / "kit-bench-analyze"
    work.mkdir(parents=True, exist_ok=True)
    trees = {"baseline": baseline_tree(args.baseline_ref, work), "this tree": HERE}
    for tree in trees.values():
        compile_bytecode(tree / "kit")
    walls: dict[str, list[float]] = {name: [] for name in trees}
    cpus: dict[str, list[float]] = {name: [] for name in trees}
    for repeat in range(args.repeats):
        names = list(trees) if repeat % 2 == 0 else list(trees)[::-1]
        for name in names:
            out = work / ("out-baseline" if name == "baseline" else "out-this")
            wall, cpu, proc = analyze(trees[name], args.data, out)
            if proc.returncode != 0:
                print(f"{name}: kit analyze exited {proc.returncode}\n{proc.stderr[-2000:]}", file=sys.stderr)
                return 1
            walls[name].append(wall)
            cpus[name].append(cpu)
            steps = json.loads((out / "findings.json").read_text())["timings_seconds"]
            top = sorted(steps.items(), key=lambda kv: -kv[1])[:3]
            print(json.dumps({"repeat": repeat + 1, "tree": name, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                              "load_1min": round(os.getloadavg()[0], 2),  # other work on the machine meanwhile
                              "slowest_steps": {k: v for k, v in top}}), flush=True)
    base, this = outputs(work / "out-baseline"), outputs(work / "out-this")
    differ = sorted(k for k in base.keys() | this.keys() if base.get(k) != this.get(k))
    summary = {name: {"min_s": round(min(w), 2), "median_s": round(statistics.median(w), 2),
                      "cpu_median_s": round(statistics.median(cpus[name]), 2), "runs": len(w)}
               for name, w in walls.items()}
    print(json.dumps({"baseline_ref": args.baseline_ref, "baseline_tree": str(trees["baseline"]),
                      "cpus": os.cpu_count(), "records_gb": round(folder_bytes(args.data) / 1e9, 2), **summary,
                      "ratio_of_medians": round(summary["this tree"]["median_s"] / summary["baseline"]["median_s"], 3),
                      "cpu_ratio_of_medians": round(summary["this tree"]["cpu_median_s"]
                                                    / summary["baseline"]["cpu_median_s"], 3),
                      "outputs_compared": len(base), "outputs_differ": differ}, indent=1))
    return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/tmp/kit-bench-records"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--baseline-ref", default=None,
                        help="a git ref to time side by side with this tree (e.g. edcf597)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each tree with --baseline-ref")
    parser.add_argument("--cpu-steps", action="store_true",
                        help="CPU seconds per step, each analysis in one process (beside --baseline-ref's if given)")
    args = parser.parse_args()
    if not (args.data / "sweep").is_dir():
        started = time.monotonic()
        subprocess.run([sys.executable, str(Path(__file__).with_name("synthetic_records.py")), str(args.data)],
                       check=True, env={**os.environ, "PYTHONPATH": str(HERE)})
        print(f"generated records in {time.monotonic() - started:.0f} s")
    if args.cpu_steps:
        work = args.out or args.data.parent / "kit-bench-analyze"
        work.mkdir(parents=True, exist_ok=True)
        trees = {"baseline": baseline_tree(args.baseline_ref, work)} if args.baseline_ref else {}
        trees["this tree"] = HERE
        for tree in trees.values():
            compile_bytecode(tree / "kit")
        steps_side_by_side(trees, args.data, work, args.repeats)
        return
    if args.baseline_ref:
        sys.exit(side_by_side(args))
    single(args)


if __name__ == "__main__":
    main()
