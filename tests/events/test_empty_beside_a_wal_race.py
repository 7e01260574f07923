"""The check for an empty ``events.db`` beside a WAL with commits, run while the daemon makes the
log: a healthy directory being created is not damage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from events import schema
from events.schema import create_private, open_read_connection, open_write_connection


def test_a_log_made_between_the_checks_two_reads_is_not_called_damage(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The daemon makes events.db empty, then gives it its first page and commits its tables to
    # the WAL. A reader that saw the empty file, then (the log made meanwhile) a WAL with bytes,
    # said STORE_CORRUPT of a healthy log being created. The writer here runs right after the
    # check's first read of either file.
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    db = data / "events.db"
    create_private(db)  # (as the daemon does first)
    real_stat = os.stat
    writers: list = []

    def stat(path, *args, **kwargs):
        result = real_stat(path, *args, **kwargs)
        if not writers and os.fspath(path) in (str(db), str(db) + "-wal"):
            writers.append(None)  # (once: the writer's own checks read the real files)
            writers[0] = open_write_connection(data)
        return result

    monkeypatch.setattr(schema.os, "stat", stat)
    try:
        reader = open_read_connection(data)
    finally:
        monkeypatch.undo()
    try:
        assert writers and writers[0] is not None, "the writer did not run between the reads"
        assert (data / "events.db-wal").stat().st_size > 0 and db.stat().st_size > 0
        assert reader.execute("SELECT count(*) FROM meta WHERE key = 'created_ts'").fetchall() == [(1,)]
    finally:
        reader.close()
        writers[0].close()
