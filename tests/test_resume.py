"""A stopped run continues: finished passes are kept, the cut-short pass is redone, nothing double-counts."""

from __future__ import annotations

import json

import pytest

from kit.run import runner
from kit.run.resume import resume
from kit.core.errors import KitError
from kit.core.events import RequestDone
from kit.record.files import read_records

pytestmark = pytest.mark.engine


def test_interrupted_run_resumes_without_double_counting(tmp_path, embedded_binary, gsm8k_file):
    def stop_in_second_session(event):
        if isinstance(event, RequestDone) and event.session == "s2" and event.seq == 3:
            raise KeyboardInterrupt  # what Ctrl-C does mid-request

    options = runner.RunOptions(protocol="reset", out=tmp_path, gsm8k=gsm8k_file,  # paths survive the manifest
                                overrides={"workload": {"items": 2}, "sessions": 2, "max_tokens": 4,
                                           "engine": {"ctx_size": 1024}})
    stopped = runner.run(options, emit=stop_in_second_session, say=lambda _: None)
    assert stopped.status == "interrupted"
    manifest = json.loads((stopped.run_dir / "manifest.json").read_text())
    assert manifest["passes"]["s1"]["status"] == "OK" and manifest["passes"]["s2"]["status"] == "interrupted"
    s1_before = (stopped.run_dir / "records" / "s1.jsonl").read_bytes()
    assert len(read_records(stopped.run_dir / "records" / "s2.jsonl").records) == 3

    resumed = resume(stopped.run_dir, say=lambda _: None)
    assert resumed.status == "finished" and resumed.run_dir == stopped.run_dir
    manifest = json.loads((resumed.run_dir / "manifest.json").read_text())
    assert [manifest["passes"][p]["status"] for p in ("s1", "s2")] == ["OK", "OK"]
    assert manifest["resumed"][0]["passes_redone"] == ["s2"] and manifest["resumed"][0]["kept"] == ["s1"]
    assert (resumed.run_dir / "records" / "s1.jsonl").read_bytes() == s1_before  # kept as it was
    assert len(read_records(resumed.run_dir / "records" / "s2.jsonl").records) == 2 * 4
    superseded = list((resumed.run_dir / "records" / "superseded").iterdir())
    assert len(superseded) == 1 and len(read_records(superseded[0]).records) == 3
    assert [row["items"] for row in resumed.table["sessions"]] == [2, 2]

    with pytest.raises(KitError, match="already finished"):
        resume(resumed.run_dir)
