"""The ladder's design: which passes run (each on a fresh server that changes one setting of the
baseline's) and which contrasts pair their outputs into rungs and fixes.

Every pass serves the same prompts; each prompt goes through the pass's steps in order:
`miss` (prefix reuse off: a full recompute, gated on 0 cached tokens), `hit` (reuse on, right after a
miss left the prompt in the slot: gated on ≥ 1 cached token), `prime` + `aligned` (the chunk-aligned
cache: the prompt's prefix up to its last chunk boundary recomputed whole, then the prompt with reuse on,
gated on exactly that boundary cached), `alone` (a K-slot server, one request at a time); a pass with
`batched` then sends the prompts in groups of K at once (`neighbour`: a prompt sent only to fill a group).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kit.protocols.ladder.contrasts import UNFIXED, Contrast

BASE, CONTROL, BATCH, CHUNK, THREADS = "base", "control", "batch", "chunk", "threads"
TP_REASON = "tensor-parallel degree needs several GPUs; this ladder serves llama.cpp on the CPU"
ENGINE_REASON = ("llama.cpp vs vLLM on one model needs vLLM (a GPU) serving this model's own checkpoint; "
                 "the ladder runs on one llama.cpp engine")
MACHINE_REASON = ("another machine: `kit bundle` this run, replay it there (`kit replay BUNDLE`) and `kit compare` "
                  "the two bundles")
NEEDS_START = "needs a server the kit starts"  # by --engine-url: the embedded engine or --server-bin runs it


@dataclass(frozen=True)
class LadderPass:
    """One pass: its id, the steps each prompt goes through, and how its server differs from the baseline's."""

    pass_id: str
    steps: tuple[str, ...]
    batched: bool = False
    threads: int | None = None
    parallel: int | None = None
    chunk: int | None = None
    format: str | None = None
    backend: str | None = None

    def labels(self) -> tuple[str, ...]:
        """A record's `step` is its label's index here: the steps, then `batched` and `neighbour`."""
        return (*self.steps, *(("batched", "neighbour") if self.batched else ()))

    def settings(self) -> dict[str, int | str]:
        return {k: v for k, v in asdict(self).items() if k not in ("pass_id", "steps", "batched") and v is not None}


@dataclass(frozen=True)
class Design:
    """What the run decides before its first pass (the run's own threads and CPU backends): `threads` the
    baseline's `-t`, `other_threads` L4's, `backend` the run's CPU backend (None: a user's binary),
    `other_backend` the one L6 compares with, or `backend_reason` why it cannot."""

    trials: int
    neighbours: int
    chunk: int
    formats: tuple[str, ...]
    threads: int
    other_threads: int
    backend: str | None = None
    other_backend: str | None = None
    backend_reason: str | None = None
    url_slots: int | None = None  # by --engine-url: the server's slots (its passes share it, nothing restarts)


def passes(design: Design) -> list[LadderPass]:
    """Every pass in run order; by URL only those that need no server of their own: the baseline, and L1's
    batch where the server already has `neighbours` slots."""
    if design.url_slots is not None:
        batch = [LadderPass(BATCH, ("alone", "alone"), batched=True)] if design.url_slots >= design.neighbours else []
        return [LadderPass(BASE, ("miss",) * design.trials + ("hit",) * design.trials), *batch]
    plans = [LadderPass(BASE, ("miss",) * design.trials + ("hit",) * design.trials),
             LadderPass(CONTROL, ("miss",)),
             LadderPass(BATCH, ("alone", "alone"), batched=True, parallel=design.neighbours),
             LadderPass(CHUNK, ("miss", "hit", "prime", "aligned"), chunk=design.chunk)]
    if design.other_threads != design.threads:
        plans.append(LadderPass(THREADS, ("miss", "hit"), threads=design.other_threads))
    plans += [LadderPass(format_pass(label), ("miss", "hit") if label == "F16" else ("miss",), format=label)
              for label in design.formats]
    if design.other_backend:
        plans.append(LadderPass(backend_pass(design.other_backend), ("miss", "hit"), backend=design.other_backend))
    return plans


def format_pass(label: str) -> str:
    return f"format-{label}"


def backend_pass(name: str) -> str:
    return f"backend-{name}"


def by_url(design: Design, contrasts: list[Contrast]) -> list[Contrast]:
    """`contrasts` as a run by --engine-url measures them: one that needs a pass it does not run is not measured,
    "needs a server the kit starts" (L1: naming the slots it lacks); a reason of its own is kept."""
    if design.url_slots is None:
        return contrasts
    ran = {p.pass_id for p in passes(design)}
    kept = (TP_REASON, ENGINE_REASON, MACHINE_REASON)
    found = []
    for c in contrasts:
        used = {where[0] for where in (c.ref, c.treat, c.control, c.served) if where}
        if c.not_measured in kept or (used and used <= ran):
            found.append(c)
            continue
        why = NEEDS_START if BATCH not in used else (
            f"{NEEDS_START} (or one started with -np {design.neighbours}: this one has {design.url_slots} slot(s))")
        found.append(Contrast(c.rung, c.what, not_measured=why, fix=c.fix))
    return found


def rungs(design: Design) -> list[Contrast]:
    """Each rung's contrasts against the baseline (`base`, first miss), changing one thing."""
    ref = (BASE, "miss", 0)
    control = (CONTROL, "miss", 0)  # the baseline's setting on a fresh server of its own
    found = [
        Contrast("L0", f"the identical request, {design.trials} times on one server, reuse off", ref, (BASE, "miss")),
        Contrast("L1", f"alone vs beside {design.neighbours - 1} different neighbours ({design.neighbours} slots, "
                       "continuous batching), reuse off", (BATCH, "alone", 0), (BATCH, "batched"), (BATCH, "alone", 1)),
        Contrast("L2", "cache hit vs recompute (the prompt cached by the miss before it)", ref, (BASE, "hit"),
                 (BASE, "miss", 1)),
        Contrast("L3", f"miss with --ubatch-size/--batch-size {design.chunk} vs the default", ref, (CHUNK, "miss"),
                 control),
        Contrast("L3", f"hit with a cached prefix that need not end on a multiple of {design.chunk} vs its miss",
                 (CHUNK, "miss", 0), (CHUNK, "hit")),
        Contrast("L3", f"hit with a cached prefix ending on a multiple of {design.chunk} vs its miss",
                 (CHUNK, "miss", 0), (CHUNK, "aligned")),
    ]
    if design.other_threads != design.threads:
        found.append(Contrast("L4", f"-t {design.other_threads} vs -t {design.threads}", ref, (THREADS, "miss"),
                              control))
    else:
        found.append(Contrast("L4", "threads", not_measured=f"the run's servers already use -t {design.threads}"))
    found.append(Contrast("L4", "tensor-parallel degree", not_measured=TP_REASON))
    found += [Contrast("L5", f"{label} (made here with gguf) vs the run's model", ref, (format_pass(label), "miss"),
                       control) for label in design.formats]
    if not design.formats:
        found.append(Contrast("L5", "quantization scheme", not_measured="the protocol lists no formats"))
    if design.other_backend:
        found.append(Contrast("L6", f"the {design.other_backend} CPU backend vs the {design.backend} one", ref,
                              (backend_pass(design.other_backend), "miss"), control))
    else:
        found.append(Contrast("L6", "the wheel's CPU backend vs the portable one",
                              not_measured=design.backend_reason or "only one CPU backend runs here"))
    found += [Contrast("L6", "llama.cpp vs vLLM", not_measured=ENGINE_REASON),
              Contrast("L7", "the same run on other hardware", not_measured=MACHINE_REASON)]
    return by_url(design, found)


def fixes(design: Design) -> list[Contrast]:
    """L2's fixes, each an arm measured after the fix (its hit against its own miss) with its served
    requests' cost, beside the unfixed arm."""
    found = [
        Contrast("L2", "hit vs miss, default settings", (BASE, "miss", 0), (BASE, "hit"), served=(BASE, "hit"),
                 fix=UNFIXED),
        Contrast("L2", "every request recomputes (cache_prompt false): no hit left; repeats vs the first", (BASE, "miss", 0),
                 (BASE, "miss"), served=(BASE, "miss"), fix="prefix reuse off"),
        Contrast("L2", f"prefix cached up to its last multiple of {design.chunk} (--ubatch-size {design.chunk}), "
                       "then the prompt", (CHUNK, "miss", 0), (CHUNK, "aligned"), served=(CHUNK, "aligned"),
                 fix="chunk-aligned cache", note="the priming requests the kit sends to arrange it are not counted"),
        Contrast("L2", f"hit vs miss with --ubatch-size {design.chunk}, the cached prefix not aligned", (CHUNK, "miss", 0),
                 (CHUNK, "hit"), served=(CHUNK, "hit"), fix=f"chunk {design.chunk}, not aligned",
                 note="the chunk-aligned cache's server without the alignment: what the chunk size alone does"),
    ]
    if design.other_threads == 1 and design.threads != 1:
        found.append(Contrast("L2", "hit vs miss on -t 1", (THREADS, "miss", 0), (THREADS, "hit"),
                              served=(THREADS, "hit"), fix="one thread"))
    else:
        found.append(Contrast("L2", "one thread", fix="one thread", not_measured=(
            f"the run's servers already use -t {design.threads}" if design.threads == 1 else
            "the protocol's L4 thread count is not 1")))
    if "F16" in design.formats:
        found.append(Contrast("L2", "hit vs miss on the F16 file", (format_pass("F16"), "miss", 0),
                              (format_pass("F16"), "hit"), served=(format_pass("F16"), "hit"), fix="F16 weights"))
    else:
        found.append(Contrast("L2", "F16 weights", fix="F16 weights", not_measured="the protocol lists no F16 format"))
    if design.other_backend == "portable":
        found.append(Contrast("L2", "hit vs miss on the portable backend", (backend_pass("portable"), "miss", 0),
                              (backend_pass("portable"), "hit"), served=(backend_pass("portable"), "hit"),
                              fix="portable backend"))
    else:
        found.append(Contrast("L2", "portable backend", fix="portable backend", not_measured=(
            "the run already serves with the portable backend" if design.backend == "portable" else
            design.backend_reason or "the run's server is not the kit's embedded engine")))
    return by_url(design, found)
