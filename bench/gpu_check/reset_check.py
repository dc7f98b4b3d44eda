"""The kit's restored-state control against a running llama-server, with the Python standard library only.

For machines where the kit's own dependencies cannot be installed (the lent GPU machine has no
network): each item's prompt is served in the kit's four phases, cold (cache_prompt false: a full
recompute), warm (cache_prompt true: served from the KV cache the cold request left), cold2, warm2,
with the kit's request fields (temperature 0, seed 42, top-5 probabilities, token ids returned).

Gates as the paper's control: a cold request shows at most --cold-max cached tokens (timings.cache_n),
a warm one more than 0. Must hold: cold and cold2 emit identical token ids. Reported, not required:
warm == warm2 and cold == warm (a tiny random model may or may not fork between the two paths).

    python3 bench/gpu_check/reset_check.py --url http://127.0.0.1:8080 --items 5 [--json OUT.json]

Exit 0 when every gate holds and every item's cold passes agree, 1 otherwise, 2 on bad input or an
unreachable server. The last line is the verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

SYSTEM_PROMPT = ("You are a helpful assistant. Solve the math problem step by step and end your response with "
                 "the final answer on its own line in the form #### <number>")
PHASES = (("cold", False), ("warm", True), ("cold2", False), ("warm2", True))


class Failed(Exception):
    """The server could not be reached or answered wrongly; one line."""


def post(url: str, path: str, body: dict, timeout: float) -> dict:
    request = urllib.request.Request(url.rstrip("/") + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise Failed(f"POST {path} answered HTTP {error.code}: {error.read()[:200]!r}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise Failed(f"POST {path} failed: {error}") from None


def get(url: str, path: str, timeout: float) -> dict:
    try:
        with urllib.request.urlopen(url.rstrip("/") + path, timeout=timeout) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise Failed(f"GET {path} failed: {error}") from None


def question(index: int) -> str:
    """Item `index`'s problem: fixed arithmetic, different per item so prompts differ."""
    a, b, c = 17 + 7 * index, 3 + index, 40 + 11 * index
    return f"A shop sells {a} apples in the morning and {b} times as many in the afternoon. Then {c} are returned. " \
           f"How many apples did the shop sell in total?"


def prompt_for(url: str, index: int, timeout: float) -> str:
    """The model's chat template applied by the server (as the kit does); the bare question if it has none."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question(index)}]
    try:
        return post(url, "/apply-template", {"messages": messages}, timeout)["prompt"]
    except (Failed, KeyError):
        return f"{SYSTEM_PROMPT}\n\nQuestion: {question(index)}\nAnswer:"


def complete(url: str, prompt: str, cache_prompt: bool, n_predict: int, timeout: float) -> dict:
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "seed": 42, "n_probs": 5,
            "return_tokens": True, "cache_prompt": cache_prompt}
    started = time.monotonic()
    answer = post(url, "/completion", body, timeout)
    timings = answer.get("timings") or {}
    if answer.get("tokens") is None or timings.get("cache_n") is None:
        raise Failed("the /completion answer lacks tokens or timings.cache_n (is this llama-server?)")
    return {"tokens": list(answer["tokens"]), "cache_n": timings["cache_n"], "prompt_n": timings.get("prompt_n"),
            "prompt_ms": timings.get("prompt_ms"), "predicted_n": timings.get("predicted_n"),
            "seconds": round(time.monotonic() - started, 3), "stop_type": answer.get("stop_type")}


def first_difference(a: list[int], b: list[int]) -> int | None:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def run_item(url: str, index: int, args: argparse.Namespace) -> dict:
    prompt = prompt_for(url, index, args.timeout)
    phases = {name: complete(url, prompt, cache, args.n_predict, args.timeout) for name, cache in PHASES}
    gates = []
    for name, _ in PHASES:
        cached = phases[name]["cache_n"]
        if name.startswith("cold") and cached > args.cold_max:
            gates.append(f"{name}: {cached} cached tokens > {args.cold_max}")
        if name.startswith("warm") and cached < 1:
            gates.append(f"{name}: 0 cached tokens, a warm request must hit the cache")
    cold, warm = phases["cold"]["tokens"], phases["warm"]["tokens"]
    return {"item": index, "phases": phases, "gate_violations": gates,
            "cold_reproduces": cold == phases["cold2"]["tokens"],
            "warm_reproduces": warm == phases["warm2"]["tokens"],
            "paths_identical": cold == warm, "first_difference": first_difference(cold, warm)}


def summary(items: list[dict]) -> dict:
    def cached(kind: str) -> list[int]:
        return [i["phases"][p]["cache_n"] for i in items for p in i["phases"] if p.startswith(kind)]

    return {"items": len(items),
            "gate_violations": sum(len(i["gate_violations"]) for i in items),
            "cold_reproduces": sum(i["cold_reproduces"] for i in items),
            "warm_reproduces": sum(i["warm_reproduces"] for i in items),
            "paths_identical": sum(i["paths_identical"] for i in items),
            "cold_cached_max": max(cached("cold")), "warm_cached_min": min(cached("warm")),
            "tokens_per_answer": sorted({len(i["phases"]["cold"]["tokens"]) for i in items})}


def positive(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reset_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="llama-server base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("--items", type=positive, default=5, help="items (prompts) to serve (default: %(default)s)")
    parser.add_argument("--n-predict", type=positive, default=48, help="tokens per answer (default: %(default)s)")
    parser.add_argument("--cold-max", type=int, default=8, help="cached tokens a cold request may show "
                        "(default: %(default)s, the paper's gate)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default: %(default)s)")
    parser.add_argument("--json", metavar="FILE", help="write every request's numbers and the summary here")
    args = parser.parse_args(argv)
    try:
        props = get(args.url, "/props", args.timeout)
        print(f"server: build {props.get('build_info')}, model {props.get('model_path')}, "
              f"slots {props.get('total_slots')}")
        items = []
        for index in range(args.items):
            item = run_item(args.url, index, args)
            items.append(item)
            p = item["phases"]
            print(f"item {index}: cached cold/warm/cold2/warm2 = "
                  f"{'/'.join(str(p[name]['cache_n']) for name, _ in PHASES)}, prompt {p['cold']['prompt_n']} tokens, "
                  f"{len(p['cold']['tokens'])} tokens out; cold==cold2 {item['cold_reproduces']}, "
                  f"warm==warm2 {item['warm_reproduces']}, cold==warm {item['paths_identical']}"
                  + (f" (first difference at token {item['first_difference']})" if not item["paths_identical"] else "")
                  + (f"; GATE: {'; '.join(item['gate_violations'])}" if item["gate_violations"] else ""))
    except Failed as error:
        print(f"reset_check.py: {error}", file=sys.stderr)
        return 2
    result = summary(items)
    ok = result["gate_violations"] == 0 and result["cold_reproduces"] == len(items)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"props_build_info": props.get("build_info"), "summary": result, "items": items}, handle,
                      indent=1)
    n = len(items)
    print(f"{'PASS' if ok else 'FAIL'} reset: {n} items; gate violations {result['gate_violations']} "
          f"(cold cached max {result['cold_cached_max']} <= {args.cold_max}, warm cached min "
          f"{result['warm_cached_min']} > 0); cold==cold2 {result['cold_reproduces']}/{n}; "
          f"warm==warm2 {result['warm_reproduces']}/{n}; cold==warm {result['paths_identical']}/{n} (reported)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
