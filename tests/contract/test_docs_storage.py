"""docs/storage-format.md: its tables, columns, indexes and format marker against a log the daemon
made, its refusals of an older or foreign store, and its `lens log` command lines and output.

Read as a user reads the page: what it shows is taken from its own text where that is robust,
so that the page and the code drifting apart fail here (see test_docs_examples.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import apsw
import pytest

from tests.contract.error_codes import documented_codes
from tests.daemon.conftest import Daemon, run_lens
from .docs_pages import (STORAGE, CODE_PATTERN, one_match, section_of, columns_of, query_db, shown_command_lines,
    assert_taken, made)  # noqa: F401 (made is a fixture)


async def test_the_events_table_is_the_one_the_doc_draws(made: Daemon):
    """Each row of the ``events`` table of the page (name, type, ``NOT NULL``, ``DEFAULT``,
    ``PRIMARY KEY``) is that column of a log the daemon wrote, in order, and no column more."""
    table = section_of(STORAGE, "### `events`").split("\n\n", 1)[0]
    drawn = []
    for name, declared in re.findall(r"^\| `([a-z_]+)` \| `([^`]*)` \|", table, re.M):
        kind = declared.split()[0]
        default = re.search(r"DEFAULT (\S+)", declared)
        drawn.append((name, kind, int("NOT NULL" in declared), default and default.group(1),
                      int("PRIMARY KEY" in declared)))
    assert len(drawn) == 12, drawn
    assert columns_of(made.data_dir / "events.db", "events") == drawn


async def test_the_events_constraints_and_the_other_tables_are_the_doc_s(made: Daemon):
    db = made.data_dir / "events.db"
    create = one_match(r"`(CREATE UNIQUE INDEX events_request ON [^`]*)`", STORAGE).group(1)
    (sql,), = query_db(db, "SELECT sql FROM sqlite_master WHERE name = 'events_request'")
    assert " ".join(sql.split()) == create
    assert "UNIQUE(session_id, session_seq)" in query_db(db, "SELECT sql FROM sqlite_master WHERE name = 'events'")[0][0]
    assert query_db(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'sqlite_autoindex_events_%'")[0][0] == 1

    meta = one_match(r"`(meta)\(key TEXT PRIMARY KEY, value TEXT NOT NULL\) WITHOUT ROWID`", STORAGE)
    # (a WITHOUT ROWID table's primary key is NOT NULL by itself)
    assert columns_of(db, meta.group(1)) == [("key", "TEXT", 1, None, 1), ("value", "TEXT", 1, None, 0)]
    assert "WITHOUT ROWID" in query_db(db, "SELECT sql FROM sqlite_master WHERE name = 'meta'")[0][0]

    m = one_match(r"`dictionaries\(([^)]*)\)`", STORAGE)
    drawn = []
    for col in m.group(1).split(","):
        words = col.split()
        drawn.append((words[0], words[1], int("NOT NULL" in col), None, int("PRIMARY KEY" in col)))
    assert columns_of(db, "dictionaries") == drawn
    tables = {r[0] for r in query_db(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"events", "meta", "dictionaries"}, tables


async def test_the_format_marker_is_the_one_the_doc_names(made: Daemon):
    """"format **`lens-events`, version 1**", and the ``meta`` keys of its table: those a fresh
    log holds are among them, with the marker's values."""
    fmt, version = one_match(r"This page describes format \*\*`([a-z-]+)`, version (\d+)\*\*", STORAGE).groups()
    assert one_match(r"records `format = '([a-z-]+)'` and `format_version = '(\d+)'`", STORAGE).groups() == (fmt, version)
    keys_table = section_of(STORAGE, "### `meta`")
    keys = set(re.findall(r"^\| `([a-z_]+)(?::<seq>)?` \|", keys_table, re.M))
    assert {"format", "format_version", "created_ts", "active_dict_id", "max_event_bytes", "ts_step_back"} == keys
    meta = dict(query_db(made.data_dir / "events.db", "SELECT key, value FROM meta"))
    assert meta["format"] == fmt and meta["format_version"] == version
    assert {"format", "format_version", "created_ts"} <= set(meta) <= keys, meta
    assert int(meta["created_ts"]) > 0


def _drawn_projection_tables() -> dict[str, list[str]]:
    """Every ``name(col, col, …)`` the page gives for ``projections.db``."""
    text = section_of(STORAGE, "## `projections.db` is disposable")
    drawn = {}
    for name, cols in re.findall(r"`([a-z_]+)\(([a-z_, \n]+)\)`", text):
        drawn[name] = [c.strip() for c in cols.split(",")]
    return drawn


async def test_the_projection_tables_and_their_columns_are_the_doc_s(made: Daemon):
    db = made.data_dir / "projections.db"
    drawn = _drawn_projection_tables()
    assert {"positions", "inputs", "source", "projects", "sessions", "snapshots", "stats_kinds"} <= set(drawn), drawn
    for table, cols in drawn.items():
        assert [c[0] for c in columns_of(db, table)] == cols, table
    # The history tables the page names without their columns, and no table it does not name.
    text = section_of(STORAGE, "## `projections.db` is disposable")
    named = set(re.findall(r"`([a-z_]+)`", text)) | set(drawn)
    tables = {r[0] for r in query_db(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    fts_shadows = {t for t in tables if re.fullmatch(r"history_fts_[a-z]+", t)}
    assert tables - fts_shadows <= named, sorted(tables - fts_shadows - named)
    history = set(re.findall(r"`(history_[a-z]+)` \(", text))
    assert len(history) == 6 and history <= tables, history


async def test_the_list_indexes_and_projection_versions_are_the_doc_s(made: Daemon):
    """``projects_created (created_ts, id)``, ``sessions_created (created_ts DESC, id)``,
    ``sessions_project (project_id, created_ts DESC, id)``, and "projects 2, sessions 5" as the
    versions ``positions`` records."""
    db = made.data_dir / "projections.db"
    text = section_of(STORAGE, "## `projections.db` is disposable")
    indexes = re.findall(r"`([a-z_]+) \(([A-Za-z_, ]+)\)`", text)
    assert [n for n, _ in indexes] == ["projects_created", "sessions_created", "sessions_project"], indexes
    for name, cols in indexes:
        (sql,), = query_db(db, f"SELECT sql FROM sqlite_master WHERE type = 'index' AND name = '{name}'")
        assert re.sub(r"\s+", " ", sql).endswith(f"({cols})"), (name, sql)
    versions = dict(re.findall(r"\b([a-z]+) (\d+)\b", one_match(r"a new version of its projection \(([^)]*)\)", text).group(1)))
    recorded = {name: str(v) for name, v, _ in query_db(db, "SELECT name, version, seq FROM positions")}
    for name, version in versions.items():
        assert recorded[name] == version, (name, recorded)
    m = one_match(r"version (\d+) of the\s+projection, an older table is folded again", text)
    assert recorded["artifact_names"] == m.group(1)


def _refusal_rows() -> dict[str, str]:
    """The table of "Format marker, and what opening refuses": first cell -> second cell."""
    text = section_of(STORAGE, "## Format marker, and what opening refuses")
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) == 2 and not set(cells[0]) <= {"-", " "}:
            rows[cells[0]] = cells[1]
    assert len(rows) > 25, rows
    return rows


def _row(starts: str) -> tuple[str, list[str]]:
    """The code and the quoted words ("…") of the one row whose first cell starts with ``starts``."""
    found = [v for k, v in _refusal_rows().items() if k.startswith(starts)]
    assert len(found) == 1, (starts, found)
    code = re.match(rf"`({CODE_PATTERN})`", found[0])
    assert code, found[0]
    return code.group(1), re.findall(r'\("([^"]+)"\)', found[0])


def _copy_log(src: Path, dest: Path) -> Path:
    """A consistent copy of ``src``/events.db as ``dest``/events.db (SQLite's online backup)."""
    dest.mkdir(mode=0o700)
    source = apsw.Connection(str(src / "events.db"), flags=apsw.SQLITE_OPEN_READONLY)
    target = apsw.Connection(str(dest / "events.db"))
    with target.backup("main", source, "main") as b:
        b.step()
    target.close()
    source.close()
    return dest


def _edit(data: Path, sql: str) -> None:
    conn = apsw.Connection(str(data / "events.db"))
    conn.execute(sql)
    conn.close()
    for side in ("events.db-wal", "events.db-shm"):
        (data / side).unlink(missing_ok=True)


async def _refused(cwd: Path, data: Path, *argv: str) -> tuple[int, str, str]:
    """``lens ARGV --data DATA``: its exit code, its code and its message (``lens: CODE: …``)."""
    out = await run_lens(cwd, *argv, "--data", str(data), check=False)
    last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
    m = re.match(rf"lens: ({CODE_PATTERN}): (.*)$", last)
    assert m, (argv, out.stdout, out.stderr)
    return out.returncode, m.group(1), m.group(2)


@pytest.mark.parametrize("starts, edit, names", [
    ("`meta.format` other than", "UPDATE meta SET value = 'other-log' WHERE key = 'format'", "'other-log'"),
    ("`lens-events` of another `format_version`", "UPDATE meta SET value = '2' WHERE key = 'format_version'", "version 2"),
    ("a SQLite database without a `meta` table", "DROP TABLE meta", "dictionaries, events"),
], ids=["format", "version", "no-meta"])
async def test_an_older_or_foreign_log_is_refused_as_the_doc_says(made: Daemon, tmp_path: Path, starts: str,
                                                                   edit: str, names: str):
    """The reader (``lens log verify``) and the writer (``lens serve``) refuse with the row's code,
    naming what was found, and the writer leaves the directory as it found it (no ``lock``)."""
    code, _ = _row(starts)
    data = _copy_log(made.data_dir, tmp_path / "other")
    _edit(data, edit)
    before = sorted(p.name for p in data.iterdir())
    exit_code, said, message = await _refused(tmp_path, data, "log", "verify")
    assert (exit_code, said) == (2, code) and names in message, message
    exit_code, said, message = await _refused(tmp_path, data, "serve", "--port", "0")
    assert (exit_code, said) == (2, code) and names in message, message
    assert sorted(p.name for p in data.iterdir()) == before


async def test_a_version_that_is_no_whole_number_is_damage_as_the_doc_says(made: Daemon, tmp_path: Path):
    """``'1.0'``: ``STORE_CORRUPT`` quoting the value, and ``verify`` reports it and exits 1."""
    code, _ = _row("`lens-events` whose `format_version` is no whole number")
    row = _refusal_rows()[next(k for k in _refusal_rows() if k.startswith("`lens-events` whose"))]
    assert "`verify` reports it and exits 1" in row, row
    data = _copy_log(made.data_dir, tmp_path / "odd")
    _edit(data, "UPDATE meta SET value = '1.0' WHERE key = 'format_version'")
    out = await run_lens(tmp_path, "log", "verify", "--data", str(data), check=False)
    assert out.returncode == 1, out
    assert re.search(rf"^log: {code}: .*'1\.0'", out.stdout, re.M), out


async def test_the_refusals_of_what_is_not_a_log_say_what_the_doc_quotes(tmp_path: Path):
    """Not a SQLite database, a directory of other files, none at all, an empty ``events.db``,
    ``--data`` naming a file, ``events.db`` a directory: each row's code and its quoted words."""
    cases = []
    code, quoted = _row("`events.db` that is not a SQLite database")
    d = tmp_path / "notsqlite"
    d.mkdir(mode=0o700)
    (d / "events.db").write_bytes(b"plain text, no database\n" * 10)
    cases.append((d, code, quoted))
    code, quoted = _row("a directory without `events.db` but with other files")
    d = tmp_path / "older"
    d.mkdir(mode=0o700)
    (d / "log.jsonl").write_text("{}\n")
    cases.append((d, code, ["log.jsonl"]))
    code, quoted = _row("the directory does not exist")
    cases.append((tmp_path / "none", code, quoted))
    code, quoted = _row("`events.db` of 0 bytes with no WAL")
    d = tmp_path / "empty"
    d.mkdir(mode=0o700)
    (d / "events.db").touch(mode=0o600)
    cases.append((d, code, quoted))
    code, quoted = _row("`--data` naming a file")
    (tmp_path / "afile").write_text("x")
    cases.append((tmp_path / "afile", code, quoted))
    code, quoted = _row("`events.db` that is a directory")
    d = tmp_path / "dirdb"
    (d / "events.db").mkdir(parents=True, mode=0o700)
    d.chmod(0o700)
    cases.append((d, code, quoted))
    for data, code, quoted in cases:
        exit_code, said, message = await _refused(tmp_path, data, "log", "verify")
        assert (exit_code, said) == (2, code), (data.name, said, message)
        for words in quoted:
            assert words in message, (data.name, words, message)


def test_every_lens_log_line_of_the_storage_page_is_one_lens_takes():
    commands = [c for c in shown_command_lines(STORAGE, "log") if c != ["log"]]  # (`lens log …`)
    assert {c[1] for c in commands if not c[1].startswith("-")} == {"decode", "verify", "rebuild", "stats"}, commands
    assert len(commands) >= 8, commands
    assert_taken(commands)
    serve = shown_command_lines(STORAGE, "serve")
    assert ["serve", "--data"] in serve, serve
    assert_taken(serve)


async def test_decode_prints_exactly_the_keys_the_doc_lists(made: Daemon):
    """``decode``'s keys, in order, and ``--raw``'s envelope plus ``dict_id``, ``raw_size``,
    ``body_encoding`` (with the value the page gives) and ``body``; ``verify``'s line."""
    keys = one_match(r"with exactly the keys `([^`]*)`", STORAGE).group(1).split(",")
    keys = [k.strip() for k in keys]
    out = await run_lens(made.root, "log", "decode", "--data", str(made.data_dir))
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(events) > 5 and all(list(e) == keys for e in events), (keys, events[0])
    assert all(isinstance(e["ts"], int) and "kind" not in e["body"] for e in events)
    m = one_match(r"the same envelope plus `dict_id`, `raw_size`,\s+`body_encoding` \(`\"([^\"]+)\"`\) and `body` as base64",
             STORAGE)
    out = await run_lens(made.root, "log", "decode", "--raw", "--data", str(made.data_dir))
    raw = [json.loads(line) for line in out.stdout.splitlines()]
    envelope = [k for k in keys if k != "body"]
    assert all(sorted(r) == sorted([*envelope, "dict_id", "raw_size", "body_encoding", "body"]) for r in raw), raw[0]
    assert {r["body_encoding"] for r in raw} == {m.group(1)}
    said = one_match(r"It prints `(ok): N\s+event\(s\) verified`", STORAGE).group(1)
    out = await run_lens(made.root, "log", "verify", "--data", str(made.data_dir))
    assert out.stdout.splitlines()[-1] == f"{said}: {len(events)} event(s) verified", out.stdout


def test_the_codes_verify_reports_are_those_the_doc_lists():
    """The codes of the ``verify`` bullet are the codes ``verify_log`` can yield (and those a
    damaged file or the clock give: ``STORE_CORRUPT``, ``TS_AHEAD_OF_CLOCK``,
    ``EVENT_UNKNOWN_DICTIONARY``), every one documented in docs/errors.md."""
    import inspect

    from runtime import logcli

    bullet = one_match(r"^- \*\*verify\*\* .*?(?=^- \*\*rebuild\*\*)", STORAGE, re.S | re.M).group(0)
    said = set(re.findall(rf"`({CODE_PATTERN})`", bullet[bullet.index("The codes are stable"):]))
    source = inspect.getsource(logcli.verify_log) + inspect.getsource(logcli._verify_rows)
    yielded = set(re.findall(rf"f?\"({CODE_PATTERN}): ", source))
    assert len(yielded) >= 12, yielded
    assert said == yielded | {"STORE_CORRUPT", "TS_AHEAD_OF_CLOCK", "EVENT_UNKNOWN_DICTIONARY"}, (said ^ yielded)
    assert not said - set(documented_codes())


async def test_the_usage_error_the_doc_quotes_is_the_one_printed(tmp_path: Path):
    quoted = one_match(r"\(`(lens log decode: USAGE_ERROR: argument\s+--from: 'x' is not a whole number)`\)", STORAGE).group(1)
    out = await run_lens(tmp_path, "log", "decode", "--from", "x", check=False)
    assert out.returncode == 2 and out.stderr.splitlines()[-1] == " ".join(quoted.split()), out.stderr


async def test_decode_s_kind_and_range_filters_hold_as_the_doc_says(made: Daemon):
    """At most N different kinds (repeats count once): N pass, N + 1 is a usage error; a
    ``--from`` past ``--to`` is an empty range, exit 0; ``--kind ''`` a usage error."""
    most = int(one_match(r"at most ([\d,]+) different kinds", STORAGE).group(1).replace(",", ""))
    data = ["--data", str(made.data_dir)]
    kinds = ",".join(["session.created", *(f"k{i}" for i in range(most - 1)), "k0"])
    out = await run_lens(made.root, "log", "decode", "--kind", kinds, *data)
    assert out.returncode == 0 and [json.loads(x)["kind"] for x in out.stdout.splitlines()] == ["session.created"], out
    out = await run_lens(made.root, "log", "decode", "--kind", kinds + f",k{most}", *data, check=False)
    assert out.returncode == 2 and out.stderr.splitlines()[-1].startswith("lens log decode: USAGE_ERROR: "), out.stderr
    out = await run_lens(made.root, "log", "decode", "--from", "5", "--to", "4", *data)
    assert out.stdout == ""
    out = await run_lens(made.root, "log", "decode", "--kind", "", *data, check=False)
    assert out.returncode == 2 and "USAGE_ERROR" in out.stderr.splitlines()[-1], out.stderr


async def test_stats_and_rebuild_print_what_the_doc_shows(made: Daemon):
    """``stats --json``'s shape (the ratio rounded to three places), ``rebuild``'s line, and an
    unknown projection refused with the names of those ``projections/registry.py`` registers."""
    from projections.registry import all_projections

    data = ["--data", str(made.data_dir)]
    m = one_match(r"`--json` prints `\{\"kinds\": \[\{([^}]*)\}\], \"total\": \{…\}\}`", STORAGE)
    fields = [f.strip() for f in m.group(1).split(",")]
    out = json.loads((await run_lens(made.root, "log", "stats", "--json", *data)).stdout)
    assert list(out) == ["kinds", "total"] and out["kinds"], out
    assert all(list(k) == fields for k in out["kinds"]), out["kinds"][0]
    assert set(out["total"]) <= set(fields) and out["total"]["events"] == sum(k["events"] for k in out["kinds"])
    assert all(k["compression_ratio"] == round(k["raw_bytes"] / k["stored_bytes"], 3) for k in out["kinds"])

    shown = one_match(r"and prints\s+`(rebuilt) NAMES from N (event\(s\))`", STORAGE).groups()
    names = [p.name for p in all_projections()]
    out = await run_lens(made.root, "log", "rebuild", *data)
    line = out.stdout.strip().splitlines()[-1]
    assert re.fullmatch(rf"{shown[0]} (.*) from (\d+) {re.escape(shown[1])}", line), line
    assert all(n in line for n in names), (names, line)
    out = await run_lens(made.root, "log", "rebuild", "--projection", "nosuch", *data, check=False)
    assert out.returncode == 2 and "PROJECTION_UNKNOWN" in out.stderr, out.stderr
    assert all(n in out.stderr for n in names), out.stderr


async def test_the_data_directory_holds_what_the_layout_table_lists_with_its_modes(made: Daemon):
    table = section_of(STORAGE, "## Data directory layout").split("\n\n", 1)[0]
    listed = set()
    for first in re.findall(r"^\| ([^|]*) \|", table, re.M):
        names = re.findall(r"`([\w.-]+)/?`", first)
        base = names[0] if names else ""
        listed |= set(names) | {base + suffix for suffix in re.findall(r"`(-wal|-shm)`", first)}
    found = {p.name for p in made.data_dir.iterdir()}
    assert "lock" in found and "events.db" in found and found <= listed, (found, listed)
    dir_mode, file_mode = one_match(r"a data directory Lens creates is mode `(0\d{3})`, and\s+`events\.db` and `projections\.db`"
                               r" are created `(0\d{3})`", STORAGE).groups()
    assert oct(made.data_dir.stat().st_mode & 0o777) == "0o" + dir_mode[1:]
    for name in ("events.db", "projections.db"):
        assert oct((made.data_dir / name).stat().st_mode & 0o777) == "0o" + file_mode[1:], name
