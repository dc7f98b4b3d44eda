"""Secret scrubbing: which variables count as secret, and how their values are replaced."""

from __future__ import annotations

from kit.bundle.scrub import is_env_dump, scrub, secret_values

ENV = {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123456789", "OPENAI_API_KEY": "sk-test-0123456789abcdef",
       "MY_SERVICE_SECRET": "p@ss\"word-long", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG",
       "AWS_REGION": "eu-west-1-long-name", "PATH": "/usr/bin:/bin", "SHORT_TOKEN": "abc", "HOME": "/root"}


def test_secret_looking_names_are_picked_and_others_left():
    assert set(secret_values(ENV)) == {"HF_TOKEN", "OPENAI_API_KEY", "MY_SERVICE_SECRET", "AWS_SECRET_ACCESS_KEY"}


def test_values_are_replaced_by_name_also_inside_json_strings():
    secrets = secret_values(ENV)
    data = (b'{"note": "p@ss\\"word-long", "k": "sk-test-0123456789abcdef"}\n'
            b"Auth: hf_abcdefghijklmnopqrstuvwxyz0123456789")
    clean, found = scrub(data, "x.log", secrets)
    for value in ENV.values():
        if len(value) >= 8 and value not in ("/usr/bin:/bin", "eu-west-1-long-name"):
            assert value.encode() not in clean
    assert b"[REDACTED:MY_SERVICE_SECRET]" in clean and b"[REDACTED:HF_TOKEN]" in clean
    assert {r.what for r in found} == {"MY_SERVICE_SECRET", "OPENAI_API_KEY", "HF_TOKEN"}


def test_token_shapes_are_redacted_even_when_not_in_the_environment():
    data = b"token=hf_ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ key=AKIAABCDEFGHIJKLMNOP ok"
    clean, found = scrub(data, "x.log", {})
    assert clean == b"token=[REDACTED:huggingface-token] key=[REDACTED:aws-access-key] ok"
    assert {r.what for r in found} == {"huggingface-token", "aws-access-key"}


def test_clean_data_is_untouched():
    data = b'{"tokens": [1, 2, 3], "text": "The answer is 42"}'
    assert scrub(data, "r.jsonl", secret_values(ENV)) == (data, [])


def test_environment_dumps_are_recognised():
    assert all(is_env_dump(n) for n in (".env", "run.env", "environ.txt", "env", "environment.json", "printenv.out",
                                       "env_dump.txt", "ENVIRON-2.log"))
    assert not any(is_env_dump(n) for n in ("server-s1.log", "manifest.json", "s1.jsonl", "environmental.md"))


def test_values_assigned_to_secret_names_are_redacted_without_the_variable_here():
    data = (b'{"Env": ["HF_HUB_TOKEN=abcdefgh12345678", "PATH=/usr/local/bin:/usr/bin", "MAX_TOKENS=4096"],\n'
            b' "MY_SERVICE_SECRET": "s3cr3t-value-here", "bos_token": "<|im_start|>endoftextlong"}\n'
            b"export OPENAI_API_KEY=zzzzzzzzzzzz9; NUM_TOKENS=12345678\n")
    clean, found = scrub(data, "m.json", {})
    assert clean == (b'{"Env": ["HF_HUB_TOKEN=[REDACTED:HF_HUB_TOKEN]", "PATH=/usr/local/bin:/usr/bin", '
                     b'"MAX_TOKENS=4096"],\n "MY_SERVICE_SECRET": "[REDACTED:MY_SERVICE_SECRET]", '
                     b'"bos_token": "<|im_start|>endoftextlong"}\n'
                     b"export OPENAI_API_KEY=[REDACTED:OPENAI_API_KEY]; NUM_TOKENS=12345678\n")
    assert {r.what for r in found} == {"HF_HUB_TOKEN", "MY_SERVICE_SECRET", "OPENAI_API_KEY"}


COMMON_WORDS = {"API_KEY": "test", "TOKEN": "on", "AUTH_TOKEN": "true", "DB_PASSWORD": "finished",
                "MY_SECRET": "Localhost", "SECRET_PORT": "8080", "ACCESS_KEY": "127.0.0.1", "HF_TOKEN": "zzzzzzzz"}


def test_common_words_in_secret_named_variables_are_not_secrets():
    assert secret_values(COMMON_WORDS) == {}
    assert set(secret_values({**COMMON_WORDS, "API_KEY": "t3st-Key-9f2a"})) == {"API_KEY"}
    record = b'{"arm": "on", "status": "finished", "ok": true, "host": "127.0.0.1:8080", "text": "test"}\n'
    assert scrub(record, "records/p.jsonl", secret_values(COMMON_WORDS)) == (record, [])


def test_a_bundle_made_with_common_word_secrets_keeps_records_byte_identical(tmp_path):
    from kit.bundle.writer import write_bundle  # noqa: PLC0415
    from tests.bundle.conftest import read_members, synthetic_grid_run  # noqa: PLC0415

    run = synthetic_grid_run(tmp_path / "grid-toy")
    originals = {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert b'"on"' in b"".join(originals.values()) and b"finished" in originals["manifest.json"]
    written = write_bundle([run], tmp_path / "b.tar.gz", environ=COMMON_WORDS)
    assert written.redactions == []
    _, members = read_members(written.path)
    prefix = f"runs/{run.name}/"
    bundled = {name.removeprefix(prefix): data for name, data in members.items() if name.startswith(prefix)}
    compared = [name for name in originals if name.startswith("records/") or name == "manifest.json"]
    assert compared and all(bundled[name] == originals[name] for name in compared)
