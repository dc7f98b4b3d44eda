"""The fix registry (kit.launch.llamacpp.fixes): names, families, server flags and where they are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.core.errors import ConfigError
from kit.launch.llamacpp import fixes
from kit.launch.native import ServerSpec
from kit.launch.provider import NativeProvider


def test_named_fixes_and_families_say_what_they_change():
    assert fixes.named("chunk-16").server_args == ("--ubatch-size", "16", "--batch-size", "16")
    assert fixes.named("threads-3").threads == 3
    reuse = fixes.named("reuse-off")
    assert reuse.reuse_off and reuse.cache_ram == 0 and reuse.closes
    assert fixes.named("f16").weights == "F16"
    assert fixes.named("cpu-backend-portable").launchers == (fixes.EMBEDDED,)
    assert fixes.named("chunk-16").to_json()["server_args"] == ["--ubatch-size", "16", "--batch-size", "16"]


@pytest.mark.parametrize("name", ["chunk-0", "chunk-", "chunk-999999", "threads-2000", "reuse", "CHUNK-16", 16, None,
                                  "chunk-16 ", "chunk-016"])
def test_unknown_names_are_refused_naming_the_known_ones(name):
    with pytest.raises(ConfigError) as raised:
        fixes.named(name)
    assert "reuse-off" in raised.value.fix and "chunk-N" in raised.value.fix


def test_two_fixes_that_set_one_thing_are_refused():
    with pytest.raises(ConfigError, match="both set --ubatch-size"):
        fixes.resolve(["chunk-16", "chunk-32"])
    with pytest.raises(ConfigError, match="both set"):
        fixes.resolve(["cpu-backend-wheel", "cpu-backend-portable"])
    assert [f.name for f in fixes.resolve(["chunk-16", "threads-1", "reuse-off"])] == ["chunk-16", "threads-1",
                                                                                       "reuse-off"]


@pytest.mark.parametrize("given, words", [
    (["--ubatch-size=32"], ("--ubatch-size", "32")),
    (["-ub 32", "-fa=off"], ("--ubatch-size", "32", "--flash-attn", "off")),
    (["--swa-full"], ("--swa-full",)),
    (["-ctk=q8_0"], ("--cache-type-k", "q8_0")),
])
def test_allowed_server_flags_become_argv_words(given, words):
    assert fixes.server_args(given) == words


@pytest.mark.parametrize("arg, says", [
    ("--port=1", "not a flag the kit lets"), ("--host 0.0.0.0", "not a flag"), ("-m /etc/passwd", "not a flag"),
    ("--api-key=x", "not a flag"), ("--log-file=/tmp/x", "not a flag"), ("--ctx-size=99", "not a flag"),
    ("--seed=1", "not a flag"), ("-t 4", "the kit sets -t"), ("--cache-ram=0", "the kit sets --cache-ram"),
    ("--no-cache-prompt", "the kit sets"), ("--ubatch-size=abc", "takes a number"), ("--ubatch-size", "takes a number"),
    ("--ubatch-size=0", "at least 1"), ("--flash-attn=maybe", "takes on | off | auto"), ("--swa-full=1", "a switch"),
    ("--ubatch-size=16\n--port=1", "not a plain"), ("--ubatch-size=1;rm", "takes a number"),
])
def test_server_flags_outside_the_allow_list_or_their_shape_are_refused(arg, says):
    with pytest.raises(ConfigError, match=says):
        fixes.server_args([arg])


def test_a_flag_given_twice_or_also_set_by_a_fix_is_refused():
    with pytest.raises(ConfigError, match="given twice"):
        fixes.server_args(["-ub=8", "--ubatch-size=16"])
    with pytest.raises(ConfigError, match="contradicts --fix chunk-16"):
        fixes.parse(["chunk-16"], ["-b=64"])


def test_refused_where_the_engine_or_launcher_cannot_apply_them():
    applied = fixes.parse(["chunk-16"], [])
    base = {"source": "embedded", "engine": "llamacpp"}
    for source in ("embedded", "server-bin", "engine-build"):
        fixes.refuse(applied, **{**base, "source": source})
    with pytest.raises(ConfigError, match="--engine-url"):
        fixes.refuse(applied, **{**base, "source": "url"})
    with pytest.raises(ConfigError, match="provider the caller made"):
        fixes.refuse(applied, **{**base, "source": "provider"})
    with pytest.raises(ConfigError, match="vllm engine"):
        fixes.refuse(applied, **{**base, "engine": "vllm"})
    with pytest.raises(ConfigError, match="docker launcher"):
        fixes.refuse(fixes.parse([], ["-ub=8"]), **{**base, "source": "docker"})
    for source in ("server-bin", "engine-build"):  # the CPU backend is the embedded engine's own
        for name in ("cpu-backend-portable", "cpu-backend-wheel"):
            with pytest.raises(ConfigError, match=f"{name} cannot be applied with the {source} launcher"):
                fixes.refuse(fixes.parse([name], []), **{**base, "source": source})
    fixes.refuse(fixes.parse([], []), **{**base, "source": "url"})  # nothing asked: nothing refused


def test_applied_to_a_native_provider_the_servers_carry_them(tmp_path: Path):
    spec = ServerSpec(binary=tmp_path / "llama-server", model=tmp_path / "m.gguf", threads=2, cache_ram=None)
    base = NativeProvider(spec, {"model_sha256": "ab"})
    fixed = fixes.apply(base, fixes.parse(["chunk-16", "reuse-off", "threads-1"], ["--swa-full"]), lambda _: None)
    argv = fixed.spec.argv(8080)
    assert argv[-5:] == ["--ubatch-size", "16", "--batch-size", "16", "--swa-full"]
    assert argv[argv.index("-t") + 1] == "1" and argv[argv.index("--cache-ram") + 1] == "0"
    assert fixed.reuse_off and not base.reuse_off and base.spec.extra_args == ()
    assert fixed.describe()["fixes"] == ["chunk-16", "reuse-off", "threads-1"]
    assert fixed.describe()["server_args"] == ["--swa-full"] and "fixes" not in base.describe()
    assert fixes.apply(base, fixes.parse([], []), lambda _: None) is base
