"""The atlas: one row per engine x build x machine x CPU backend x model x weight format x cache setting x server
binary or image (the engine facets kit replay compares: kit.replay.comparison.engine_facets), its
columns the ladder's rungs, the paper's measures (Tables IV-VII with their intervals), replay identity
with the other rows and the size of the runs behind it. A cell that cannot be compared says why.

Built only from verified runs (kit.atlas.sources); every value is data, rendered by kit.atlas.render.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kit.analysis.collect import model_label, weight_format
from kit.atlas.sources import AtlasRun, Outputs
from kit.compare.measures import MEASURES, ROWS, Measured
from kit.compare.run_rows import FindingsShape, read_rows
from kit.launch.gpu_setup import LLAMACPP_SHORT
from kit.replay.comparison import cpu_backend, engine_facets, server_binary
from kit.run import engine_build

PAPER_TABLES = ("IV", "V", "VI", "VII")
ISA_SHOWN = ("avx2", "fma", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16")  # what tells machine code apart
KEY_NAMES = ("engine", "build", "machine", "CPU backend", "model", "weight format", "cache setting",
             "server binary or image")


@dataclass(frozen=True)
class Cell:
    """A value as text, or (why set) a cell that cannot be compared and the reason."""

    text: str = ""
    why: str | None = None

    @property
    def shown(self) -> str:
        return self.text if self.why is None else f"cannot be compared: {self.why}"

    @property
    def brief(self) -> str:
        return self.text if self.why is None else f"n/a: {self.why}"


@dataclass(frozen=True)
class Column:
    key: str
    group: str  # "ladder", "Table IV", ..., "replay identity", "size"
    label: str
    what: str  # the full description (a legend line)


@dataclass
class Row:
    key: tuple[str, ...]
    runs: list[AtlasRun] = field(default_factory=list)
    cells: dict[str, Cell] = field(default_factory=dict)


@dataclass
class Atlas:
    rows: list[Row]
    columns: list[Column]
    notes: list[str] = field(default_factory=list)

    def cell(self, row: Row, column: Column) -> Cell:
        return row.cells.get(column.key) or Cell(why=_absent(row, column))


def _absent(row: Row, column: Column) -> str:
    kinds = sorted({str(run.manifest.protocol.kind) for run in row.runs})
    if column.group == "ladder":
        return f"no ladder run in this row (its runs: {', '.join(kinds)})"
    return f"not measured by this row's runs ({', '.join(kinds)})"


def _build(run: AtlasRun) -> str:
    """The llama.cpp sdist build, else llama-server's build_info (the paper's marked): as kit replay compares
    them (engine_facets)."""
    facets = engine_facets(run.manifest)
    if engine_build.recorded_build(run.manifest.engine.to_json()) is not None:
        return str(facets["llama.cpp build (sdist)"])
    info = facets["engine build"]
    return f"{info} (the paper's build)" if info and LLAMACPP_SHORT in str(info) else str(info or "not recorded")


def _binary(run: AtlasRun) -> str:
    """The server binary and the container image the run recorded (engine_facets); the kit's own engine else."""
    binary, label = server_binary(run.manifest)
    image = engine_facets(run.manifest)["engine image"]
    return "; ".join([*([label] if binary else []), *([f"image {image}"] if image else [])]) or label


def _machine(run: AtlasRun) -> str:
    host = run.manifest.provenance.host or {}
    gpus = host.get("gpus") or []
    if gpus:
        return "; ".join(str(g.get("name") if isinstance(g, dict) else g) for g in gpus) + \
            (f", driver {gpus[0].get('driver')}" if isinstance(gpus[0], dict) and gpus[0].get("driver") else "")
    return f"{host.get('cpu') or 'CPU not recorded'}, {host.get('cores') or '?'} cores, {host.get('machine') or '?'}"


def _backend(run: AtlasRun) -> str:
    """The CPU backend as kit replay names it, with the extensions of its machine code that tell backends
    apart; else the CPU backend a llama.cpp sdist build was made for."""
    named = cpu_backend(run.manifest)
    cpu = run.manifest.provenance.cpu_backend
    built = (run.manifest.engine.to_json().get("engine_build") or {})
    if named is not None and isinstance(cpu, dict):
        isa = " ".join(flag for flag in cpu.get("isa") or [] if flag in ISA_SHOWN)
        return f"{named}{'; ' + isa if isa else ''}"
    if isinstance(built, dict) and built.get("cpu_backend"):
        return f"{built['cpu_backend']} (static llama-server {str(built.get('binary_sha256'))[:12]}…)"
    return "not recorded (a user's server binary or a container)"


def _model(run: AtlasRun) -> str:
    """The model's short name (kit.analysis.collect.model_label) and the sha256 of the file served."""
    digest = run.manifest.engine.model_sha256
    return f"{model_label(run.manifest)} (sha256 {digest[:12]}…)" if digest else \
        f"{model_label(run.manifest)} (sha256 not recorded)"


def _cache(run: AtlasRun) -> str:
    ram = run.manifest.engine.cache_ram
    return f"--cache-ram {ram}" if ram is not None else "--cache-ram engine default"


def row_key(run: AtlasRun) -> tuple[str, ...]:
    engine = run.manifest.engine
    name = str(engine.engine_kind or engine.engine or engine.kind or "unknown")
    return (name.split(" (")[0].split(" of llama.cpp build")[0], _build(run), _machine(run), _backend(run),
            _model(run), weight_format(run.manifest), _cache(run), _binary(run))


def _rate(m: Measured, kind: str = "rate") -> str:
    if m.sessions:
        return "; ".join(f"s{i + 1} {_rate(s)}" for i, s in enumerate(m.sessions))
    if m.value is None:
        return "—"
    if kind == "p_value":
        return f"p = {m.value:.3g}"
    if kind in ("odds_ratio",):
        interval = f" [{m.lo:.2f}–{m.hi:.2f}]" if m.lo is not None and m.hi is not None else ""
        return f"{m.value:.2f}{interval}"
    counts = f" ({m.k}/{m.n})" if m.k is not None and m.n is not None else ""
    interval = f" [{m.lo:.0f}–{m.hi:.0f}]" if m.lo is not None and m.hi is not None else ""
    return f"{m.value:.1f}%{interval}{counts}"


def _ladder_cells(run: AtlasRun, columns: dict[str, Column]) -> dict[str, Cell]:
    table = run.results.get("ladder") or {}
    cells: dict[str, Cell] = {}
    seen: dict[str, int] = {}
    for row in table.get("rungs") or []:
        rung = str(row.get("rung"))
        seen[rung] = seen.get(rung, 0) + 1
        key = f"ladder:{rung}:{seen[rung]}"
        columns.setdefault(key, Column(key, "ladder", rung if seen[rung] == 1 else f"{rung}·{seen[rung]}",
                                       str(row.get("what"))))
        status = str(row.get("status"))
        if status == "not measured":
            cells[key] = Cell(why=f"not measured here: {row.get('reason')}")
        elif status == "VOID":
            cells[key] = Cell(why=f"VOID: {row.get('reason')}")
        else:
            lo, hi = (row.get("interval") or [None, None])[:2]
            interval = f" [{100 * lo:.0f}–{100 * hi:.0f}%]" if lo is not None and hi is not None else ""
            cells[key] = Cell(f"{status} {row.get('identical')}/{row.get('pairs')} identical{interval}")
    return cells


def _paper_cells(run: AtlasRun, columns: dict[str, Column]) -> dict[str, Cell]:
    cells: dict[str, Cell] = {}
    if run.findings is None:
        return cells
    for table in PAPER_TABLES:
        try:
            found = read_rows(run.findings, (table, ROWS))
        except FindingsShape as exc:
            for quantity in MEASURES[(table, ROWS)]:
                cells[f"{table}:{quantity}"] = Cell(why=f"its analysis is malformed ({exc})")
            continue
        for number, row in enumerate(found, 1):  # a table's further rows numbered as a rung's: IV:paths_differ·2
            for quantity, measure in MEASURES[(table, ROWS)].items():
                key = f"{table}:{quantity}" + (f"·{number}" if number > 1 else "")
                if quantity in row.measures:
                    cells[key] = Cell(_rate(row.measures[quantity], measure.kind))
                elif quantity in row.missing:
                    cells[key] = Cell(why=row.missing[quantity])
                else:
                    continue
                columns.setdefault(key, Column(key, f"Table {table}", quantity if number == 1 else f"{quantity}·{number}",
                                               measure.label if number == 1 else
                                               f"{measure.label} (row {number} of the run's Table {table})"))
    return cells


def _merge(into: dict[str, Cell], cells: dict[str, Cell]) -> None:
    """Cells of a row's runs side by side: values joined with " | "; where no run could compare the cell, it
    stays one that cannot be compared, with each distinct reason."""
    for key, cell in cells.items():
        old = into.get(key)
        if old is None:
            into[key] = cell
        elif old.why is not None and cell.why is not None:
            into[key] = Cell(why=old.why if cell.why in old.why.split(" | ") else f"{old.why} | {cell.why}")
        else:
            into[key] = Cell(f"{old.shown} | {cell.shown}")


def identical(one: Outputs, other: Outputs) -> tuple[int, int]:
    """Of the requests both asked (same pass, seq and request digest), how many got byte-identical outputs,
    and how many they share: replay identity, as the atlas's column and `kit bisect --rung outputs` (or, on
    AtlasRun.numbers, `--rung logprobs`) judge it."""
    shared = one.keys() & other.keys()
    return sum(one[k] == other[k] for k in shared), len(shared)


def _identity(rows: list[Row]) -> None:
    """Per row: against every other row, of the requests both asked (same pass, seq and request digest), how
    many got byte-identical outputs."""
    outputs = [{k: v for run in row.runs for k, v in run.outputs.items()} for row in rows]
    for i, row in enumerate(rows):
        parts, shared_any = [], False
        for j in range(len(rows)):
            if i == j:
                continue
            same, shared = identical(outputs[i], outputs[j])
            if not shared:
                parts.append(f"#{j + 1}: no request in common")
                continue
            shared_any = True
            parts.append(f"#{j + 1}: {same}/{shared} identical")
        row.cells["identity"] = Cell("; ".join(parts)) if shared_any else \
            Cell(why="no other row asked the same requests (same pass, seq and request digest)"
                 if len(rows) > 1 else "the only row")


def build(runs: list[AtlasRun]) -> Atlas:
    """The atlas of verified runs: rows in input order of their first run, columns in order of appearance."""
    by_key: dict[tuple[str, ...], Row] = {}
    columns: dict[str, Column] = {}
    for run in runs:
        key = row_key(run)
        row = by_key.setdefault(key, Row(key))
        row.runs.append(run)
        _merge(row.cells, _ladder_cells(run, columns))
        _merge(row.cells, _paper_cells(run, columns))
    rows = list(by_key.values())
    _identity(rows)
    for row in rows:
        passes = sum(len(run.manifest.passes) for run in row.runs)
        row.cells["size"] = Cell(f"{len(row.runs)} run(s): " + ", ".join(
            f"{run.manifest.protocol.name} {run.requests} requests" for run in row.runs) + f"; {passes} passes")
    ordered = sorted(columns.values(), key=lambda c: (c.group != "ladder", c.group))
    ordered += [Column("identity", "replay identity", "same requests → identical outputs",
                       "against every other row: of the requests both asked (same pass, seq and request digest), "
                       "how many got byte-identical outputs (the same prompt, tokens and text, as kit replay "
                       "compares them)"),
                Column("size", "size", "runs, requests, passes", "the runs behind the row and their size")]
    notes = [f"{run.source}: {note}" for run in runs for note in run.notes]
    return Atlas(rows, ordered, notes)


def key_cells(row: Row) -> dict[str, str]:
    return dict(zip(KEY_NAMES, row.key))


def csv_rows(atlas: Atlas) -> list[dict[str, Any]]:
    """One dict per row: its key, then every column's text (a cell that cannot be compared says so)."""
    return [{**key_cells(row), "runs": " ".join(run.source for run in row.runs),
             **{f"{c.group}: {c.label}": atlas.cell(row, c).shown for c in atlas.columns}} for row in atlas.rows]
