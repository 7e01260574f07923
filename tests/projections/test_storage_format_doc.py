"""``docs/storage-format.md`` names every table the code writes to ``projections.db`` (with its
columns) and every key it writes to the log's ``meta``: both read from real files, made by the
real store, projector and snapshot store, so a table or key added without its line fails here."""

from __future__ import annotations

import re
from pathlib import Path

import apsw
import trio

from events.codec import DEFAULT_MAX_EVENT_BYTES
from events.schema import TS_STEP_BACK_KEY
from events.store import EventStore, open_store
from projections.registry import all_projections
from projections.snapshots import SnapshotStore

from tests.projections.test_projector import append_each, close, make_projector, sample_drafts

DOC = Path(__file__).resolve().parents[2] / "docs" / "storage-format.md"


def doc_text() -> str:
    return " ".join(DOC.read_text(encoding="utf-8").split())  # lines joined: a name may wrap


def tables(db: Path) -> dict[str, list[str]]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = [n for (n,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        # (an FTS5 table's shadow tables are its own: the virtual table is what is named)
        virtual = [n for n in names if conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = ?", (n,)).fetchall()[0][0].upper().startswith("CREATE VIRTUAL")]
        kept = [n for n in names if not any(n.startswith(v + "_") for v in virtual)]
        return {n: [row[1] for row in conn.execute(f'PRAGMA table_info("{n}")')] for n in kept}
    finally:
        conn.close()


def test_every_projections_table_is_described_with_its_columns(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_store(tmp_path, synchronous="OFF") as store:
            await append_each(store, sample_drafts(40))

    trio.run(main)
    projector = make_projector(tmp_path, all_projections())
    try:
        projector.catch_up()
    finally:
        close(projector)
    SnapshotStore.open(tmp_path).close()
    found = tables(tmp_path / "projections.db")
    assert {"positions", "snapshots", "history_items", "sessions"} <= set(found)
    text = doc_text()
    missing = [name for name in found if f"`{name}`" not in text and f"`{name}(" not in text]
    assert missing == [], f"docs/storage-format.md names no table {missing}"
    # each table shown with its columns shows all of them, in order
    for name, columns in found.items():
        shown = re.search(rf"`{re.escape(name)}\(([^)`]*)\)`", text)
        if shown is not None:
            listed = [c.strip().split()[0] for c in shown[1].split(",")]
            assert listed == columns, (name, listed, columns)


def test_every_meta_key_the_store_writes_is_described(tmp_path: Path) -> None:
    async def main() -> None:
        async with open_store(tmp_path, synchronous="OFF", max_event_bytes=DEFAULT_MAX_EVENT_BYTES * 2) as store:
            await append_each(store, sample_drafts(200))

    trio.run(main)
    store = EventStore.open(tmp_path, synchronous="OFF")
    try:
        store.train_dictionary(size=4096)
    finally:
        store.close()
    conn = apsw.Connection(str(tmp_path / "events.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        keys = {k for (k,) in conn.execute("SELECT key FROM meta")}
    finally:
        conn.close()
    assert {"format", "format_version", "created_ts", "max_event_bytes", "active_dict_id"} <= keys
    # (a step back is written only on a log far ahead of the clock: tests/events/test_ts_far_ahead.py)
    keys.add(f"{TS_STEP_BACK_KEY}<seq>")
    rows = re.findall(r"^\| `([^`]+)` \|", DOC.read_text(encoding="utf-8").split("### `meta`")[1].split("###")[0], re.M)
    assert sorted(keys) == sorted(rows)
