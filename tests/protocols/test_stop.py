"""A cooperative stop (what the launcher's Stop key does) ends a real run like Ctrl-C: the records
written so far are complete and readable, the manifest says interrupted, no pass says running."""

from __future__ import annotations

import json
import threading

import pytest

from kit.run import runner
from kit.core.events import ItemVerdict
from kit.record.files import read_records

pytestmark = pytest.mark.engine


def test_a_stop_asked_after_the_first_item_ends_the_run_interrupted_with_its_records_kept(tmp_path, embedded_binary):
    stop = threading.Event()
    events = []

    def emit(event):
        events.append(event)
        if isinstance(event, ItemVerdict):
            stop.set()  # asked while the run is busy, as from another thread

    options = runner.RunOptions(protocol="demo", out=tmp_path, stop=stop,
                                overrides={"workload": {"items": 3}, "sessions": 2, "max_tokens": 8,
                                           "engine": {"ctx_size": 1024}})
    result = runner.run(options, emit=emit, say=lambda _: None)
    assert result.status == "interrupted"
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert manifest["passes"]["s1"]["status"] == "interrupted"
    assert "s2" not in manifest["passes"]  # stopped before the second session began
    records = read_records(result.run_dir / manifest["passes"]["s1"]["file"])
    assert not records.torn_tail
    assert len(records.records) == 4  # exactly the first item's four phases: stopped between requests
    assert {r["unit"] for r in records.records} == {events[[type(e) for e in events].index(ItemVerdict)].unit}
    assert sum(isinstance(e, ItemVerdict) for e in events) == 1
