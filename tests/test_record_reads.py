"""What analysis reads of records: each file once, its log-probabilities only when asked (deferred reads
give the full read's arrays on use, and refuse a damaged array then), the cut-short check counted from the
read itself, and a typed view (kit.record.files.RecordView) instead of record dicts."""

from __future__ import annotations

import json
from concurrent.futures import Future

import pytest

import kit.record.files as records
from kit.analysis.collect import read_run
from kit.analysis.findings import Settings, compute
from kit.core.errors import ConfigError
from kit.record.model import PinningRecord
from kit.record.manifest import PassInfo
from kit.record.files import (
    CutShort,
    DamagedRecords,
    RecordView,
    RecordWriter,
    cut_short,
    logprobs_of,
    read_records,
    read_views,
)
from tests.analysis.records_builder import position, write_grid_like
from tests.answers import answer, prompt_body
from tests.test_records import STAMP, TRICKY, write

pytestmark = pytest.mark.unit

EPISODES = ["e0", "e1"]


def _file(tmp_path):
    path = tmp_path / "p.jsonl"
    with RecordWriter(path, **STAMP) as writer:
        write(writer, TRICKY)
        write(writer, ["plain"])
        write(writer, [])
    return path


def test_a_deferred_read_gives_the_full_reads_log_probabilities_on_use(tmp_path):
    path = _file(tmp_path)
    full = read_records(path).records
    deferred = read_records(path, "deferred")
    assert deferred.logprobs == "deferred"
    assert [logprobs_of(r["completion"]) for r in deferred.records] == [r["completion"]["logprobs"] for r in full]
    assert isinstance(deferred.records[0]["completion"]["logprobs"], records.DeferredLogprobs)
    for record in full + deferred.records:  # everything else is read as the full read reads it
        record["completion"]["logprobs"] = None
    assert deferred.records == full


def test_a_damaged_log_probability_array_is_refused_when_a_deferred_read_uses_it(tmp_path):
    path = _file(tmp_path)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"logprob":-1.0', b'"logprob":-1.0.0', 1)
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(DamagedRecords, match=r"p\.jsonl:2 is not a valid record"):
        read_records(path)  # the full read refuses the line
    deferred = read_records(path, "deferred").records
    assert logprobs_of(deferred[0]["completion"])
    with pytest.raises(DamagedRecords, match=r"p\.jsonl:2: completion\.logprobs is not a valid JSON array"):
        logprobs_of(deferred[1]["completion"])


def test_the_cut_short_check_counts_from_a_read_instead_of_reading_again(tmp_path, monkeypatch):
    path = tmp_path / "records" / "p1.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"".join(_file(tmp_path).read_bytes().splitlines(keepends=True)[:2]) + b'{"schema": "kit.rec')
    passes = {"p1": PassInfo(status="OK", file="records/p1.jsonl", records=3)}
    counted = cut_short(tmp_path, passes)
    read = read_records(path, logprobs=False, torn="report")

    def no_second_read(*args, **kwargs):
        raise AssertionError("the file was read again")

    monkeypatch.setattr(records, "_count", no_second_read)
    monkeypatch.setattr(records, "read_records", no_second_read)
    assert cut_short(tmp_path, passes, {path: read}) == counted == {
        "p1": "records/p1.jsonl ends inside a record (line 3 is torn)"}
    short = read_records(path, logprobs=False, torn="report")
    assert cut_short(tmp_path, {"p1": passes["p1"].model_copy(update={"records": 2})}, {path: short}) == {
        "p1": "records/p1.jsonl ends inside a record (line 3 is torn)"}


def _grid(folder):
    steps = {u: [(f"{u}-p0", [position(1, 1.5, 2, 2)], 0), (f"{u}-p1", [position(3, 0.5, 4, 2)], 5)]
             for u in EPISODES}
    return write_grid_like(folder, {p: {"arm": arm, "order": EPISODES, "episodes": steps}
                                    for p, arm in (("on1", "on"), ("off1", "off"))})


def test_analysis_reads_each_records_file_once(tmp_path, monkeypatch):
    run = _grid(tmp_path / "grid")
    reads: list = []
    real = records.read_records

    def counting(path, *args, **kwargs):
        reads.append(path.name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(records, "read_records", counting)
    monkeypatch.setattr("kit.analysis.collect.read_records", counting)
    monkeypatch.setattr(records, "_count", lambda *a: pytest.fail("a file was counted apart from its read"))
    found = compute([run], Settings(block_bootstrap_replicates=20, cluster_replicates=20, workers=1))
    assert sorted(reads) == ["off1.episodes.jsonl", "off1.jsonl", "on1.episodes.jsonl", "on1.jsonl"]
    assert found.grid[0].comparisons["path"]["episodes"] == len(EPISODES)


def test_analysis_refuses_a_run_cut_short_naming_the_pass(tmp_path):
    run = _grid(tmp_path / "grid")
    path = run / "records" / "off1.jsonl"
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:-1]))
    with pytest.raises(CutShort, match=r"1 pass\(es\) cut short \(pass off1: records/off1\.jsonl holds 3 of the 4 "
                                       r"records the manifest counts\); run `kit resume"):
        compute([run], Settings(block_bootstrap_replicates=20, cluster_replicates=20, workers=1))
    assert read_run(run).ok_passes  # recognising the folder reads no records


def test_a_record_view_holds_the_typed_fields_analysis_reads(tmp_path):
    path = tmp_path / "p.jsonl"
    with RecordWriter(path, run_id="r", pass_id="c1", protocol="pinning") as writer:
        completion = answer([position(7, 1.0, 8, 2), position(9, 1.0, 8, 2)], body=prompt_body("hi"), cached=3,
                            text="t7 t9")
        writer.answered(PinningRecord, completion, unit="measured", step=None, phase="cycle", role="pure",
                        arm_index=1, measured=True, state={"state": "full_eval"})
    (view,) = read_views(path)
    record = read_records(path).records[0]
    assert view == RecordView(pass_id="c1", seq=0, unit="measured", step=None, phase="cycle", role="pure",
                              arm_index=1, measured=True, prompt_sha256=record["prompt_sha256"],
                              output_sha256=record["output_sha256"], text="t7 t9", emitted=(7, 9),
                              cached_tokens=3, prompt_tokens=record["completion"]["prompt_tokens"],
                              prefill_ms=record["completion"]["prefill_ms"])
    with pytest.raises(AttributeError):
        view.role = "other"  # type: ignore[misc]


def test_a_view_is_read_from_a_checked_file_only(tmp_path):
    path = _file(tmp_path)
    lines = path.read_text().splitlines()
    record = json.loads(lines[1])
    record["completion"]["text"] = "forged"
    path.write_text("\n".join([lines[0], json.dumps(record), lines[2]]) + "\n")
    with pytest.raises(ConfigError, match=r"p\.jsonl:2: output_sha256 .* is not the sha256"):
        read_views(path)


def _square(x):
    return x * x


def test_parallel_map_starts_the_costliest_first_and_keeps_the_input_order(monkeypatch):
    import kit.analysis.parallel as parallel

    items = [(n,) for n in (1, 9, 3, 7, 5)]
    assert parallel.parallel_map(_square, items, workers=2, cost=lambda x: x) == [1, 81, 9, 49, 25]
    handed: list = []

    class InOrder:  # an executor that runs the items in the order they are handed to it
        def __init__(self, max_workers, initializer=None):
            pass

        def submit(self, fn, *args):  # every job goes through without_gc(fn, *args)
            handed.append(args[1])
            done: Future = Future()
            done.set_result(fn(*args))
            return done

        def shutdown(self, wait=True, cancel_futures=False):
            return None

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", InOrder)
    assert parallel.parallel_map(_square, items, workers=2, cost=lambda x: x) == [1, 81, 9, 49, 25]
    assert handed == [9, 7, 5, 3, 1]


def test_equal_log_probability_arrays_are_parsed_once_and_only_equal_bytes_are_shared():
    same, twin = records.DeferredLogprobs(b'[{"id":1}]', "a:1"), records.DeferredLogprobs(b'[{"id":1}]', "b:1")
    other = records.DeferredLogprobs(b'[{"id":1.0}]', "c:1")  # equal once parsed, other bytes: parsed apart
    a, b = records.logprobs_pair(same, twin)
    assert a is b and a == [{"id": 1}]
    a, c = records.logprobs_pair(records.DeferredLogprobs(b'[{"id":1}]', "a:2"), other)
    assert a == c and a is not c
    nan = b'[{"id":1,"logprob":NaN}]'  # two parses of a NaN compare equal too (json's one NaN object): shared
    assert json.loads(nan) == json.loads(nan)
    a, b = records.logprobs_pair(records.DeferredLogprobs(nan, "a:3"), records.DeferredLogprobs(nan, "b:3"))
    assert a is b and a == json.loads(nan)
    assert records.logprobs_pair([{"id": 2}], None) == ([{"id": 2}], None)


def test_grid_identity_from_deferred_reads_counts_what_full_reads_count(tmp_path, monkeypatch):
    from kit.protocols.grid import results as grid_results

    def steps(margin, flip):
        return {u: [(f"{u}-p0", [position(1, 1.5, 2, 2), position(3, margin, 4, 2)], 0),
                    (f"{u}-p1", [position(5 if u == "e1" and flip else 3, 0.5, 4, 2)], 5)] for u in EPISODES}

    run = write_grid_like(tmp_path / "grid", {
        "on1": {"arm": "on", "order": EPISODES, "episodes": steps(0.25, True)},
        "on2": {"arm": "on", "order": EPISODES, "episodes": steps(0.25, False)},
        "off1": {"arm": "off", "order": EPISODES, "episodes": steps(0.5, False)},
        "off2": {"arm": "off", "order": EPISODES, "episodes": steps(0.5, False)}})
    full = grid_results.grid_table(run).to_json()["comparisons"]  # `kit run`'s results: every array parsed
    parsed = []
    real = records._loads
    monkeypatch.setattr(records, "_loads", lambda raw: parsed.append(bytes(raw[:1])) or real(raw))
    found = compute([run], Settings(block_bootstrap_replicates=20, cluster_replicates=20, workers=1))
    keys = {"run-to-run cache-off": "off_r2r", "run-to-run cache-on": "on_r2r", "path": "path"}
    assert {keys[name]: c["identity"] for name, c in full.items()} == {
        key: c["identity"] for key, c in found.grid[0].comparisons.items()}
    assert found.grid[0].comparisons["off_r2r"]["identity"]["logprobs_identical"] == 6
    assert found.grid[0].comparisons["path"]["identity"]["logprobs_identical"] == 3
    arrays = parsed.count(b"[")
    assert 0 < arrays < 4 * 4  # 4 requests a pass: off2's arrays, off1's twins, are never parsed


def test_every_kinds_runs_are_read_in_one_pool_and_each_result_goes_back_to_its_kind(tmp_path, monkeypatch):
    import kit.analysis.findings as findings_module

    grid = _grid(tmp_path / "grid")
    steps = {u: [(f"{u}-p0", [position(1, 1.5, 2, 2)], 0)] for u in EPISODES}
    cells = [write_grid_like(tmp_path / f"sweep-{fmt}", {p: {"arm": arm, "order": EPISODES, "episodes": steps}
                                                         for p, arm in (("on1", "on"), ("off1", "off"))},
                             sweep={"format": fmt, "history": 0}, model_name=f"toy-{fmt}", cache_ram=0)
             for fmt in ("F16", "Q8_0")]
    settings = Settings(block_bootstrap_replicates=20, cluster_replicates=20, sweep_replicates=20, workers=2)
    alone = {"grid": compute([grid], settings).grid, "sweep": compute(cells, settings).sweep}
    pools: list = []

    class Recording(findings_module.Pool):  # each pool, and the reads submitted to it
        def __init__(self, workers):
            super().__init__(workers)
            self.reads: list = []
            pools.append(self)

        def submit(self, fn, *args):
            if fn is findings_module.call:
                self.reads.append(args[0].__name__)
            return super().submit(fn, *args)

    monkeypatch.setattr(findings_module, "Pool", Recording)
    together = compute([grid, *cells], settings)
    assert [sorted(pool.reads) for pool in pools] == [["_grid_run", "_sweep_cell", "_sweep_cell"]]  # one pool
    assert alone["grid"] and alone["sweep"] is not None
    assert together.grid == alone["grid"] and together.sweep == alone["sweep"]


@pytest.mark.parametrize("array", [b'[{"token":"a","id":1,"top":[{"logprob":-1}]},{"token":"b","top":[]}]',
                                   b'[{"token":"a","logprob":NaN}]', b'[{"token":NaN}]', b'[{"id":1}]', b"[]"],
                         ids=["valid", "a NaN logprob", "a NaN token", "no token", "empty"])
def test_identity_counts_a_pair_of_the_same_bytes_as_the_full_parse_does(array):
    # a pair of the same bytes the mechanism's view decodes is counted from that decode (no full parse); any other
    # pair (a NaN, an entry without a token) through the full parse, whose counts are the reference
    from kit.protocols.grid.results import GridRequest, identity

    def passes(read):
        return {"u": [GridRequest(step=0, prompt_sha256="p", ids=None, tokens=[], logprobs=read(), emitted=[1])]}

    def counted(read):
        try:
            return identity(passes(read), passes(read), ["u"])
        except KeyError as exc:  # the full parse's, of an entry without a token: the same either way
            return repr(exc)

    assert counted(lambda: records.DeferredLogprobs(array, "a:1")) == counted(lambda: json.loads(array))
    lean = records.DeferredLogprobs(array, "c:1").positions()
    assert (lean is not None) == (array in (b'[{"token":"a","id":1,"top":[{"logprob":-1}]},{"token":"b","top":[]}]',
                                            b"[]"))
