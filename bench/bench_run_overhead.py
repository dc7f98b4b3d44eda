"""The kit's own cost on a short run: `kit run reset` against a real embedded llama-server, side by side
with a bare httpx loop sending the same requests to the same server.

One llama-server is started (the embedded one, SmolLM2-135M-Instruct Q4_1, `--cache-ram 0` as
protocols/reset.yaml has it). A first, untimed `kit run reset --items N --sessions 1 --engine-url URL`
records the requests the kit sends (endpoint and exact JSON body, in order, from its records). Then
pairs are timed, interleaved (kit, bare, then bare, kit, ...: both see the same load): each side is a
whole process from start to exit, the kit's CLI run with its imports, checks, gates, durable records
and final table, and the bare loop (`--bare`), which imports httpx and POSTs the same bodies in the same
order, reading each answer. Prints each pair (wall and CPU seconds of each side, and the load average) and
the median of the per-pair ratios (kit / bare). With `--baseline-ref REF` the kit as committed at REF (a `git
archive` of it, bench_watch.baseline_tree) is a third side of each round, timed in turn with the others (each
side first in turn): before and after, side by side under the same load, with the median of the per-round
ratios this tree / REF. The kits' bytecode is written first (`compile_bytecode`), as an installed kit has it.

    PYTHONPATH=. python bench/bench_run_overhead.py [--items 5] [--pairs 3] [--max-tokens N] [--baseline-ref main]

Target (issue 40): the median ratio at most 1.02.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def bare(url: str, requests_file: Path) -> None:
    """POST each recorded request (endpoint, body) to `url` in order and read its answer."""
    import httpx  # noqa: PLC0415 - the bare side's only import, timed with it

    sent = json.loads(requests_file.read_text())
    with httpx.Client(base_url=url, timeout=600) as client:
        for endpoint, body in sent:
            answer = client.post(endpoint, json=body)
            answer.raise_for_status()
            answer.json()


def compile_bytecode(package: Path) -> None:
    """Write the package's bytecode (__pycache__) once, as `pip install` does: with PYTHONDONTWRITEBYTECODE set
    (as in some shells and CI images) every timed kit process would otherwise compile its ~100 modules from
    source, a cost no installed kit pays and the bare side (httpx, installed) does not pay either."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True, capture_output=True)


def timed(argv: list[str], path: str = str(HERE)) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one side's process (`path`: its PYTHONPATH, whose first folder it runs in:
    `python -m` puts the working folder first on sys.path, so a baseline run from this tree's folder would
    import this tree's kit, not the baseline's). Its CPU seconds are the client's own work, which the server's
    load does not stretch: on a loaded machine their difference still shows the kit's cost."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   env={**os.environ, "PYTHONPATH": path}, cwd=path.split(os.pathsep)[0])
    wall, after = time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime


def kit_run(url: str, items: int, out: Path, max_tokens: int | None) -> list[str]:
    return [sys.executable, "-m", "kit.cli", "run", "reset", "--items", str(items), "--sessions", "1",
            "--engine-url", url, "--out", str(out), *(["--max-tokens", str(max_tokens)] if max_tokens else [])]


def recorded_requests(out: Path) -> list[tuple[str, dict]]:
    """(endpoint, body) of every request record of the one-session run under `out`, in the order sent (seq)."""
    from kit.record.files import read_records  # noqa: PLC0415

    run_dir = next(p for p in out.iterdir() if (p / "manifest.json").is_file())
    return [(record["request"]["endpoint"], record["request"]["body"])
            for path in sorted((run_dir / "records").glob("*.jsonl"))
            for record in read_records(path, logprobs=False).records if record.get("request")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="tokens per answer (default: protocols/reset.yaml's); a short cap times more pairs")
    parser.add_argument("--baseline-ref", help="also time the kit as committed at this git ref, interleaved")
    parser.add_argument("--bare", nargs=2, metavar=("URL", "REQUESTS_JSON"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        bare(args.bare[0], Path(args.bare[1]))
        return
    # a SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so that the server below is stopped, not orphaned
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from kit.launch.llamacpp import embedded  # noqa: PLC0415
    from kit.launch.native import NativeServer, ServerSpec  # noqa: PLC0415
    from kit.models import DEFAULT_MODEL, ensure_model  # noqa: PLC0415

    compile_bytecode(HERE / "kit")
    found = embedded.locate(os.environ.get("KIT_CPU_BACKEND", "auto"), build_if_needed=True)
    spec = ServerSpec(binary=found.binary, model=ensure_model(DEFAULT_MODEL).path, ctx_size=4096, cache_ram=0,
                      threads=os.cpu_count() or 2, env=found.env)
    with tempfile.TemporaryDirectory() as tmp, NativeServer(spec, Path(tmp) / "server.log") as server:
        work = Path(tmp)
        paths = {"kit": str(HERE), "bare": str(HERE)}  # each side's PYTHONPATH
        if args.baseline_ref:
            from bench_watch import baseline_tree  # noqa: PLC0415 - this folder's

            paths[args.baseline_ref] = baseline_tree(args.baseline_ref, work, ("kit", "protocols"))
            compile_bytecode(Path(paths[args.baseline_ref].split(os.pathsep)[0]) / "kit")
        subprocess.run(kit_run(server.url, args.items, work / "first", args.max_tokens), check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(HERE)})
        sent = recorded_requests(work / "first")
        (work / "requests.json").write_text(json.dumps(sent))
        bare_argv = [sys.executable, str(Path(__file__).resolve()), "--bare", server.url, str(work / "requests.json")]
        pairs, cpu_pairs = [], []
        kits = [name for name in paths if name != "bare"]
        for pair in range(args.pairs):
            sides = {name: kit_run(server.url, args.items, work / f"{name}-{pair}", args.max_tokens) for name in kits}
            sides["bare"] = bare_argv
            order = ["kit", "bare", *kits[1:]]
            order = order[pair % len(order):] + order[:pair % len(order)]  # each side first in turn
            measured = {name: timed(sides[name], paths[name]) for name in order}
            times, cpus = ({name: m[i] for name, m in measured.items()} for i in (0, 1))
            pairs.append(times)
            cpu_pairs.append(cpus)
            print(json.dumps({"pair": pair + 1, **{f"{name}_s": round(times[name], 2) for name in order},
                              **{f"{name}_ratio": round(times[name] / times["bare"], 3) for name in kits},
                              **{f"{name}_cpu_s": round(cpus[name], 2) for name in order},
                              "load_average": os.getloadavg()[0]}), flush=True)
    summary = {"items": args.items, "max_tokens": args.max_tokens, "requests": len(sent), "pairs": len(pairs),
               "cpus": os.cpu_count()}
    for name in (*kits, "bare"):
        summary[f"{name}_median_s"] = round(statistics.median(p[name] for p in pairs), 2)
        summary[f"{name}_cpu_median_s"] = round(statistics.median(c[name] for c in cpu_pairs), 2)
    summary["median_ratio"] = round(statistics.median(p["kit"] / p["bare"] for p in pairs), 3)
    if args.baseline_ref:
        ref = args.baseline_ref
        summary[f"{ref}_median_ratio"] = round(statistics.median(p[ref] / p["bare"] for p in pairs), 3)
        summary[f"kit_over_{ref}_median"] = round(statistics.median(p["kit"] / p[ref] for p in pairs), 3)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
