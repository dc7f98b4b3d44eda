"""The runner's answer to a server that dies of SIGILL on the wheel's CPU backend.

`auto` trusts the wheel's backend only where /proc/cpuinfo shows every extension it uses, and tries
it when the flags cannot be read. If a server still dies of SIGILL, and nothing has been recorded in
the run yet, the run switches once to the portable backend (built here if needed): the passes begun
so far hold no records, so they move aside (records/superseded/) and start again on the new backend.
After the first record the switch is refused: one run never mixes backends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from kit.core.errors import EngineError, IllegalInstruction
from kit.launch.llamacpp import embedded
from kit.launch.provider import EngineProvider, NativeProvider
from kit.record.manifest import Manifest, now
from kit.core.paths import RunPaths


def recorded_requests(run_dir: Path) -> int:
    """Record lines in the run's pass files (superseded ones not counted)."""
    total = 0
    for path in sorted(RunPaths(run_dir).records.glob("*.jsonl")):
        with path.open("rb") as stream:
            total += sum(1 for line in stream if line.strip())
    return total


def switch(provider: EngineProvider, manifest: Manifest, error: IllegalInstruction,
           say: Callable[[str], None]) -> NativeProvider:
    """The provider on the portable backend, with the manifest saying so; or an EngineError saying why not."""
    if not isinstance(provider, NativeProvider) or provider.cpu is None:
        raise EngineError(f"{error.message}: the server binary uses an instruction this CPU lacks",
                          "use a llama-server built for this CPU (or the embedded engine without --server-bin)")
    cpu = provider.cpu
    if cpu.name != "wheel" or cpu.chosen_by != "auto":
        raise EngineError(f"{error.message} on the {cpu.name} CPU backend (--cpu-backend {cpu.chosen_by})",
                          "run with --cpu-backend portable" if cpu.name == "wheel" else error.fix)
    written = recorded_requests(manifest.run_dir)
    if written:
        raise EngineError(f"{error.message} on the wheel's CPU backend after {written} records were written with it; "
                          "one run never mixes backends", "start a new run with --cpu-backend portable; "
                          "the records so far are kept")
    say("llama-server died of SIGILL on the wheel's CPU backend before anything was recorded: switching to the "
        "portable backend and starting the pass again")
    found = embedded.locate_portable("auto", f"the wheel's CPU backend died of SIGILL ({error.message})", say)
    switched = provider.with_cpu(found.binary, found.env, found.backend)
    for pass_id in list(manifest.run.passes):
        manifest.supersede(pass_id)
    switches = [*manifest.run.cpu_backend_switches,
                {"at": now(), "from": cpu.to_json(), "to": found.backend.name, "why": error.line()}]
    provenance = {**manifest.run.provenance.to_json(), "cpu_backend": found.backend.to_json()}
    manifest.update(provenance=provenance, engine=switched.describe(), cpu_backend_switches=switches)
    return switched
