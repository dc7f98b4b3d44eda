"""The kit never writes through a file it did not make (docs/security.md, rule 2): appending goes through
`kit.core.owned_file` (checked on the opened descriptor: regular, one name, this user's, no link), a whole
file through `kit.core.atomic_file` (made anew, renamed into place). Each refusal leaves the other file as
it was and says in one line which file and why."""

from __future__ import annotations

import os

import pytest

from kit.core.atomic_file import create_private, write_json_atomic, write_text_atomic, writing
from kit.core.owned_file import NotOurFile, open_append
from kit.record.files import RecordWriter

KEEP = b"a file elsewhere\n"


@pytest.fixture
def elsewhere(tmp_path):
    path = tmp_path / "elsewhere" / "keep.txt"
    path.parent.mkdir()
    path.write_bytes(KEEP)
    return path


def _refused(path, needle):
    with pytest.raises(NotOurFile) as caught:
        open_append(path).close()
    line = caught.value.line()
    assert str(path) in line and needle in line and "\n" not in line
    return line


def test_a_new_file_is_made_and_an_own_file_appended_to(tmp_path):
    path = tmp_path / "log"
    with open_append(path) as fh:
        fh.write(b"one\n")
    with open_append(path) as fh:
        fh.write(b"two\n")
    assert path.read_bytes() == b"one\ntwo\n"


def test_a_hard_link_is_refused_before_a_byte_is_written(tmp_path, elsewhere):
    (tmp_path / "log").hardlink_to(elsewhere)
    _refused(tmp_path / "log", "has 2 names")
    assert elsewhere.read_bytes() == KEEP


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symbolic_link_is_never_followed(tmp_path, elsewhere, dangling):
    target = elsewhere.with_name("made-there") if dangling else elsewhere
    (tmp_path / "log").symlink_to(target)
    _refused(tmp_path / "log", "is a symbolic link")
    assert elsewhere.read_bytes() == KEEP and not elsewhere.with_name("made-there").exists()


def test_a_fifo_or_a_folder_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe")  # no reader: a blocking open would hang here
    _refused(tmp_path / "pipe", "FIFO")
    (tmp_path / "folder").mkdir()
    with pytest.raises((NotOurFile, IsADirectoryError)):
        open_append(tmp_path / "folder")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can make a file of another user")
def test_a_file_of_another_user_is_refused(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(KEEP)
    os.chown(path, 65534, 65534)
    _refused(path, "belongs to user id 65534")
    assert path.read_bytes() == KEEP


def test_records_are_never_appended_through_a_hard_link(tmp_path, elsewhere):
    records = tmp_path / "records" / "s1.jsonl"
    records.parent.mkdir()
    records.hardlink_to(elsewhere)
    with pytest.raises(NotOurFile):
        RecordWriter(records)
    assert elsewhere.read_bytes() == KEEP


@pytest.mark.parametrize("write", [lambda p: write_text_atomic(p, "new\n"), lambda p: write_json_atomic(p, {"a": 1})])
@pytest.mark.parametrize("link", ["hardlink_to", "symlink_to"])
def test_a_whole_file_replaces_the_name_never_the_linked_file(tmp_path, elsewhere, write, link):
    path = tmp_path / "manifest.json"
    getattr(path, link)(elsewhere)
    write(path)
    assert elsewhere.read_bytes() == KEEP
    assert not path.is_symlink() and path.stat().st_nlink == 1 and path.read_bytes() != KEEP


def test_a_failed_write_leaves_the_old_file_and_no_staging(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("old\n")
    with pytest.raises(RuntimeError), writing(path) as fh:
        fh.write("half")
        raise RuntimeError("disk gone")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["table.csv"]


def test_a_private_file_is_made_once(tmp_path):
    path = tmp_path / "key"
    assert create_private(path, b"first") is True
    assert create_private(path, b"second") is False
    assert path.read_bytes() == b"first" and path.stat().st_mode & 0o077 == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key"]


def test_a_refused_file_leaves_no_descriptor_open_for_reading_or_writing(tmp_path, elsewhere):
    """Reading (kit.core.regular_file) and appending (here) share one opener, which closes what it opened
    when the file is refused: a FIFO, a hard link, a file over the size limit."""
    from kit.core.errors import ConfigError
    from kit.core.regular_file import read_regular

    fifo, linked, large = tmp_path / "fifo", tmp_path / "linked", tmp_path / "large"
    os.mkfifo(fifo)
    os.link(elsewhere, linked)
    large.write_bytes(b"x" * 100)
    before = len(os.listdir("/proc/self/fd"))
    for path, needle in ((fifo, "a FIFO (named pipe)"), (linked, "has 2 names")):
        _refused(path, needle)
    for path, needle in ((fifo, "is a FIFO (named pipe), not a regular file"), (large, "over the 10-byte limit")):
        with pytest.raises(ConfigError) as caught:
            read_regular(path, "the input", 10, "give a small file")
        assert needle in caught.value.line()
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_made_file_is_on_disk_before_its_name_is(tmp_path, monkeypatch):
    """`writing` (rename into place) and `create_private` (link into place) both fsync the whole staging file
    before its final name exists, so that a crash never leaves that name on a file not yet written."""
    from kit.core import atomic_file

    named: list[list[str]] = []  # at each fsync, the final names that exist
    real_fsync = os.fsync
    monkeypatch.setattr(atomic_file.os, "fsync", lambda fd: (named.append(
        [name for name in ("made", "private") if (tmp_path / name).exists()]), real_fsync(fd))[1])
    with writing(tmp_path / "made", "wb") as fh:
        fh.write(b"whole")
    assert create_private(tmp_path / "private", b"whole") is True
    assert named == [[], ["made"]], named
    assert (tmp_path / "made").read_bytes() == (tmp_path / "private").read_bytes() == b"whole"
    assert oct((tmp_path / "private").stat().st_mode & 0o777) == "0o600"
