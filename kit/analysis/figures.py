"""Figures in the spirit of the paper's Figs. 1–3, drawn from findings (never from records directly),
as PNG and PDF, each with the data it draws beside it as JSON (`<stem>.json`: every bar, point and
interval): images differ between matplotlib versions, their data does not, so `kit verify` recomputes
and compares the data (`figure_data`). matplotlib is imported here only, with the Agg backend (no
display needed)."""

from __future__ import annotations

from pathlib import Path

from typing import Any

from kit.analysis.findings_model import Findings, GridRun, SweepFindings
from kit.core.atomic_file import write_json_atomic, writing
from kit.engines import registry

FEW_POSITIONS = 20  # Fig. 3: a margin bin with fewer positions is hatched and labelled with its n, not drawn as a rate
COMPARISON_LABELS = (("off_r2r", "run-to-run\ncache off"), ("on_r2r", "run-to-run\ncache on"),
                     ("path", "path\n(on vs off)"))


def import_pyplot():
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def _save(fig, folder: Path, stem: str) -> list[str]:
    files = []
    for ext in ("png", "pdf"):
        with writing(folder / f"{stem}.{ext}", "wb") as fh:
            fig.savefig(fh, format=ext, dpi=150, bbox_inches="tight")
        files.append(f"figures/{stem}.{ext}")
    return files


def _run_label(g: GridRun) -> str:
    engine = registry.said_in(g.engine)
    if engine is None or not engine.server_prompt_cache:
        return f"{g.engine} {g.model}\n{g.format}"
    cache = "prompt cache off" if g.cache_ram == 0 else "prompt cache default"
    return f"{g.engine} {g.model}\n{g.format}, {cache}"


def data_1(findings: Findings) -> dict[str, Any]:
    """Figure 1's data: one group per grid run (its label), one bar per comparison with its interval."""
    from kit.analysis.collect import format_rank  # noqa: PLC0415

    grid = [g for g in findings.grid or [] if any("interval" in c for c in g.comparisons.values())]
    if not grid:
        raise LookupError("no grid run with a comparison")
    # engine, model and format are absent from older findings: such a run sorts first instead of ending the figure
    grid.sort(key=lambda g: (g.engine or "", g.model or "", format_rank(g.format or ""), g.cache_ram == 0))
    return {"groups": [{"label": _run_label(g), "bars": {
        key: {k: interval[k] for k in ("rate", "lo", "hi", "k", "n")}
        for key, _ in COMPARISON_LABELS if (interval := (g.comparisons.get(key) or {}).get("interval"))}}
        for g in grid]}


def figure_1(data: dict[str, Any], folder: Path) -> list[str]:
    """Divergence bars with their intervals for every grid run: run-to-run (off, on) and path."""
    grid = data["groups"]
    plt = import_pyplot()
    fig, ax = plt.subplots(figsize=(min(14.0, max(5.0, 1.25 * len(grid) + 2)), 4.0))
    width = 0.8 / len(COMPARISON_LABELS)
    colors = ("#9e9e9e", "#4c72b0", "#c44e52")
    for j, ((key, label), color) in enumerate(zip(COMPARISON_LABELS, colors)):
        xs: list[float] = []
        ys: list[float] = []
        err: list[list[float]] = [[], []]  # below, above each bar
        for i, g in enumerate(grid):
            interval = g["bars"].get(key)
            if not interval:
                continue
            xs.append(i + (j - 1) * width)
            ys.append(100 * interval["rate"])
            err[0].append(100 * (interval["rate"] - interval["lo"]))
            err[1].append(100 * (interval["hi"] - interval["rate"]))
            ax.annotate(f"{interval['k']}/{interval['n']}", (xs[-1], 100 * interval["hi"]), ha="center",
                        va="bottom", fontsize=6 if len(grid) > 4 else 7, xytext=(0, 2), textcoords="offset points",
                        rotation=90 if len(grid) > 6 else 0)
        ax.bar(xs, ys, width, yerr=err, capsize=3, color=color, label=label.replace("\n", " "))
    many = len(grid) > 4
    ax.set_xticks(range(len(grid)), [g["label"] for g in grid], fontsize=7 if many else 8,
                  rotation=30 if many else 0, ha="right" if many else "center")
    ax.set_ylabel("episodes diverged (%)")
    ax.set_ylim(0, 118)
    ax.set_yticks(range(0, 101, 20))
    ax.set_title("Where the divergence comes from (dependence-aware 95% intervals;\n"
                 "Wilson where the bootstrap is degenerate; labels: diverged/episodes)", fontsize=9, pad=24)
    ax.legend(fontsize=8, frameon=False, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3)
    ax.spines[["top", "right"]].set_visible(False)
    files = _save(fig, folder, "fig1_divergence")
    plt.close(fig)
    return files


def data_2(findings: Findings) -> dict[str, Any]:
    """Figure 2's data: per format the per-history rates and their mean with its interval (sweep), and the
    grid's single-history path divergence (production default first)."""
    from kit.analysis.collect import format_rank  # noqa: PLC0415

    sweep = findings.sweep or SweepFindings()
    boot = sweep.bootstrap
    grid_rows = findings.table("V").rows
    if "formats" not in boot and not grid_rows:
        raise LookupError("no sweep with a two-way bootstrap and no grid path divergence")
    formats = [f["label"] for f in boot.get("formats", [])]
    sweep_models = {r.model for r in findings.runs_of_kind("sweep")}
    grid_by_format: dict[str, float] = {}
    for r in sorted(grid_rows, key=lambda r: r.get("prompt_cache") != "default"):  # production default first
        if not sweep_models or r["model"] in sweep_models:
            grid_by_format.setdefault(r["format"], r["path_rate"])
    return {"axis": formats or sorted(grid_by_format, key=format_rank), "n_histories": boot.get("n_histories"),
            "per_history": {f: sweep.per_history_rates[f] for f in formats},
            "mean": [{k: f[k] for k in ("label", "rate", "lo", "hi")} for f in boot.get("formats", [])],
            "grid": grid_by_format}


def figure_2(data: dict[str, Any], folder: Path) -> list[str]:
    """Path divergence by weight format: per-history dots, the mean with its two-way interval, and the
    single-history grid as a dashed line."""
    plt = import_pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    means = data["mean"]
    for i, f in enumerate(m["label"] for m in means):
        rates = data["per_history"][f]
        jitter = [(k - (len(rates) - 1) / 2) * 0.02 for k in range(len(rates))]
        ax.scatter([i + j for j in jitter], [100 * r for r in rates], s=12, color="#9e9e9e", zorder=2,
                   label="one random history" if i == 0 else None)
    if means:
        ys = [100 * m["rate"] for m in means]
        err = [[y - 100 * m["lo"] for y, m in zip(ys, means)], [100 * m["hi"] - y for y, m in zip(ys, means)]]
        ax.errorbar(range(len(means)), ys, yerr=err, color="#c44e52", marker="o", capsize=4, zorder=3,
                    label=f"mean of {data['n_histories']} histories (95% CI, episodes x histories)")
    axis, grid_by_format = data["axis"], data["grid"]
    xs = [axis.index(f) for f in axis if f in grid_by_format]
    if xs:
        ax.plot(xs, [100 * grid_by_format[axis[x]] for x in xs], linestyle="--", color="#4c72b0", marker="s",
                markersize=4, label="grid (production default), one history", zorder=1)
    ax.set_xticks(range(len(axis)), axis)
    ax.set_xlabel("weight format")
    ax.set_ylabel("path divergence (% of episodes)")
    ax.set_ylim(-3, 103)
    ax.legend(fontsize=7, frameon=False, loc="lower right")
    ax.spines[["top", "right"]].set_visible(False)
    files = _save(fig, folder, "fig2_formats")
    plt.close(fig)
    return files


def _bin_label(b: dict[str, Any]) -> str:
    hi = "∞" if b["hi"] is None else f"{b['hi']:g}"
    return f"[{b['lo']:g},{hi})"


def data_3(findings: Findings) -> dict[str, Any]:
    """Figure 3's data: the mechanism block it draws (sweep, grid or reset runs): per format the hazard bins
    and the |Δmargin| summary."""
    source = next((s for s in ("sweep", "grid", "reset") if s in findings.mechanism and findings.mechanism[s].formats),
                  None)
    if source is None:
        raise LookupError("no run with top-2 or deeper log-probabilities on both paths")
    block = findings.mechanism[source]
    return {"source": source, "top_k": block.top_k if "top_k" in block.model_fields_set else "k",
            "formats": block.formats,
            "per_format": {f: {"hazard": {"bins": block.per_format[f]["hazard"]["bins"]},
                               "delta_margin": block.per_format[f]["delta_margin"]} for f in block.formats}}


def figure_3(block: dict[str, Any], folder: Path) -> list[str]:
    """(a) Flip hazard by recompute-path margin per format; (b) |Δmargin| at non-flipped positions."""
    source, formats = block["source"], block["formats"]
    plt = import_pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / len(formats)
    bins = block["per_format"][formats[0]]["hazard"]["bins"]
    thin = False
    for j, f in enumerate(formats):
        hb = [b for b in block["per_format"][f]["hazard"]["bins"] if b["positions"]]
        xs = [i + (j - (len(formats) - 1) / 2) * width for i, b in enumerate(block["per_format"][f]["hazard"]["bins"])
              if b["positions"]]
        for x, b in zip(xs, hb):
            few = b["positions"] < FEW_POSITIONS
            thin = thin or few
            lo = b["ci_lo"] if b["ci_lo"] is not None else b["hazard"]
            hi = b["ci_hi"] if b["ci_hi"] is not None else b["hazard"]
            left.bar([x], [100 * b["hazard"]], width, yerr=None if few else [[100 * (b["hazard"] - lo)],
                                                                              [100 * (hi - b["hazard"])]],
                     capsize=2, color="none" if few else f"C{j}", edgecolor=f"C{j}", hatch="///" if few else None,
                     alpha=0.45 if few else 1.0, label=f if x == xs[0] else None)
            if few:
                left.annotate(f"n={b['positions']}", (x, 100 * b["hazard"]), ha="center", va="bottom", fontsize=7,
                              xytext=(0, 2), textcoords="offset points", color=f"C{j}")
            elif len(formats) <= 2:
                left.annotate(f"{b['flips']}/{b['positions']}", (x, 0), ha="center", va="bottom", fontsize=6,
                              xytext=(0, 2), textcoords="offset points", rotation=90)
    left.set_ylim(0, max(5.0, left.get_ylim()[1]))
    left.set_xticks(range(len(bins)), [_bin_label(b) for b in bins], fontsize=8)
    left.set_xlabel("top-two margin on the recompute path (logits)")
    left.set_ylabel("positions that flip (%)")
    left.set_title("(a) flip hazard by margin (95% CI, bootstrap over episodes)" + (
        f"\nhatched: fewer than {FEW_POSITIONS} positions (n shown), no interval drawn" if thin else ""), fontsize=9)
    left.legend(fontsize=8, frameon=False)
    stats = [block["per_format"][f]["delta_margin"] for f in formats]
    for i, s in enumerate(stats):
        if not s.get("n"):
            continue
        right.vlines(i, s["p10"], s["p90"], color=f"C{i}", linewidth=1)
        right.vlines(i, s["q1"], s["q3"], color=f"C{i}", linewidth=6)
        right.plot(i, s["median"], marker="o", color="white", markeredgecolor=f"C{i}", zorder=3)
        right.annotate(f"n={s['n']}", (i, s["p90"]), ha="center", va="bottom", fontsize=7, xytext=(0, 2),
                       textcoords="offset points")
    right.set_xticks(range(len(formats)), formats)
    right.set_yscale("symlog", linthresh=1e-3)
    right.margins(y=0.15)
    right.set_ylabel("|Δ top-two margin| (logits)")
    right.set_title("(b) cache-path change at non-flipped positions\n(median, IQR, 10th-90th percentile)",
                    fontsize=9)
    for ax in (left, right):
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(f"Mechanism from top-{block['top_k']} log-probabilities ({source} runs)", fontsize=10,
                 y=1.04)
    files = _save(fig, folder, "fig3_mechanism")
    plt.close(fig)
    return files


FIGURES = {"fig1": (data_1, figure_1, "fig1_divergence"), "fig2": (data_2, figure_2, "fig2_formats"),
           "fig3": (data_3, figure_3, "fig3_mechanism")}


def figure_data(findings: Findings) -> dict[str, Any]:
    """What each figure draws, by figure: {"data": {stem: data}, "skipped": {name: reason}} (nothing drawn)."""
    out: dict[str, Any] = {"data": {}, "skipped": {}}
    for name, (data, _, stem) in FIGURES.items():
        try:
            out["data"][stem] = data(findings)
        except LookupError as exc:
            out["skipped"][name] = str(exc)
    return out


def listing(figures: dict[str, Any]) -> dict[str, Any]:
    """The files `write_all` writes for `figure_data`'s result, as findings.json lists them."""
    written: dict[str, Any] = {"skipped": dict(figures["skipped"])}
    for name, (_, _, stem) in FIGURES.items():
        if stem in figures["data"]:
            written[name] = [f"figures/{stem}.{ext}" for ext in ("png", "pdf", "json")]
    return written


def _draw(stem: str, data: dict[str, Any], folder: Path) -> None:
    """Draw one figure from its data and write the data beside it (one `write_all` item)."""
    draw = next(draw for _, draw, name in FIGURES.values() if name == stem)
    draw(data, folder)
    write_json_atomic(folder / f"{stem}.json", data)


def _drawing_cost(stem: str, data: dict[str, Any], folder: Path) -> float:
    """How much drawing a figure costs, roughly: the size of its data (the mechanism's figure, the largest, takes
    longest). `write_all` starts the costliest first, so that the last figure does not run alone."""
    return len(repr(data))


def write_all(findings: Findings, folder: Path, workers: int = 1) -> dict[str, Any]:
    """Draw every figure the findings allow, each with its data beside it; the others are listed with the
    reason they were skipped. With `workers` above one, the figures are drawn side by side in worker processes,
    the costliest first (kit.analysis.parallel.parallel_map; matplotlib is imported here first, so that they
    start with it)."""
    from kit.analysis.parallel import parallel_map  # noqa: PLC0415

    folder.mkdir(parents=True, exist_ok=True)
    figures = figure_data(findings)
    items = [(stem, figures["data"][stem], folder) for _, _, stem in FIGURES.values() if stem in figures["data"]]
    if workers > 1 and len(items) > 1:
        import_pyplot()
    parallel_map(_draw, items, workers, _drawing_cost)
    return listing(figures)
