"""`kit analyze`: read run folders, compute every finding with its interval and the counts behind
it, and write analysis/findings.json, the tables (III–VII) and the figures (1–3).

Only files are read (manifests and records); the runner is never imported. VOID passes are excluded
and listed; a table a run cannot feed is skipped with a one-line reason, never filled in.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

from kit.analysis import bridge_findings, grid_findings, mechanism, sweep_findings
from kit.analysis.collect import Collection, RunFolder, checked_prompts, collect, format_rank
from kit.analysis.findings_model import FILE, SCHEMA, Findings, GridRun, GridTrend, MechanismBlock, RunEntry, Table
from kit.analysis.parallel import Pool, call, default_workers, import_before_forking
from kit.protocols import kinds
from kit.protocols.bfcl_passes import setting as grid_setting
from kit.protocols.passes import load_pass
from kit.core.errors import KitError
from kit.record.manifest import now
from kit.record.provenance import backends_differ
from kit.stats import MODULES as STATS_MODULES
from kit.core.terminal_text import one_line


@dataclass(frozen=True)
class Settings:
    """Replicate counts and the seed (the paper's: 10,000 block-bootstrap replicates, 2,000 two-way
    bootstrap replicates with a GLMM refit each, 2,000 episode-cluster replicates)."""

    seed: int = 20261007
    block_bootstrap_replicates: int = 10_000
    sweep_replicates: int = 2_000
    cluster_replicates: int = 2_000
    workers: int = 0  # processes reading record files and refitting the sweep's GLMM; 0 = one per available CPU
    harness_thresholds: tuple[float, float] | None = None  # prefill ms LOW,HIGH for imported harness runs


@dataclass
class Timer:
    """Wall seconds per step, for the report and the benchmark."""

    steps: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, started: float) -> None:
        self.steps[name] = round(self.steps.get(name, 0.0) + time.perf_counter() - started, 3)


_FAMILIES = ("grid", "sweep", "reset", "harness")  # the findings families computed here, each by its own step
_READ_STEP = "read records: grid, sweep and reset runs (one pool)"  # the time spent waiting for the workers


def _mechanism_for_grid(run: RunFolder) -> mechanism.Positions | str:
    """The run's mechanism positions (hit path on1, recompute path off1), or why there are none."""
    if run.top_logprobs is not None and run.top_logprobs < 2:
        return f"top-{run.top_logprobs} log-probabilities: the top-two margin needs top-2 or deeper"
    if "on1" not in run.ok_passes or "off1" not in run.ok_passes:
        return "mechanism needs OK passes on1 and off1"
    hit = load_pass(run.path, "on1", run.ok_passes["on1"], keep_logprobs=True, records=run.records)
    recompute = load_pass(run.path, "off1", run.ok_passes["off1"], keep_logprobs=True, records=run.records)
    try:
        return mechanism.pass_positions(hit, recompute)
    except mechanism.MechanismSkip as exc:
        return str(exc)


def _grid_run(run: RunFolder) -> tuple[dict[str, Any], mechanism.Positions | str]:
    """One grid run's counts (grid_findings.grid_run_counts: `_grid_results` adds the intervals) and mechanism
    positions (or why none), each records file read once. Runs in a worker process."""
    with run.reading({pass_id: "deferred" for pass_id in run.ok_passes}):
        return grid_findings.grid_run_counts(run), _mechanism_for_grid(run)


def _grid_results(futures: list[Any], settings: Settings, timer: Timer) -> list[Any]:
    """The grid runs' results (`_grid_run`) with their dependence-aware intervals, each worked out here as soon
    as its run is read, while the workers read the others."""
    found = []
    for future in futures:
        started = time.perf_counter()
        counts, positions = future.result()
        timer.add(_READ_STEP, started)
        started = time.perf_counter()
        found.append((grid_findings.add_intervals(counts, settings.block_bootstrap_replicates, settings.seed),
                      positions))
        timer.add("grid: dependence-aware intervals", started)
    return found


def _grid(collection: Collection, settings: Settings, timer: Timer, findings: Findings, read: list[Any]) -> None:
    if not collection.of_kind("grid"):
        return
    started = time.perf_counter()
    grid = [found for found, _ in read]
    findings.grid = [GridRun.model_validate(g) for g in grid]
    findings.tables["III"] = Table.model_validate(grid_findings.table_iii(grid))
    findings.tables["V"] = Table.model_validate(grid_findings.table_v(grid))
    timer.add("grid: tables III and V", started)
    started = time.perf_counter()
    findings.grid_trend = GridTrend.model_validate(grid_findings.grid_trend(grid, settings.sweep_replicates,
                                                                          settings.seed))
    timer.add("grid: trend over formats", started)
    started = time.perf_counter()
    positions: dict[str, mechanism.Positions] = {}
    skipped: list = []
    for run, (_, found) in zip(collection.of_kind("grid"), read):
        if isinstance(found, str):
            skipped.append({"run": run.run_id, "reason": found})
        else:
            positions.setdefault(run.format, mechanism.Positions()).extend(found)
    _mechanism_block(findings, "grid", positions, skipped, settings)
    timer.add("grid: mechanism", started)


def _read_by_a_kind(run: RunFolder) -> bool:
    """Whether `_grid`, `_sweep` or `_reset` read the run's records (and check it is whole as they do)."""
    return run.kind in ("grid", "sweep") or (run.kind == "reset" and bool(run.ok_passes))


def _workers(settings: Settings) -> int:
    return settings.workers or default_workers()


def _mechanism_block(findings: Findings, source: str, positions: dict[str, mechanism.Positions],
                     skipped: list, settings: Settings) -> None:
    if not positions and not skipped:
        return
    block = mechanism.summarize(positions, sorted(positions, key=format_rank), settings.cluster_replicates,
                                settings.seed)
    block["skipped_runs"] = skipped
    findings.mechanism[source] = MechanismBlock.model_validate(block)


def _sweep_cell(run: RunFolder, canonical: bool) -> tuple[dict[str, Any], Any]:
    """One sweep folder's path divergence, and its mechanism positions when it is the canonical history
    of its format (or why there are none). Runs in a worker process."""
    on, off = sweep_findings.arm_passes(run)
    with run.reading({p: "deferred" if canonical else False for p in (on, off) if p is not None}):
        loaded = sweep_findings.load_cell_passes(run, keep_logprobs=canonical)
    cell = sweep_findings.cell_divergence(run, loaded)
    if not canonical or on is None or off is None:
        return cell, None
    try:
        return cell, mechanism.pass_positions(loaded[on], loaded[off])
    except mechanism.MechanismSkip as exc:
        return cell, str(exc)


def _sweep_jobs(runs: list[RunFolder]) -> list[tuple[RunFolder, bool]]:
    """(folder, canonical?) of each sweep folder: the canonical history of its format (its lowest) gives the
    format's mechanism positions."""
    canonical: dict[str, RunFolder] = {}
    for run in sorted(runs, key=lambda r: int(r.sweep.get("history", 0))):
        canonical.setdefault(run.format, run)
    return [(run, canonical.get(run.format) is run) for run in runs]


def _sweep_bootstrap(cells: list[tuple[RunFolder, dict[str, Any]]], settings: Settings,
                     pool: Pool) -> tuple[Any, Any, float]:
    """The sweep's findings and Table VI, and the seconds they took. Runs on a thread of this process
    (`Pool.beside`) while it goes on with the other kinds: the GLMM refits queue on the pool's workers behind
    the reads still running, and start as workers free up."""
    started = time.perf_counter()
    found = sweep_findings.sweep_findings(cells, settings.sweep_replicates, settings.seed, mapper=pool.map)
    return found, sweep_findings.table_vi(found), time.perf_counter() - started


def _sweep_start(collection: Collection, settings: Settings, pool: Pool, read: list[Any]) -> Any:
    """The sweep's bootstrap started beside this process's work (`_sweep_bootstrap`), or None without sweep
    folders."""
    if not collection.of_kind("sweep"):
        return None
    cells = [(run, cell) for (run, _), (cell, _) in zip(_sweep_jobs(collection.of_kind("sweep")), read)]
    return pool.beside(_sweep_bootstrap, cells, settings, pool)


def _sweep(collection: Collection, settings: Settings, timer: Timer, findings: Findings, read: list[Any],
           bootstrap: Any) -> None:
    runs = collection.of_kind("sweep")
    if not runs:
        return
    started = time.perf_counter()
    jobs = _sweep_jobs(runs)
    positions: dict[str, mechanism.Positions] = {}
    skipped: list = []
    for (run, _), (_, found) in zip(jobs, read):
        if isinstance(found, str):
            skipped.append({"run": run.run_id, "reason": found})
        elif found is not None:
            positions.setdefault(run.format, mechanism.Positions()).extend(found)
    timer.add("sweep: cells and their mechanism positions", started)
    started = time.perf_counter()
    _mechanism_block(findings, "sweep", positions, skipped, settings)  # while the bootstrap's refits run
    timer.add("sweep: mechanism (canonical history)", started)
    findings.sweep, findings.tables["VI"], seconds = bootstrap.result()
    timer.steps["sweep: two-way bootstrap with GLMM refits, permutation test"] = round(seconds, 3)


def _reset_run(run: RunFolder) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """One reset run's Table IV and VII rows and its mechanism positions (or why none). Runs in a worker."""
    order = sorted(run.ok_passes, key=lambda p: run.ok_passes[p].session or 0)
    with run.reading({p: "deferred" if p == order[0] else False for p in order}):
        sessions = {p: load_pass(run.path, p, run.ok_passes[p], keep_logprobs=p == order[0], records=run.records)
                    for p in order}
    try:
        found: Any = mechanism.item_positions(sessions[order[0]])
    except mechanism.MechanismSkip as exc:
        found = str(exc)
    return bridge_findings.table_iv_row(run, sessions), bridge_findings.table_vii_row(run, sessions[order[0]]), found


def _reset(collection: Collection, settings: Settings, timer: Timer, findings: Findings, read: list[Any]) -> None:
    runs = collection.of_kind("reset")
    if not runs:
        return
    started = time.perf_counter()
    usable = [run for run in runs if run.ok_passes]
    skipped = [{"run": run.run_id, "reason": "no OK session"} for run in runs if not run.ok_passes]
    findings.tables["IV"] = Table(rows=[r[0] for r in read], skipped=list(skipped))
    findings.tables["VII"] = Table(rows=[r[1] for r in read], skipped=list(skipped))
    positions: dict[str, mechanism.Positions] = {}
    for run, (_, _, found) in zip(usable, read):
        if isinstance(found, str):
            skipped.append({"run": run.run_id, "reason": found})
        else:
            positions.setdefault(run.format, mechanism.Positions()).extend(found)
    timer.add("reset/bridge: tables IV and VII", started)
    started = time.perf_counter()
    _mechanism_block(findings, "reset", positions, skipped, settings)
    timer.add("reset/bridge: mechanism", started)


# CPU seconds per byte of records, relative (measured on the paper-scale bench: grid about 10 ms/MB, a sweep
# folder 5, its canonical history twice that, a reset run 7): a grid run parses the log-probability arrays its
# identity counts compare, a canonical sweep history those its mechanism walks; other reads skim past them.
# Only the order in which `_submit_reads` starts its jobs depends on these.
_READ_WEIGHT = {_grid_run: 2.0, _sweep_cell: 1.0, _reset_run: 1.4}


def _read_cost(fn: Any, args: tuple[Any, ...]) -> float:
    run = args[0]
    return _READ_WEIGHT[fn] * (2.0 if fn is _sweep_cell and args[1] else 1.0) * run.bytes_to_read()


def _submit_reads(collection: Collection, pool: Pool) -> dict[str, list[Any]]:
    """Each grid run, sweep folder and reset run read and reduced (`_grid_run`, `_sweep_cell`, `_reset_run`) on
    one pool of workers, the costliest first: the cores stay busy until the last records file is read, instead of
    idling at the end of each kind's turn. Per kind, the Futures of the results in the order of
    `collection.of_kind`."""
    jobs: dict[str, list[tuple[Callable[..., Any], tuple[Any, ...]]]] = {
        "grid": [(_grid_run, (run,)) for run in collection.of_kind("grid")],
        "sweep": [(_sweep_cell, job) for job in _sweep_jobs(collection.of_kind("sweep"))],
        "reset": [(_reset_run, (run,)) for run in collection.of_kind("reset") if run.ok_passes]}
    everything = [job for kind in jobs.values() for job in kind]
    futures: list[Any] = [None] * len(everything)
    for index in sorted(range(len(everything)), key=lambda i: -_read_cost(*everything[i])):
        futures[index] = pool.submit(call, *everything[index])
    results = iter(futures)
    return {kind: [next(results) for _ in kind_jobs] for kind, kind_jobs in jobs.items()}


def _results(futures: list[Any], timer: Timer) -> list[Any]:
    started = time.perf_counter()
    found = [future.result() for future in futures]
    timer.add(_READ_STEP, started)
    return found


def _harness(collection: Collection, settings: Settings, timer: Timer, findings: Findings) -> None:
    """Imported determinism-harness runs: the harness's report values per run (kit.protocols.harness.results), with
    the prefill thresholds given at import, or those of `settings` when set."""
    runs = collection.of_kind("harness")
    if not runs:
        return
    from kit.protocols.harness import results as harness  # noqa: PLC0415

    started = time.perf_counter()
    given = {"thresholds": list(settings.harness_thresholds)} if settings.harness_thresholds else {}
    tables = []
    for run in runs:
        resolved = harness.Resolved.of({**run.resolved, **given}, str(run.path))
        table = harness.compute(harness.read_calls(run.path / harness.CALLS), resolved)
        tables.append({"run": run.run_id, **table.to_json()})
    findings.harness = tables
    timer.add("harness imports: arms, states, cycles, gates", started)


def _own_tables(collection: Collection, timer: Timer, findings: Findings) -> None:
    """The runs of kinds whose findings are their own results table (kit.protocols.kind.Analysis.table: the
    ladder, `kit watch`'s runs): each run's table, by kind. A table kind's family is its name, so the families
    computed above are none: their kinds are not loaded for this (the sweep kind's module loads the runner's)."""
    for name in kinds.KINDS:  # in registry order; a kind with no run among the inputs is not loaded
        runs = collection.of_kind(name) if name not in _FAMILIES else []
        kind = kinds.KINDS[name] if runs else None
        if kind is None or kind.analysis is None or kind.analysis.table is None:
            continue
        started = time.perf_counter()
        findings.kinds = {**(findings.kinds or {}),
                          kind.name: [{"run": run.run_id, **kind.analysis.table(run.path)} for run in runs]}
        timer.add(f"{kind.name} runs: their results tables", started)


def _prompt_cache(run: RunFolder) -> str:
    """The run's server-level prompt cache as Table III names it (default, disabled, N MiB), or its raw value;
    for a run whose phases set `cache_prompt` per request (the restored-state control, the demo), that first:
    its server-level cache may be disabled while its warm phases reuse the slot's prompt cache."""
    try:
        server = grid_setting.prompt_cache_setting(run.cache_ram)
    except (TypeError, ValueError):
        server = str(run.cache_ram)
    phases = run.resolved.get("phases")
    if run.kind != "reset" or not isinstance(phases, list) or not all(isinstance(p, dict) for p in phases):
        return server
    by_setting = {flag: [str(p.get("name")) for p in phases if bool(p.get("cache_prompt")) is flag]
                  for flag in (False, True)}
    said = "; ".join(f"cache_prompt {str(flag).lower()} in {', '.join(names)}"
                     for flag, names in by_setting.items() if names)
    return f"per request: {said} (server-level prompt cache {server})"


def compute(paths: list[Path], settings: Settings = Settings(), timer: Timer | None = None,
            meanwhile: Callable[[], Any] | None = None) -> Findings:
    """Every finding from the given run folders (nothing written). `meanwhile` (e.g. importing what a later step
    needs) runs in this process while the workers read, after the statistics modules are imported
    ("while the workers read: ..." in the timings)."""
    try:
        return _compute(paths, settings, timer or Timer(), meanwhile)
    finally:
        checked_prompts.clear()  # those this process's reads checked (with one worker, or none)


def _compute(paths: list[Path], settings: Settings, timer: Timer, meanwhile: Callable[[], Any] | None) -> Findings:
    started = time.perf_counter()
    collection = collect(paths)
    for run in collection.runs:
        if not _read_by_a_kind(run):
            run.require_whole()  # the others are refused where their records are read (RunFolder.reading)
    timer.add("recognise run folders", started)
    findings = Findings.model_validate({
        "schema": SCHEMA, "created": now(), "settings": asdict(settings),
        "runs": [RunEntry(run=r.run_id, path=str(r.path), kind=r.kind, format=r.format, model=r.model,
                          engine=r.engine_name, prompt_cache=_prompt_cache(r), sweep=r.sweep or None,
                          ok_passes=sorted(r.ok_passes)) for r in collection.runs],
        "skipped_inputs": collection.skipped, "excluded_passes": collection.void_passes(),
        "tables": {}, "mechanism": {},
        "comparability": backends_differ([r.manifest for r in collection.runs]),
    })
    with Pool(_workers(settings)) as pool:
        reads = _submit_reads(collection, pool)
        started = time.perf_counter()  # while the workers read: they need none of these
        # arch (the grid intervals' block length; it loads statsmodels, pandas, matplotlib): only for grid runs
        import_before_forking(*STATS_MODULES, *(("arch.bootstrap",) if reads["grid"] else ()))
        timer.add("import the statistics modules", started)
        if meanwhile is not None:
            started = time.perf_counter()
            meanwhile()
            timer.add("while the workers read: import the figures' modules", started)
        grid = _grid_results(reads["grid"], settings, timer)
        sweep = _results(reads["sweep"], timer)
        bootstrap = _sweep_start(collection, settings, pool, sweep)
        _grid(collection, settings, timer, findings, grid)
        _reset(collection, settings, timer, findings, _results(reads["reset"], timer))
        _sweep(collection, settings, timer, findings, sweep, bootstrap)
    # in the order the kinds were computed in before the bootstrap ran beside the others (grid, sweep, reset)
    findings.tables = {name: findings.tables[name] for name in ("III", "V", "VI", "IV", "VII")
                       if name in findings.tables}
    findings.mechanism = {name: findings.mechanism[name] for name in ("grid", "sweep", "reset")
                          if name in findings.mechanism}
    _harness(collection, settings, timer, findings)
    _own_tables(collection, timer, findings)
    for name, needs in (("III", "grid runs with two cache-on passes"), ("IV", "reset runs"),
                        ("V", "grid runs"), ("VI", "sweep folders"), ("VII", "reset (GSM8K bridge) runs")):
        findings.tables.setdefault(name, Table(rows=[], skipped=[{"reason": f"no {needs} among the inputs"}]))
    return findings


def refuse_empty(findings: Findings) -> None:
    """A KitError when the inputs hold nothing to analyse: no run folder at all (each input's reason
    named), or runs none of which has an OK pass."""
    if not findings.runs:
        why = "; ".join(f"{item['path']}: {item['reason']}" for item in findings.skipped_inputs[:3])
        more = len(findings.skipped_inputs) - 3
        raise KitError(f"no run folder to analyse ({one_line(why)}{f'; and {more} more' if more > 0 else ''})",
                       "pass a run folder made by `kit run` or `kit import` (it holds manifest.json), or a folder "
                       "holding such run folders")
    if not any(run.ok_passes for run in findings.runs):
        raise KitError(f"nothing to analyse: none of the {len(findings.runs)} run(s) given has an OK pass "
                       f"({len(findings.excluded_passes)} pass(es) cut short, VOID or never run)",
                       "finish the run with `kit resume RUN_DIR`, or pass a run with at least one OK pass")


def analyze(paths: list[Path], out: Path, settings: Settings = Settings(), figures: bool = True) -> Findings:
    """Compute the findings and write findings.json, tables/ and figures/ under `out`; refuses inputs that
    hold nothing to analyse (`refuse_empty`) before anything is written."""
    from kit.analysis import tables  # noqa: PLC0415

    timer = Timer()
    if figures:
        from kit.analysis import figures as figs  # noqa: PLC0415
    # matplotlib (about half a second) imported while the workers read, not after them: the figures come last
    findings = compute(paths, settings, timer, figs.import_pyplot if figures else None)  # timed: see compute
    refuse_empty(findings)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    findings.files = {"tables": tables.write_all(findings, out / "tables")}
    timer.add("write tables", started)
    if figures:
        started = time.perf_counter()
        findings.files["figures"] = figs.write_all(findings, out / "figures", _workers(settings))
        timer.add("draw figures", started)
    findings.timings_seconds = timer.steps
    findings.write(out / FILE)
    return findings
