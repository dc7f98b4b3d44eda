"""A flag × order run's own results, computed from its records (seed 000 Table III): per cell (arm) the
run-to-run divergence of its two cache-on passes with a Wilson interval, the split of the divergent
episodes over quartiles of execution order with an exact trend test, the path divergence where the arm
has a cache-off pass, and the requests its first pass issued; per prompt-cache setting, whether the two
pass orders gave the same cache-on output token for token; and which server each arm ran on.

The dependence-aware intervals of Table III come from `kit analyze`, which reads the run as one grid
run per cell (manifest `cells`).
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path
from typing import Any, TypedDict

from pydantic import Field

from kit.record.manifest import Manifest, PassInfo
from kit.core.paths import RunPaths
from kit.protocols.passes import OkPasses
from kit.protocols.results_files import write_results
from kit.core.packaged_yaml import validated
from kit.protocols.results_model import (Comparison, Count, JsonObject, NotResults, Number, Part, Results,
                                         VoidPass)
from kit.record.files import read_records

QUARTILES = (1, 2, 3, 4)


class CellLabels(Part):
    """`cells.<arm>.flag_order`: how Table III labels the arm, how its passes share servers, and its two
    cache-on passes compared run to run."""

    prompt_cache: str | None = None
    order: str | None = None
    server: str = "shared"
    run_to_run: list[str] = Field(min_length=2, max_length=2)


class CellEngine(Part):
    cache_ram: int | None = None  # the arm's `--cache-ram` (None: llama.cpp's default)


class CellPasses(Part):
    passes: list[str] = []  # the cache arm of each of the cell's passes, in order


class CellSpec(Part):
    """`cells.<arm>` of a flag x order run's manifest, what `kit analyze` reads as one grid run per arm: its passes,
    its cache setting (`engine`), their cache arms (`resolved`) and its labels (`flag_order`). Written by the
    protocol (kit.protocols.flag_order.protocol.cells), read back here from the manifest."""

    passes: list[str]
    engine: CellEngine = CellEngine()
    resolved: CellPasses = CellPasses()
    flag_order: CellLabels


def cell_spec(name: str, data: object) -> CellSpec:
    """The manifest's `cells.<name>` as a CellSpec; a one-line error naming the key and what is wrong otherwise."""
    return validated(CellSpec, data, f"{RunPaths.MANIFEST} cells.{name}",
                     lambda loc, _data: ".".join(map(str, loc)) or "(the cell)",
                     "this manifest's cells are not the ones a flag x order run writes", error=NotResults)


class CsvRow(TypedDict, total=False):
    """A row of results/flag_order.csv (CSV_FIELDS)."""

    cell: str
    prompt_cache: str | None
    lifetime: str
    order: str | None
    pass_a: str
    pass_b: str
    episodes: int | None
    diverged: int | None
    rate: float | None
    lo: float | None
    hi: float | None
    q1: int
    q2: int
    q3: int
    q4: int
    trend_p: float | None
    path_diverged: int | None
    path_episodes: int | None
    requests_first_pass: int | None


class Server(Part):
    """The server(s) an arm's passes ran on (see `_server`)."""

    pids: list[Count] = []
    sessions: list[str] = []
    cache_ram_arg: list[str | None] = []
    one_server: bool = False


class Quartiles(Part):
    """Divergent episodes per quartile of execution order and the exact trend test over them."""

    diverged: list[Count]
    episodes: list[Count]
    trend: JsonObject  # kit.stats.position_trend_test(...).to_json(): its `p` is what the view shows


class RunToRun(Comparison):
    quartiles: Quartiles | None = None


class Cell(Part):
    """One arm (a prompt-cache setting under one pass order): its passes, servers, run-to-run and path divergence."""

    prompt_cache: str | None = None
    order: str | None = None
    lifetime: str = "shared"
    cache_ram: Number | None = None
    passes: list[str]
    server: Server
    requests_first_pass: Count | None = None
    run_to_run: RunToRun
    path: Comparison | None = None


class SameOutput(Part):
    """Two cache-on passes compared token for token, or why not (`skipped`)."""

    passes: list[str] = []
    skipped: str | None = None
    episodes: Count = 0
    episodes_identical: Count = 0
    tokens: Count = 0
    identical: bool | None = None


class OrderCheck(Part):
    """Two cells that differ only in pass order: their cache-on passes compared, and the change in run-to-run rate."""

    prompt_cache: str | None = None
    cells: list[str]
    cache_on: dict[str, SameOutput]
    identical: bool | None = None
    run_to_run_difference: Number | None = None


class FlagOrderResults(Results):
    """results/flag_order.json."""

    cells: dict[str, Cell]
    void_passes: list[VoidPass]
    orders: dict[str, OrderCheck] = {}
    fresh_server_per_arm: bool | None = None


def _server(infos: dict[str, PassInfo], pass_ids: list[str], on_passes: list[str]) -> Server:
    """The server(s) an arm's passes ran on: server sessions (the kit's name for each server it started;
    process ids in runs made before it named them), process ids, the `--cache-ram` each was started with,
    and whether the two cache-on passes shared one server."""
    launches = [(infos[p].launch if p in infos else None) or {} for p in pass_ids]
    pids = sorted({launch["pid"] for launch in launches if launch.get("pid") is not None})
    flags = []
    for launch in launches:
        argv = [str(a) for a in launch.get("argv") or []]
        flags.append(argv[argv.index("--cache-ram") + 1] if "--cache-ram" in argv[:-1] else None)

    def server(pass_id: str) -> str | int | None:  # its server's session label, else its pid
        info = infos.get(pass_id) or PassInfo()
        return info.server_session or (info.launch or {}).get("pid")

    sessions = sorted({str(s) for p in pass_ids if (s := server(p)) is not None})
    on_servers = {server(p) for p in on_passes}
    return Server(pids=pids, sessions=sessions, cache_ram_arg=sorted(set(flags), key=str),
                  one_server=len(on_servers) == 1 and None not in on_servers)


def _requests(run_dir: Path, info: PassInfo) -> int | None:
    """Requests a pass issued, from its episode records (sentinel requests not counted)."""
    path = run_dir / (info.episodes_file or "")
    if info.status != "OK" or not info.episodes_file or not path.is_file():
        return None
    return sum(int(e["requests"]) for e in read_records(path).records)


def _tokens(passes: OkPasses, pass_id: str, units: list[str]) -> int:
    data = passes.get(pass_id)
    return sum(len(r.tokens) for u in units for r in data.units.get(u, [])) if data else 0


def _same_output(passes: OkPasses, a: str, b: str) -> SameOutput:
    """Are two cache-on passes the same token for token (prompts, emitted tokens, request counts)?"""
    found = passes.compare(a, b)
    if not found.compared:
        return SameOutput(**found.to_json())
    return SameOutput(passes=[a, b], episodes=found.episodes, episodes_identical=found.episodes - found.diverged,
                      tokens=_tokens(passes, a, list(found.status)), identical=found.diverged == 0)


def quartile_split(indicators: list[int]) -> Quartiles:
    """Divergent episodes per quartile of execution order (1..4) and the exact trend test over them."""
    from kit.stats import position_trend_test, quartile_scores  # noqa: PLC0415 - loads scipy: only when computing

    scores = quartile_scores(len(indicators))
    return Quartiles(diverged=[sum(y for y, s in zip(indicators, scores) if s == q) for q in QUARTILES],
                     episodes=[int((scores == q).sum()) for q in QUARTILES],
                     trend=position_trend_test(indicators, scores).to_json())


def _cell(run_dir: Path, passes: OkPasses, infos: dict[str, PassInfo], cell: CellSpec) -> Cell:
    labels = cell.flag_order
    on1, on2 = labels.run_to_run
    kinds = dict(zip(cell.passes, cell.resolved.passes))
    run_to_run = RunToRun(**passes.compare(on1, on2).to_json())
    if run_to_run.compared and run_to_run.episodes:
        run_to_run.quartiles = quartile_split(list(run_to_run.status.values()))
    off = [p for p in cell.passes if kinds.get(p) == "off"]
    made = Cell(prompt_cache=labels.prompt_cache, order=labels.order, lifetime=labels.server,
                cache_ram=cell.engine.cache_ram, passes=cell.passes, server=_server(infos, cell.passes, [on1, on2]),
                requests_first_pass=_requests(run_dir, infos.get(cell.passes[0]) or PassInfo()),
                run_to_run=run_to_run)
    if off:
        made.path = passes.compare(on1, off[0])
    return made


def _orders(passes: OkPasses, cells_in: dict[str, CellSpec], cells: dict[str, Cell]) -> dict[str, OrderCheck]:
    """Per setting, each pair of cells that differ only in pass order: their first cache-on passes and
    their second cache-on passes compared token for token, and the change in run-to-run divergence."""
    found = {}
    for a, b in combinations(cells_in, 2):
        ca, cb = cells[a], cells[b]
        if ca.prompt_cache != cb.prompt_cache or ca.lifetime != cb.lifetime or ca.order == cb.order:
            continue
        pairs = zip(cells_in[a].flag_order.run_to_run, cells_in[b].flag_order.run_to_run)
        cache_on = {f"on{i}": _same_output(passes, pa, pb) for i, (pa, pb) in enumerate(pairs, start=1)}
        checks = [c.identical for c in cache_on.values()]
        entry = OrderCheck(prompt_cache=ca.prompt_cache, cells=[a, b], cache_on=cache_on,
                           identical=None if None in checks else all(checks))
        ra, rb = ca.run_to_run.rate, cb.run_to_run.rate
        if ra is not None and rb is not None:
            entry.run_to_run_difference = rb - ra
        found[f"{ca.prompt_cache}: {a} vs {b}"] = entry
    return found


def flag_order_table(run_dir: Path) -> FlagOrderResults:
    loaded = Manifest.load(run_dir)
    infos = loaded.run.passes
    cells_in = {name: cell_spec(name, cell) for name, cell in loaded.run.cells.items()}
    passes = OkPasses(run_dir, infos)
    cells = {name: _cell(run_dir, passes, infos, cell) for name, cell in cells_in.items()}
    # every cell on servers of its own, its cache-on passes on one server exactly where its lifetime is shared
    sessions = [s for c in cells.values() for s in c.server.sessions]
    fresh = (all(c.server.one_server == (c.lifetime == "shared") for c in cells.values())
             and len(set(sessions)) == len(sessions)) if sessions else None
    return FlagOrderResults(table="flag_order", run_id=loaded.run_id,
                            files={"flag_order": RunPaths.result_name("flag_order"),
                                   "flag_order_csv": RunPaths.result_name("flag_order", ".csv")},
                            cells=cells, void_passes=[VoidPass(pass_=p, status=i.status, reason=i.reason)
                                                      for p, i in infos.items() if p not in passes.ok],
                            orders=_orders(passes, cells_in, cells), fresh_server_per_arm=fresh)


CSV_FIELDS = ("cell", "prompt_cache", "lifetime", "order", "pass_a", "pass_b", "episodes", "diverged", "rate", "lo", "hi",
              "q1", "q2", "q3", "q4", "trend_p", "path_diverged", "path_episodes", "requests_first_pass")


def _row(name: str, c: Cell) -> CsvRow:
    r2r, path = c.run_to_run.to_json(), c.path.to_json() if c.path else {}
    quartiles = c.run_to_run.quartiles
    row: CsvRow = {"cell": name, "prompt_cache": c.prompt_cache, "lifetime": c.lifetime, "order": c.order,
           "pass_a": c.run_to_run.passes[0], "pass_b": c.run_to_run.passes[1], "episodes": r2r.get("episodes"),
           "diverged": r2r.get("diverged"), "rate": r2r.get("rate"),
           "lo": getattr(c.run_to_run.interval, "lo", None), "hi": getattr(c.run_to_run.interval, "hi", None),
           "trend_p": quartiles.trend.get("p") if quartiles else None, "path_diverged": path.get("diverged"),
           "path_episodes": path.get("episodes"), "requests_first_pass": c.requests_first_pass}
    if quartiles:  # one count per quartile (quartile_split)
        row["q1"], row["q2"], row["q3"], row["q4"] = quartiles.diverged
    return row


def write(run_dir: Path) -> dict[str, Any]:
    """Compute the flag × order results and write results/flag_order.json and results/flag_order.csv."""
    table = flag_order_table(run_dir)
    rows = [_row(name, c) for name, c in table.cells.items()]
    return write_results(run_dir, table, "flag_order", "flag_order", CSV_FIELDS, rows)
