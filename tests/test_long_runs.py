"""Long runs ask first: `kit run`/`kit demo` refuse a protocol whose rough duration on this machine's CPU engine
is past an hour, in one line naming the estimate and the CPU-sized protocol found beside it, before BFCL, a
model or a backend is fetched and before anything is written; `--yes` starts it. The help of run and demo
lists every option under a section."""

from __future__ import annotations


import click
import pytest
import yaml

from kit import cli
from kit.core.errors import ConfigError
from kit.core.paths import protocols_dir
from kit.protocols import kinds
from kit.protocols.bfcl_passes import drive
from kit.protocols.grid import protocol as grid
from kit.run import long_runs, providers, runner
from tests.cli_main import run_main


_kit = run_main


@pytest.fixture
def nothing_fetched(monkeypatch):
    """BFCL's install, the model fetch and the engine's backend fail the test if the run reaches them."""
    def reached(*args, **kwargs):
        pytest.fail("the run went on to install or fetch before it was confirmed")
    monkeypatch.setattr(drive, "ensure_bfcl", reached)
    monkeypatch.setattr(providers, "ensure_model", reached)
    monkeypatch.setattr(providers.embedded, "locate", reached)


def test_kit_run_grid_is_refused_with_its_estimate_and_grid_cpu_and_writes_nothing(monkeypatch, capsys, tmp_path,
                                                                                   nothing_fetched):
    code, out, err = _kit(monkeypatch, capsys, "run", "grid", "--out", str(tmp_path / "out"))
    estimate = grid.estimate_on_cpu(kinds.load("grid")[0].model_dump(mode="json"))
    assert estimate.seconds > long_runs.HOUR and code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("kit: error: grid would take about 11 h on this machine's CPU engine")
    assert "run grid-cpu instead, sized for a CPU (2 episodes x 4 passes, about 16 min)" in err
    assert err.rstrip().endswith("or pass --yes to start it anyway")
    assert not (tmp_path / "out").exists()


def test_yes_starts_it_and_a_short_run_never_asks(monkeypatch, capsys, tmp_path):
    started: list[runner.RunOptions] = []

    def run(options, emit=None, say=None):
        protocol, path, _ = kinds.load(options.protocol, options.overrides)
        long_runs.refuse_unconfirmed(options, protocol, path)
        started.append(options)
        raise ConfigError("stopped here by the test")

    monkeypatch.setattr(runner, "run", run)
    for args in (("run", "grid", "--yes"), ("run", "grid", "-y"), ("demo",), ("run", "reset", "--items", "5")):
        code, _, err = _kit(monkeypatch, capsys, *args, "--out", str(tmp_path))
        assert code == 2 and "stopped here by the test" in err, (args, err)
    assert [options.confirmed for options in started] == [True, True, False, False]


def test_the_alternative_is_the_cpu_sized_file_beside_it_else_the_options_that_size_it(tmp_path):
    source = yaml.safe_load((protocols_dir() / "grid.yaml").read_text())
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(source))
    protocol, path, _ = kinds.load(str(tmp_path / "mine.yaml"))
    alone = long_runs.long_run(protocol, path)
    assert alone is not None and alone.alternative is None
    assert alone.fix("pass --yes") == "make it smaller (--episodes) or pass --yes to start it anyway"
    (tmp_path / "mine-cpu.yaml").write_text(yaml.safe_dump({**source, "workload": {"episodes": 3}}))
    beside = long_runs.long_run(protocol, path)
    assert beside is not None and beside.alternative == "mine-cpu"
    assert beside.fix("confirm") == ("run mine-cpu instead, sized for a CPU (3 episodes x 4 passes, about 24 min), or "
                                     "confirm to start it anyway")
    assert long_runs.long_run(*kinds.load(str(tmp_path / "mine-cpu.yaml"))[:2]) is None  # 24 min: no question


def test_every_long_shipped_protocol_names_a_cpu_sized_one_where_the_folder_has_it():
    for path in sorted(protocols_dir().glob("*.yaml")):
        protocol = kinds.load(str(path))[0]
        found = long_runs.long_run(protocol, path)
        estimate = long_runs.estimate(protocol)
        assert (found is not None) == (estimate is not None and estimate.seconds > long_runs.HOUR), path.name
        if found is not None:
            beside = path.with_name(f"{path.stem}-cpu.yaml")
            assert found.alternative == (beside.stem if beside.is_file() and not path.stem.endswith("-cpu") else None)


def test_only_a_run_on_the_cpu_engine_here_asks(tmp_path):
    protocol, path, _ = kinds.load("grid")
    for changes in ({"engine_url": "http://127.0.0.1:9"}, {"launcher": "docker"}, {"server_bin": tmp_path / "bin"},
                    {"executor": "ray"}, {"confirmed": True}):
        long_runs.refuse_unconfirmed(runner.RunOptions(**{"protocol": "grid", "confirmed": False, **changes}),
                                     protocol, path)  # not refused
    for changes in ({}, {"engine_build": 11434}):  # a llama.cpp build made here runs on this CPU too
        with pytest.raises(ConfigError, match="grid would take about 11 h"):
            long_runs.refuse_unconfirmed(runner.RunOptions(protocol="grid", confirmed=False, **changes), protocol, path)


@pytest.mark.parametrize("command", ["run", "demo"])
def test_help_lists_every_option_under_a_section(command):
    group = cli.cli
    ctx = click.Context(group.commands[command], info_name=command, parent=click.Context(group, info_name="kit"))
    command_object = group.commands[command]
    sections = command_object.sections(ctx)
    assert list(sections) == ["Workload and size", "Engine", "Fixes (docs/remedy.md)", "Launcher (--launcher docker)",
                              "Executor (--executor ray)", "Limits", "Other options"]
    listed = [row[0] for rows in sections.values() for row in rows]
    options = [param.get_help_record(ctx)[0] for param in command_object.get_params(ctx)
               if isinstance(param, click.Option)]
    assert sorted(listed) == sorted(options)  # each once, none left out
    assert [row[0] for row in sections["Other options"]] == ["-h, --help"]
    text = command_object.get_help(ctx)
    assert "Options:" not in text and all(f"{title}:" in text for title in sections)
    assert text.index("--cpu-backend") > text.index("Engine:") and text.index("--ray-address") > text.index("Executor")


def test_nothing_written_before_the_refusal_even_for_a_path_outside_protocols(tmp_path, nothing_fetched):
    source = yaml.safe_load((protocols_dir() / "sweep.yaml").read_text())
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(source))
    with pytest.raises(ConfigError) as refused:
        runner.run(runner.RunOptions(protocol=str(tmp_path / "big.yaml"), out=tmp_path / "out",
                                     confirmed=False), say=lambda line: None)
    assert "make it smaller (--episodes, --histories)" in refused.value.line()
    assert not (tmp_path / "out").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["big.yaml"]


def test_the_cpu_estimate_reads_as_before():
    assert str(grid.estimate_on_cpu({"workload": {"episodes": 2}, "passes": ["on", "off"]})) == \
        "2 episodes x 2 passes, about 8 min on a CPU"
