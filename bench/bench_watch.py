"""What `kit watch` adds per request: latency through the proxy against direct calls to the same upstream,
side by side in one run, unstreamed and streamed, p50 and p99.

Two upstreams, each measured the same way:
- `engine`: the real embedded llama-server with the default model (SmolLM2), asked for one token of a short
  prompt the cache already holds, so the engine's own time is small and steady;
- `stub`: a Starlette app answering a recorded llama-server answer at once (one JSON body, or 32 server-sent
  events), which leaves only the proxy's own cost (and the client's) in the difference.

The proxy runs as `kit watch --quiet` in a process of its own (recording into a temporary run folder, as in
use); the client sends direct and proxied calls alternately (one of each, `--calls` times per mode, each arm
first in turn: with a fixed order the arm after the direct call measured about 0.15 ms less than the next one
at the same code), so both arms see the same load. With `--baseline-ref REF` a second proxy runs the kit as committed at REF (a
`git archive` of it in a temporary folder) beside this tree's, and its calls are interleaved with the others
(direct, this tree, REF, in turn): before and after, side by side under the same load. Prints p50 and p99 of
each arm, each proxy's added p50 and p99 (proxied minus direct), the CPU time its process spent per call
(steadier than wall time on a loaded machine) and the load average; target (issue 40): at most 0.5 ms added
at p50 and 1 ms of the proxy's CPU per call on the stub, streamed or not.

    PYTHONPATH=. python bench/bench_watch.py [--calls 200] [--upstream engine,stub] [--baseline-ref main]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parents[1]
ANSWER = {"index": 0, "content": " Paris", "tokens": [], "id_slot": 0, "stop": True, "model": "stub",
          "tokens_predicted": 1, "tokens_evaluated": 6, "stop_type": "limit", "stopping_word": "", "tokens_cached": 6,
          "timings": {"cache_n": 5, "prompt_n": 1, "prompt_ms": 11.2, "predicted_n": 1, "predicted_ms": 0.1}}
EVENTS = 32


def stub_app():  # an upstream that answers at once: the proxy's own cost is what is left
    from starlette.applications import Starlette  # noqa: PLC0415
    from starlette.responses import JSONResponse, StreamingResponse  # noqa: PLC0415
    from starlette.routing import Route  # noqa: PLC0415

    async def completion(request):
        body = await request.json()
        if not body.get("stream"):
            return JSONResponse(ANSWER)

        async def events():
            for n in range(EVENTS):
                last = n == EVENTS - 1
                event = {**ANSWER, "content": f" w{n}", "stop": last} if last else {"content": f" w{n}", "stop": False}
                yield b"data: " + json.dumps(event).encode() + b"\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    async def props(_request):
        return JSONResponse({"build_info": "stub"})

    return Starlette(routes=[Route("/completion", completion, methods=["POST"]), Route("/props", props)])


def wait_for(url: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up in {seconds:.0f} s")


def free_port() -> int:
    from kit.launch.native import free_port as port  # noqa: PLC0415

    return port()


def start_stub() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve-stub", str(port)], cwd=HERE)
    url = f"http://127.0.0.1:{port}"
    wait_for(url + "/props")
    return proc, url


def baseline_tree(ref: str, into: Path, paths: tuple[str, ...] = ("kit",)) -> str:
    """The PYTHONPATH of the kit as committed at `ref` (its `paths` and pyproject.toml), unpacked under `into`
    (SystemExit naming the ref if git cannot), with its own dependencies' event loop: where its pyproject.toml
    does not list uvloop (which uvicorn uses whenever it is installed), a shadow package makes `import uvloop`
    fail, as it did there."""
    tree = into / "baseline"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", ref, *paths, "pyproject.toml"], cwd=HERE,
                             capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"kit: error: --baseline-ref {ref}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    if "uvloop" in (tree / "pyproject.toml").read_text():
        return str(tree)
    (into / "no-uvloop" / "uvloop").mkdir(parents=True)
    (into / "no-uvloop" / "uvloop" / "__init__.py").write_text("raise ImportError('not a dependency at the ref')\n")
    return f"{tree}{os.pathsep}{into / 'no-uvloop'}"


def start_proxy(upstream: str, out: Path, path: str = str(HERE)) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kit.cli", "watch", "--upstream", upstream, "--listen",
                             f"127.0.0.1:{port}", "--quiet", "--out", str(out)], cwd=path.split(os.pathsep)[0],
                            stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": path})
    url = f"http://127.0.0.1:{port}"
    wait_for(url + "/metrics")
    return proc, url


def timed(client: httpx.Client, url: str, body: dict, stream: bool) -> float:
    """Milliseconds of one call. llama-server closes a kept-alive connection some 20-100 ms after a streamed
    answer without saying so (docs/watch.md), so a direct call sent on it meanwhile gets no answer: it is sent
    again once, on a new connection, and only that call timed (the proxy does the same upstream, unseen)."""
    for again in (False, True):
        started = time.perf_counter()
        try:
            if stream:
                with client.stream("POST", url + "/completion", json={**body, "stream": True}) as answer:
                    for _ in answer.iter_raw():
                        pass
            else:
                client.post(url + "/completion", json=body).raise_for_status()
        except httpx.RemoteProtocolError:
            if again:
                raise
            continue
        return (time.perf_counter() - started) * 1000
    raise AssertionError("unreachable")


def cpu_seconds(pid: int) -> float:
    """CPU seconds a process has used (Linux /proc): under load, steadier than wall time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def quantiles(ms: list[float]) -> tuple[float, float]:
    ordered = sorted(ms)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def measure(name: str, upstream: str, proxies: dict[str, tuple[str, int]], calls: int, body: dict) -> list[str]:
    """Each proxy's added latency and CPU per call, its calls interleaved with direct ones (`proxies`: label
    -> (URL, pid))."""
    rows = []
    urls = {"direct": upstream, **{label: url for label, (url, _) in proxies.items()}}
    with httpx.Client(timeout=120) as client:
        for stream in (False, True):
            for url in urls.values():  # warm every path: connections, the engine's cache
                for _ in range(5):
                    timed(client, url, body, stream)
            times: dict[str, list[float]] = {label: [] for label in urls}
            cpu = {label: cpu_seconds(pid) for label, (_, pid) in proxies.items()}
            arms = list(urls.items())
            for n in range(calls):  # each arm first, second, ... in turn: none gains from its place in a round
                for label, url in arms[n % len(arms):] + arms[:n % len(arms)]:
                    times[label].append(timed(client, url, body, stream))
            d50, d99 = quantiles(times["direct"])
            for label, (_, pid) in proxies.items():
                used = (cpu_seconds(pid) - cpu[label]) / calls * 1000
                p50, p99 = quantiles(times[label])
                rows.append(f"{name:<7} {'stream' if stream else 'json':<7} {label:<9} {calls:>5}  direct p50 {d50:7.2f}"
                            f" p99 {d99:7.2f}  proxied p50 {p50:7.2f} p99 {p99:7.2f}  added p50 {p50 - d50:+6.2f} p99 "
                            f"{p99 - d99:+7.2f}  proxy CPU/call {used:5.2f} ms")
                print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per arm and mode")
    parser.add_argument("--upstream", default="engine,stub", help="which upstreams: engine, stub or both")
    parser.add_argument("--baseline-ref", help="also measure the kit as committed at this git ref, interleaved")
    parser.add_argument("--serve-stub", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_stub:
        import uvicorn  # noqa: PLC0415

        uvicorn.run(stub_app(), host="127.0.0.1", port=args.serve_stub, log_level="warning", access_log=False)
        return
    print(f"kit watch overhead, {args.calls} calls per arm and mode, ms (CPUs: {os.cpu_count()}, load average "
          f"{' '.join(f'{load:.2f}' for load in os.getloadavg())})")
    with tempfile.TemporaryDirectory(prefix="kit-bench-watch-") as tmp:
        baseline = baseline_tree(args.baseline_ref, Path(tmp)) if args.baseline_ref else None
        for name in args.upstream.split(","):
            if name == "stub":
                server, upstream = start_stub()
                stop = server.terminate
            else:
                from kit.launch.llamacpp import embedded  # noqa: PLC0415
                from kit.launch.native import NativeServer, ServerSpec  # noqa: PLC0415
                from kit.models import DEFAULT_MODEL, ensure_model  # noqa: PLC0415

                binary = embedded.locate("auto", build_if_needed=True)
                native = NativeServer(ServerSpec(binary=binary.binary, model=ensure_model(DEFAULT_MODEL).path,
                                                 ctx_size=2048, threads=os.cpu_count() or 2, env=binary.env),
                                      Path(tmp) / "server.log").start()
                upstream, stop = native.url, native.stop
            started = [("this tree", *start_proxy(upstream, Path(tmp) / name))]
            if baseline is not None:
                started.append((args.baseline_ref, *start_proxy(upstream, Path(tmp) / f"{name}-baseline", baseline)))
            try:
                measure(name, upstream, {label: (url, proc.pid) for label, proc, url in started}, args.calls,
                        {"prompt": "The capital of France is", "n_predict": 1, "temperature": 0})
            finally:
                for _, proc, _ in started:
                    proc.send_signal(2)
                    proc.wait(30)
                stop()
        print(f"load average at the end {' '.join(f'{load:.2f}' for load in os.getloadavg())}")


if __name__ == "__main__":
    main()
