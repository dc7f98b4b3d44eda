"""Who starts the engine a run uses: a provider the caller made, a server reached by --engine-url, the
pinned docker image, a llama.cpp build made here (--engine-build), the user's --server-bin, or the kit's
embedded engine. One answer, read by the fix checks (kit.launch.llamacpp.fixes.refuse), the --engine-build checks
(kit.run.engine_build), the long-run question (kit.run.long_runs) and the provider (kit.run.runner)."""

from __future__ import annotations

from typing import Any, Literal

Source = Literal["provider", "url", "docker", "engine-build", "server-bin", "embedded"]


def given(options: Any) -> list[tuple[Source, str]]:
    """Each source the options name, with the option that names it, in the order they take precedence."""
    named: list[tuple[Source, str, Any]] = [
        ("provider", "an engine reached by URL", getattr(options, "provider", None) is not None),
        ("url", "--engine-url", options.engine_url or options.engine_urls),
        ("docker", "--launcher docker", options.launcher == "docker"),
        ("engine-build", "--engine-build", getattr(options, "engine_build", None) is not None),
        ("server-bin", "--server-bin", options.server_bin is not None)]
    return [(source, option) for source, option, chosen in named if chosen]


def engine_source(options: Any) -> Source:
    """Where the run's engine comes from (the first source given; none: the embedded engine)."""
    sources = given(options)
    return sources[0][0] if sources else "embedded"
