"""Generated bad protocol files and option values (hypothesis): each ends in one line naming the key or
option, a non-zero exit, no traceback and an empty --out folder."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.core import limits
from kit.core.paths import protocols_dir
from tests.bounds.cli_probe import fill, places, run_kit, written

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# (base protocol, dotted key, lowest, highest, may be null)
NUMBERS = [
    ("demo", "seed", 0, limits.SEED_MAX, False), ("demo", "order_seed", 0, limits.SEED_MAX, False),
    ("demo", "engine.ctx_size", limits.CTX_MIN, limits.CTX_MAX, False),
    ("demo", "engine.cache_ram", 0, limits.CACHE_RAM_MAX, True),
    ("demo", "workload.items", 1, limits.ITEMS_MAX, False),
    ("demo", "workload.first_item", 0, limits.FIRST_ITEM_MAX, False),
    ("demo", "sessions", 1, limits.SESSIONS_MAX, False), ("demo", "max_tokens", 1, 2048, False),
    ("demo", "top_logprobs", 1, limits.TOP_LOGPROBS_MAX, False),
    ("demo", "gates.abort_after_items", 1, limits.ITEMS_MAX, False),
    ("grid-cpu", "workload.episodes", 1, limits.EPISODES_MAX, False),
    ("grid-cpu", "workload.max_tokens_cap", 1, limits.CTX_MAX, False),
    ("grid-cpu", "workload.max_requests_per_episode", 1, limits.REQUESTS_PER_EPISODE_MAX, True),
    ("grid-cpu", "gates.off_max_cached_tokens", 0, limits.CTX_MAX, False),
    ("sweep-cpu", "histories", 1, limits.HISTORIES_MAX, False),
    ("flag-order-cpu", "engine.ctx_size", limits.CTX_MIN, limits.CTX_MAX, False),
    ("pinning", "cycles", 1, limits.CALLS_MAX, False), ("pinning", "per_arm", 1, limits.CALLS_MAX, False),
    ("pinning", "regimes.steady", 0, limits.CALLS_MAX, False),
    ("pinning", "calibration.rounds", 1, limits.ROUNDS_MAX, False),
    ("pinning", "reuse_tolerance", 0, limits.CTX_MAX, False),
]

# (command line before the option, option, lowest, highest)
OPTIONS = [
    (["run", "demo"], "--items", 1, limits.ITEMS_MAX), (["run", "demo"], "--episodes", 1, limits.EPISODES_MAX),
    (["run", "demo"], "--sessions", 1, limits.SESSIONS_MAX), (["run", "demo"], "--histories", 1, limits.HISTORIES_MAX),
    (["run", "demo"], "--max-tokens", 1, 2048), (["run", "demo"], "--port", limits.PORT_MIN, limits.PORT_MAX),
    (["demo"], "--threads", 1, limits.THREADS_MAX), (["check"], "--cycles", 1, limits.CALLS_MAX),
    (["check"], "--per-arm", 1, limits.CALLS_MAX), (["check"], "--always-fresh", 0, limits.CALLS_MAX),
    (["check"], "--cache-ram", 0, limits.CACHE_RAM_MAX), (["check"], "--threads", 1, limits.THREADS_MAX),
    (["analyze", "{run_dir}"], "--workers", 0, limits.WORKERS_MAX),
    (["analyze", "{run_dir}"], "--block-replicates", 1, limits.REPLICATES_MAX),
]


def _outside(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(max_value=low - 1) | st.integers(min_value=high + 1)


@st.composite
def bad_values(draw) -> tuple[str, str, object]:
    base, key, low, high, nullable = draw(st.sampled_from(NUMBERS))
    fractions = st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: x != int(x))
    wrong = [_outside(low, high), st.booleans(), fractions, st.integers(low, high).map(str),
             st.lists(st.integers(low, high), max_size=2)]
    if not nullable:
        wrong.append(st.none())
    return base, key, draw(st.one_of(wrong))


def _with(base: str, key: str, value: object) -> str:
    data = yaml.safe_load((protocols_dir() / f"{base}.yaml").read_text())
    *parents, last = key.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return yaml.safe_dump(data, sort_keys=False)


def _refused(args: list[str], needle: str, capsys) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        with places(root) as where:
            ending = run_kit(fill(args, where), capsys)
        assert ending.clear_error(needle), (args, ending)
        assert not written(root), written(root)


@FUZZ
@given(bad_values())
def test_generated_bad_protocol_values(capsys, case):
    base, key, value = case
    with tempfile.TemporaryDirectory() as scratch:
        protocol = Path(scratch) / "bad.yaml"
        protocol.write_text(_with(base, key, value))
        _refused(["run", str(protocol), "--out", "{out}"], f"'{key}'", capsys)


@FUZZ
@given(st.sampled_from(["demo", "grid-cpu", "sweep-cpu", "pinning"]), st.data())
def test_generated_duplicate_keys(capsys, base, data):
    text = (protocols_dir() / f"{base}.yaml").read_text()
    keys = [line.split(":")[0] for line in text.splitlines() if line[:1].isalpha() and ":" in line]
    key = data.draw(st.sampled_from(keys))
    value = data.draw(st.integers(0, 10) | st.text("abcdef", min_size=1, max_size=5))
    with tempfile.TemporaryDirectory() as scratch:
        protocol = Path(scratch) / "dup.yaml"
        protocol.write_text(text + f"\n{key}: {value}\n")
        _refused(["run", str(protocol), "--out", "{out}"], f"'{key}' is given twice", capsys)


@FUZZ
@given(st.lists(st.integers(0, 30), min_size=1, max_size=6).flatmap(
    lambda orders: st.permutations(orders + [orders[0]])))
def test_generated_repeated_orders(capsys, orders):
    with tempfile.TemporaryDirectory() as scratch:
        protocol = Path(scratch) / "orders.yaml"
        protocol.write_text(_with("grid-cpu", "orders", list(orders)))
        _refused(["run", str(protocol), "--out", "{out}"], "'orders'", capsys)


@FUZZ
@given(st.sampled_from(OPTIONS).flatmap(lambda o: st.tuples(
    st.just(o), _outside(o[2], o[3]).map(str) | st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8))))
def test_generated_bad_option_values(capsys, case):
    (prefix, option, _low, _high), value = case
    _refused([*prefix, option, value, "--out", "{out}"], option, capsys)
