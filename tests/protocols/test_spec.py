"""Protocol files are validated on load; errors name the file, the key and what is allowed."""

import pytest

from kit.core.errors import ConfigError
from kit.protocols import kinds

VALID = """
protocol: reset
phases:
  - {name: cold, cache_prompt: false, expect: cold}
  - {name: warm, cache_prompt: true, expect: warm}
  - {name: cold2, cache_prompt: false, expect: cold}
  - {name: warm2, cache_prompt: true, expect: warm}
"""


def write(tmp_path, text):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return str(path)


def test_shipped_protocols_load():
    reset, path, digest = kinds.load("reset")
    assert reset.sessions == 3 and reset.workload.items == 100 and reset.top_logprobs == 5
    assert reset.engine.cache_ram == 0 and path.name == "reset.yaml" and len(digest) == 64
    demo, _, _ = kinds.load("demo")
    assert demo.workload.items < reset.workload.items


def test_unknown_protocol_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown protocol 'nope'.*reset"):
        kinds.load("nope")


def test_malformed_yaml_names_the_file(tmp_path):
    path = write(tmp_path, "protocol: reset\nphases: [unclosed\n")
    with pytest.raises(ConfigError, match=r"p\.yaml: not valid YAML"):
        kinds.load(path)


def test_wrong_protocol_kind_lists_allowed_values(tmp_path):
    allowed = ", ".join(sorted(name for name, kind in kinds.KINDS.items() if kind.from_files))  # the registry's
    assert allowed.startswith("flag_order, grid, ") and "harness" not in allowed and "watch" not in allowed
    with pytest.raises(ConfigError, match=rf"key 'protocol' is 'grid2'.*allowed values: {allowed}$"):
        kinds.load(write(tmp_path, "protocol: grid2\n"))


def test_bad_value_names_the_key(tmp_path):
    text = VALID + "workload: {source: web}\n"
    with pytest.raises(ConfigError, match=r"p\.yaml: key 'workload\.source'.*'auto', 'gsm8k' or 'arithmetic'"):
        kinds.load(write(tmp_path, text))


def test_unknown_key_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"key 'sesions'"):
        kinds.load(write(tmp_path, VALID + "sesions: 2\n"))


def test_phases_need_two_cold_and_two_warm(tmp_path):
    text = VALID.replace("expect: warm}\n  - {name: cold2", "expect: cold}\n  - {name: cold2")
    with pytest.raises(ConfigError, match="two cold and two warm"):
        kinds.load(write(tmp_path, text))


def test_overrides_merge_into_nested_keys(tmp_path):
    protocol, _, _ = kinds.load(write(tmp_path, VALID), {"workload": {"items": 7}, "sessions": 2})
    assert protocol.workload.items == 7 and protocol.workload.source == "auto" and protocol.sessions == 2
