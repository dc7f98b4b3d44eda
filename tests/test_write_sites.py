"""Every write of kit/ goes through the one place that never writes through a file the kit did not make
(docs/security.md, rule 2): `kit.core.atomic_file` (a file made anew, then renamed into place) or
`kit.core.owned_file` (appending to a file, checked on its descriptor: regular, one name, ours).

The modules are read with `ast`; a write site is a call that opens a file for writing (`open`, `.open`,
`os.fdopen` with a mode that writes, `os.open`), writes a path whole (`.write_text`, `.write_bytes`,
`.touch`), copies or moves files (`shutil.copy*`, `shutil.move`), or saves a figure (`.savefig`). A site
outside those two modules must be on REVIEWED, with why it cannot write through a stranger's file; a new
one fails this test until it is routed through them or reviewed, and a reviewed one that is gone fails
it too (the list stays true).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
from tests.source_trees import syntax_tree

REPO = Path(__file__).resolve().parents[1]
KIT = REPO / "kit"
THE_WRITERS = {"kit/core/atomic_file.py", "kit/core/owned_file.py"}
WRITING_MODE = set("wax+")
WRITING_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}
WHOLE_FILE_WRITES = {"write_text", "write_bytes", "touch"}
FILE_COPIES = {"copy", "copy2", "copyfile", "copytree", "move"}

# why a write site cannot write through a stranger's file, where several sites share the reason
INTO_ATOMIC_FILE = "into the file object `atomic_file.writing` made"
STAGING_FILE = "a staging file made anew by atomic_file.staging_path"
CACHE_LOG = "a build's log in the kit's cache"
CACHE_STAGING = "a built file into the cache's staging folder"


def _reviewed(module: str, *sites: tuple[str, int, str]) -> dict[tuple[str, str], tuple[int, str]]:
    """REVIEWED's entries for `module`, each site given as (what, how many such sites, why)."""
    return {(module, what): (count, why) for what, count, why in sites}


# (module, what) -> (how many such sites, why each writes only where no stranger's file can be)
REVIEWED: dict[tuple[str, str], tuple[int, str]] = {
    **_reviewed("kit/analysis/figures.py", ("savefig", 1, INTO_ATOMIC_FILE)),
    **_reviewed("kit/protocols/ladder/view.py", ("savefig", 1, INTO_ATOMIC_FILE)),
    **_reviewed("kit/bundle/writer.py", (".open(wb)", 1, f"the bundle's tar.gz, {STAGING_FILE}")),
    **_reviewed("kit/bundle/recompute.py",
                ("shutil.copy2", 1, "into a temporary folder verify makes for the recomputation"),
                ("shutil.copytree", 1, "into the same temporary folder")),
    **_reviewed("kit/bundle/safe_tar.py",
                (".open(xb)", 1, "O_CREAT|O_EXCL in the extraction's own new staging folder"),
                ("shutil.move", 1, "the checked staging folder moved to a destination that must not exist")),
    **_reviewed("kit/importers/determinism_harness.py",
                (".open(xb)", 1, "O_CREAT|O_EXCL in the run folder the import makes (mkdir without exist_ok)"),
                ("write_bytes", 2, "into records/imported/, made new by the same import")),
    **_reviewed("kit/launch/docker/images.py",
                (".open(w)", 1, CACHE_LOG),
                ("shutil.copy2", 4, "into a build context the kit makes in a new temporary folder")),
    **_reviewed("kit/launch/cpu/portable_backend.py",
                (".open(a)", 1, CACHE_LOG), ("shutil.copy2", 1, CACHE_STAGING),
                ("write_text", 2, "the build log in the kit's cache; a source patch inside the build's own temporary "
                                  "folder (the extracted sdist)")),
    **_reviewed("kit/launch/llamacpp/llamacpp_sdist.py",
                (".open(wb)", 1, "an sdist download into the kit's cache (a .part file, renamed once whole)")),
    **_reviewed("kit/launch/llamacpp/llamacpp_build.py", ("shutil.copy2", 1, CACHE_STAGING),
                (".open(a)", 1, "a build's lock file in the kit's cache, held with flock; nothing is written to it")),
    **_reviewed("kit/models/sources.py", ("open(wb)", 1, "a model download into the model cache's staging file")),
    **_reviewed("kit/record/docs.py",
                ("write_text", 2, "the repository's generated docs (a maintainer's tool, not a run)")),
    **_reviewed("kit/run/model_shipping.py", (".open(wb)", 1, f"a shipped model into the node's model cache, "
                                                              f"{STAGING_FILE}")),
    **_reviewed("kit/workloads/bfcl/confinement.py",
                ("write_text", 3, "/proc/self uid and gid maps of the confined worker")),
    **_reviewed("kit/workloads/bfcl/provision.py",
                ("write_text", 1, "BFCL's install marker in the cache's new staging folder")),
    **_reviewed("kit/workloads/bfcl/worker.py", ("os.fdopen(w)", 1, "the confined worker's own stdout")),
}


def _mode(node: ast.Call, position: int) -> str | None:
    """The call's mode argument (positional `position`, or mode=) when it is a literal string."""
    found = node.args[position] if len(node.args) > position else next(
        (kw.value for kw in node.keywords if kw.arg == "mode"), None)
    return found.value if isinstance(found, ast.Constant) and isinstance(found.value, str) else None


def write_site(node: ast.Call) -> str | None:
    """What kind of write `node` is (its key in REVIEWED), or None when it writes no file."""
    func = node.func
    if isinstance(func, ast.Name) and func.id == "open":
        mode = _mode(node, 1) or "r"
        return f"open({mode})" if WRITING_MODE & set(mode) else None
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value.id if isinstance(func.value, ast.Name) else None
    if owner == "os" and func.attr == "open":
        flags = {n.attr for arg in node.args[1:2] for n in ast.walk(arg) if isinstance(n, ast.Attribute)}
        return "os.open" if flags & WRITING_FLAGS or not node.args[1:2] else None
    if owner == "os" and func.attr == "fdopen":
        mode = _mode(node, 1) or "r"
        return f"os.fdopen({mode[0]})" if WRITING_MODE & set(mode) else None
    if owner == "shutil" and func.attr in FILE_COPIES:
        return f"shutil.{func.attr}"
    if func.attr == "open" and owner not in {"tarfile", "zipfile", "os"}:
        mode = _mode(node, 0) or "r"
        return f".open({mode})" if WRITING_MODE & set(mode) else None
    if func.attr in WHOLE_FILE_WRITES or func.attr == "savefig":
        return func.attr
    return None


def write_sites(root: Path) -> dict[tuple[str, str], list[int]]:
    """(module, kind) -> the lines of each write site under `root` (the two writer modules left out)."""
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root.parent).as_posix()
        if module in THE_WRITERS:
            continue
        for node in ast.walk(syntax_tree(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Call) and (kind := write_site(node)):
                found.setdefault((module, kind), []).append(node.lineno)
    return found


def test_every_write_goes_through_the_one_writer_or_is_reviewed():
    found = write_sites(KIT)
    unreviewed = [f"{module}:{line} {kind}" for (module, kind), lines in found.items() for line in lines
                  if (module, kind) not in REVIEWED]
    assert not unreviewed, ("writes that bypass kit.core.atomic_file / kit.core.owned_file (route them through "
                            "those, or review them here): " + "; ".join(unreviewed))
    counts = {key: len(lines) for key, lines in found.items() if key in REVIEWED}
    changed = {key: (counts.get(key, 0), n) for key, (n, _) in REVIEWED.items() if counts.get(key, 0) != n}
    assert not changed, f"reviewed write sites changed (found, reviewed): {changed}"


def test_the_scan_finds_each_kind_of_write(tmp_path):
    package = tmp_path / "kit"
    package.mkdir()
    (package / "m.py").write_text(
        "import os, shutil\n"
        "open(p, 'w'); open(p); p.open('ab'); p.open('rb'); p.open(mode='x')\n"
        "p.write_text('t'); p.write_bytes(b''); p.touch(); os.open(p, os.O_RDONLY); os.open(p, os.O_RDWR | x)\n"
        "shutil.copy2(a, b); shutil.move(a, b); fig.savefig(p); os.fdopen(1, 'w'); os.fdopen(0)\n"
        "tarfile.open(p); p.read_text()\n")
    kinds = Counter(kind for (_, kind), lines in write_sites(package).items() for _ in lines)
    assert kinds == Counter({"open(w)": 1, ".open(ab)": 1, ".open(x)": 1, "write_text": 1, "write_bytes": 1,
                             "touch": 1, "os.open": 1, "shutil.copy2": 1, "shutil.move": 1, "savefig": 1,
                             "os.fdopen(w)": 1})
