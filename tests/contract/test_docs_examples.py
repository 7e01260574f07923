"""The user-facing docs beside the README (docs/storage-format.md, docs/executor.md,
docs/providers.md, docs/ptc.md, docs/errors.md) read as a user reads them, against the code and
the running daemon, executor and CLI.

What a page shows is taken from its own text wherever that is robust (the tables and columns of
the storage format, the format marker, the refusals it quotes, the command lines and flags, the
keys `decode` prints, the codes `verify` reports, the limits and defaults it states), so that a
page and a code that drift apart fail here. The live checks run the real daemon on a loopback
port 0 (built-in defaults, the ``faux`` model, a real executor child), the real ``lens`` CLI and
a real ``lens executor serve`` process.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import apsw
import pytest

from tests.contract.error_codes import ROOT, documented_codes
from tests.daemon.conftest import Daemon, lens_command, run_lens, stop_daemon

DOCS = ROOT / "docs"
STORAGE = (DOCS / "storage-format.md").read_text(encoding="utf-8")
EXECUTOR = (DOCS / "executor.md").read_text(encoding="utf-8")
PROVIDERS = (DOCS / "providers.md").read_text(encoding="utf-8")
PTC = (DOCS / "ptc.md").read_text(encoding="utf-8")
ERRORS = (DOCS / "errors.md").read_text(encoding="utf-8")
# Every user-facing page but the decision record and the performance notes.
PAGES = {p.name: p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md"))
         if p.name not in {"decisions.md", "performance.md"}}

_CODE = r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+"


def _one(pattern: str, text: str, flags: int = 0) -> re.Match[str]:
    """The single place ``pattern`` matches ``text`` (a sentence rewritten fails here, to be
    pointed again at the new words)."""
    found = list(re.finditer(pattern, text, flags))
    assert len(found) == 1, (pattern, [m.group(0) for m in found])
    return found[0]


def _section(text: str, heading: str) -> str:
    """The body of the section whose heading line is ``heading`` (up to the next heading of the
    same or a higher level)."""
    level = heading.split(" ", 1)[0]
    body = text.split("\n" + heading + "\n", 1)[1]
    return re.split(rf"\n#{{1,{len(level)}}} ", body, maxsplit=1)[0]


def _columns(db: Path, table: str) -> list[tuple[str, str, int, str | None, int]]:
    """``PRAGMA table_info``: (name, type, notnull, default, pk) of each column, in order."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [(r[1], r[2], r[3], r[4], r[5]) for r in conn.execute(f"PRAGMA table_info({table})")]
    finally:
        conn.close()


def _query(db: Path, sql: str) -> list[tuple]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


# --------------------------------------------------------------------------- a log the daemon made


@pytest.fixture
async def made(daemon: Daemon, strong: str) -> Daemon:
    """A stopped daemon's data directory holding a project, a session and one answered input."""
    p = await daemon.project(strong)
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.submit(strong, sid, "r1", "hello")
    await daemon.wait_idle(strong, sid)
    await stop_daemon(daemon)
    return daemon


# --------------------------------------------------------------------------- storage-format.md: events.db


async def test_the_events_table_is_the_one_the_doc_draws(made: Daemon):
    """Each row of the ``events`` table of the page (name, type, ``NOT NULL``, ``DEFAULT``,
    ``PRIMARY KEY``) is that column of a log the daemon wrote, in order, and no column more."""
    table = _section(STORAGE, "### `events`").split("\n\n", 1)[0]
    drawn = []
    for name, declared in re.findall(r"^\| `([a-z_]+)` \| `([^`]*)` \|", table, re.M):
        kind = declared.split()[0]
        default = re.search(r"DEFAULT (\S+)", declared)
        drawn.append((name, kind, int("NOT NULL" in declared), default and default.group(1),
                      int("PRIMARY KEY" in declared)))
    assert len(drawn) == 12, drawn
    assert _columns(made.data_dir / "events.db", "events") == drawn


async def test_the_events_constraints_and_the_other_tables_are_the_doc_s(made: Daemon):
    db = made.data_dir / "events.db"
    create = _one(r"`(CREATE UNIQUE INDEX events_request ON [^`]*)`", STORAGE).group(1)
    (sql,), = _query(db, "SELECT sql FROM sqlite_master WHERE name = 'events_request'")
    assert " ".join(sql.split()) == create
    assert "UNIQUE(session_id, session_seq)" in _query(db, "SELECT sql FROM sqlite_master WHERE name = 'events'")[0][0]
    assert _query(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name LIKE 'sqlite_autoindex_events_%'")[0][0] == 1

    meta = _one(r"`(meta)\(key TEXT PRIMARY KEY, value TEXT NOT NULL\) WITHOUT ROWID`", STORAGE)
    # (a WITHOUT ROWID table's primary key is NOT NULL by itself)
    assert _columns(db, meta.group(1)) == [("key", "TEXT", 1, None, 1), ("value", "TEXT", 1, None, 0)]
    assert "WITHOUT ROWID" in _query(db, "SELECT sql FROM sqlite_master WHERE name = 'meta'")[0][0]

    m = _one(r"`dictionaries\(([^)]*)\)`", STORAGE)
    drawn = []
    for col in m.group(1).split(","):
        words = col.split()
        drawn.append((words[0], words[1], int("NOT NULL" in col), None, int("PRIMARY KEY" in col)))
    assert _columns(db, "dictionaries") == drawn
    tables = {r[0] for r in _query(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"events", "meta", "dictionaries"}, tables


async def test_the_format_marker_is_the_one_the_doc_names(made: Daemon):
    """"format **`lens-events`, version 1**", and the ``meta`` keys of its table: those a fresh
    log holds are among them, with the marker's values."""
    fmt, version = _one(r"This page describes format \*\*`([a-z-]+)`, version (\d+)\*\*", STORAGE).groups()
    assert _one(r"records `format = '([a-z-]+)'` and `format_version = '(\d+)'`", STORAGE).groups() == (fmt, version)
    keys_table = _section(STORAGE, "### `meta`")
    keys = set(re.findall(r"^\| `([a-z_]+)(?::<seq>)?` \|", keys_table, re.M))
    assert {"format", "format_version", "created_ts", "active_dict_id", "max_event_bytes", "ts_step_back"} == keys
    meta = dict(_query(made.data_dir / "events.db", "SELECT key, value FROM meta"))
    assert meta["format"] == fmt and meta["format_version"] == version
    assert {"format", "format_version", "created_ts"} <= set(meta) <= keys, meta
    assert int(meta["created_ts"]) > 0


# --------------------------------------------------------------------------- storage-format.md: projections.db


def _drawn_projection_tables() -> dict[str, list[str]]:
    """Every ``name(col, col, …)`` the page gives for ``projections.db``."""
    text = _section(STORAGE, "## `projections.db` is disposable")
    drawn = {}
    for name, cols in re.findall(r"`([a-z_]+)\(([a-z_, \n]+)\)`", text):
        drawn[name] = [c.strip() for c in cols.split(",")]
    return drawn


async def test_the_projection_tables_and_their_columns_are_the_doc_s(made: Daemon):
    db = made.data_dir / "projections.db"
    drawn = _drawn_projection_tables()
    assert {"positions", "inputs", "source", "projects", "sessions", "snapshots", "stats_kinds"} <= set(drawn), drawn
    for table, cols in drawn.items():
        assert [c[0] for c in _columns(db, table)] == cols, table
    # The history tables the page names without their columns, and no table it does not name.
    text = _section(STORAGE, "## `projections.db` is disposable")
    named = set(re.findall(r"`([a-z_]+)`", text)) | set(drawn)
    tables = {r[0] for r in _query(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    fts_shadows = {t for t in tables if re.fullmatch(r"history_fts_[a-z]+", t)}
    assert tables - fts_shadows <= named, sorted(tables - fts_shadows - named)
    history = set(re.findall(r"`(history_[a-z]+)` \(", text))
    assert len(history) == 6 and history <= tables, history


async def test_the_list_indexes_and_projection_versions_are_the_doc_s(made: Daemon):
    """``projects_created (created_ts, id)``, ``sessions_created (created_ts DESC, id)``,
    ``sessions_project (project_id, created_ts DESC, id)``, and "projects 2, sessions 5" as the
    versions ``positions`` records."""
    db = made.data_dir / "projections.db"
    text = _section(STORAGE, "## `projections.db` is disposable")
    indexes = re.findall(r"`([a-z_]+) \(([A-Za-z_, ]+)\)`", text)
    assert [n for n, _ in indexes] == ["projects_created", "sessions_created", "sessions_project"], indexes
    for name, cols in indexes:
        (sql,), = _query(db, f"SELECT sql FROM sqlite_master WHERE type = 'index' AND name = '{name}'")
        assert re.sub(r"\s+", " ", sql).endswith(f"({cols})"), (name, sql)
    versions = dict(re.findall(r"\b([a-z]+) (\d+)\b", _one(r"a new version of its projection \(([^)]*)\)", text).group(1)))
    recorded = {name: str(v) for name, v, _ in _query(db, "SELECT name, version, seq FROM positions")}
    for name, version in versions.items():
        assert recorded[name] == version, (name, recorded)
    m = _one(r"version (\d+) of the\s+projection, an older table is folded again", text)
    assert recorded["artifact_names"] == m.group(1)


# --------------------------------------------------------------------------- storage-format.md: what opening refuses


def _refusal_rows() -> dict[str, str]:
    """The table of "Format marker, and what opening refuses": first cell -> second cell."""
    text = _section(STORAGE, "## Format marker, and what opening refuses")
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
    code = re.match(rf"`({_CODE})`", found[0])
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
    m = re.match(rf"lens: ({_CODE}): (.*)$", last)
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
    code, quoted = _row("`events.db` of 0 bytes")
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


# --------------------------------------------------------------------------- storage-format.md: the `lens log` commands


def _help(words: list[str]) -> str:
    out = subprocess.run([*lens_command(), *words, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, (words, out.stderr)
    return out.stdout


def _shown_command_lines(text: str, command: str) -> list[list[str]]:
    """Every ``lens COMMAND …`` line of the page's code blocks and inline code: its words, then
    the flags it shows."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines += [ln.split("#")[0] for ln in block.splitlines()]
    lines += re.findall(r"`(lens [^`]*)`", text)
    out = []
    for line in lines:
        for part in re.split(r"&&|\|(?![^\[]*\])", line):  # (not the `|` of `[--data DIR | --config PATH]`)
            m = re.match(rf"\s*(?:\.\.\.|lens) ({command}(?: [a-z]+)*)(.*)$", part.strip())
            if m and ": " not in part:
                out.append([*m.group(1).split(), *re.findall(r"(?<![\w-])--[a-z][a-z-]*", m.group(2))])
    return out


def _assert_taken(commands: list[list[str]]) -> None:
    for argv in commands:
        words = [w for w in argv if not w.startswith("--")]
        text = _help(words)
        assert text.startswith(f"usage: lens {' '.join(words)} "), (argv, text)
        options = text.split("options:", 1)[1]
        for flag in (w for w in argv if w.startswith("--")):
            assert re.search(rf"^  (?:-\w, )?{re.escape(flag)}\b", options, re.M), (argv, flag, text)


def test_every_lens_log_line_of_the_storage_page_is_one_lens_takes():
    commands = [c for c in _shown_command_lines(STORAGE, "log") if c != ["log"]]  # (`lens log …`)
    assert {c[1] for c in commands if not c[1].startswith("-")} == {"decode", "verify", "rebuild", "stats"}, commands
    assert len(commands) >= 8, commands
    _assert_taken(commands)
    serve = _shown_command_lines(STORAGE, "serve")
    assert ["serve", "--data"] in serve, serve
    _assert_taken(serve)


async def test_decode_prints_exactly_the_keys_the_doc_lists(made: Daemon):
    """``decode``'s keys, in order, and ``--raw``'s envelope plus ``dict_id``, ``raw_size``,
    ``body_encoding`` (with the value the page gives) and ``body``; ``verify``'s line."""
    keys = _one(r"with exactly the keys `([^`]*)`", STORAGE).group(1).split(",")
    keys = [k.strip() for k in keys]
    out = await run_lens(made.root, "log", "decode", "--data", str(made.data_dir))
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(events) > 5 and all(list(e) == keys for e in events), (keys, events[0])
    assert all(isinstance(e["ts"], int) and "kind" not in e["body"] for e in events)
    m = _one(r"the same envelope plus `dict_id`, `raw_size`,\s+`body_encoding` \(`\"([^\"]+)\"`\) and `body` as base64",
             STORAGE)
    out = await run_lens(made.root, "log", "decode", "--raw", "--data", str(made.data_dir))
    raw = [json.loads(line) for line in out.stdout.splitlines()]
    envelope = [k for k in keys if k != "body"]
    assert all(sorted(r) == sorted([*envelope, "dict_id", "raw_size", "body_encoding", "body"]) for r in raw), raw[0]
    assert {r["body_encoding"] for r in raw} == {m.group(1)}
    said = _one(r"It prints `(ok): N\s+event\(s\) verified`", STORAGE).group(1)
    out = await run_lens(made.root, "log", "verify", "--data", str(made.data_dir))
    assert out.stdout.splitlines()[-1] == f"{said}: {len(events)} event(s) verified", out.stdout


def test_the_codes_verify_reports_are_those_the_doc_lists():
    """The codes of the ``verify`` bullet are the codes ``verify_log`` can yield (and those a
    damaged file or the clock give: ``STORE_CORRUPT``, ``TS_AHEAD_OF_CLOCK``,
    ``EVENT_UNKNOWN_DICTIONARY``), every one documented in docs/errors.md."""
    import inspect

    from runtime import logcli

    bullet = _one(r"^- \*\*verify\*\* .*?(?=^- \*\*rebuild\*\*)", STORAGE, re.S | re.M).group(0)
    said = set(re.findall(rf"`({_CODE})`", bullet[bullet.index("The codes are stable"):]))
    source = inspect.getsource(logcli.verify_log) + inspect.getsource(logcli._verify_rows)
    yielded = set(re.findall(rf"f?\"({_CODE}): ", source))
    assert len(yielded) >= 12, yielded
    assert said == yielded | {"STORE_CORRUPT", "TS_AHEAD_OF_CLOCK", "EVENT_UNKNOWN_DICTIONARY"}, (said ^ yielded)
    assert not said - set(documented_codes())


async def test_the_usage_error_the_doc_quotes_is_the_one_printed(tmp_path: Path):
    quoted = _one(r"\(`(lens log decode: USAGE_ERROR: argument\s+--from: 'x' is not a whole number)`\)", STORAGE).group(1)
    out = await run_lens(tmp_path, "log", "decode", "--from", "x", check=False)
    assert out.returncode == 2 and out.stderr.splitlines()[-1] == " ".join(quoted.split()), out.stderr


# --------------------------------------------------------------------------- executor.md


def test_every_lens_executor_line_of_the_executor_page_is_one_lens_takes():
    """The remote host's ``lens executor serve`` line (with ``--state`` and ``--token-stdin``),
    and the line the pool spawns, which is also the one ``runtime/executors.py`` runs."""
    commands = _shown_command_lines(EXECUTOR, "executor serve")
    # the alternative the block gives as a comment: `# or: ... --token-stdin < token-file`
    commands.append(["executor", "serve", *re.findall(r"--[a-z-]+", _one(r"# or: \.\.\. ([^\n]*)", EXECUTOR).group(1))])
    flags = {f for c in commands for f in c if f.startswith("--")}
    assert {"--workspace", "--listen", "--state", "--token-stdin"} <= flags, commands
    _assert_taken([c for c in commands if c[:2] == ["executor", "serve"]])
    spawn = _one(r"`(python -m runtime\.cli executor serve [^`]*)`", EXECUTOR).group(1)
    spawn_flags = re.findall(r"--[a-z-]+", spawn)
    _assert_taken([["executor", "serve", *spawn_flags]])
    source = (ROOT / "runtime" / "executors.py").read_text(encoding="utf-8")
    assert re.findall(r'"(--[a-z-]+)"', source.split('"executor", "serve"', 1)[1].split("]", 1)[0]) == spawn_flags


def test_the_executor_numbers_and_defaults_are_the_code_s():
    from runtime.executors import IDLE_STOP_S
    from tools.executor import MAX_TOKEN_CHARS

    minutes = int(_one(r"for (\d+) minutes \(`IDLE_STOP_S`\)", EXECUTOR).group(1))
    assert IDLE_STOP_S == minutes * 60
    listen = _one(r"Without `--listen` it listens on `([0-9.]+:\d+)`", EXECUTOR).group(1)
    assert f"(default {listen})" in _help(["executor", "serve"])
    assert _one(r"# (\d+) to (\d+) printable ASCII characters", EXECUTOR).group(2) == str(MAX_TOKEN_CHARS)


async def _executor(cwd: Path, token: str | None, *argv: str) -> tuple[int | None, str, str]:
    """``lens executor serve ARGV`` with ``LENS_EXECUTOR_TOKEN`` = ``token``: (None, its listening
    line, "") once it listens (it is then stopped), or (exit code, "", its last stderr line)."""
    import os

    import trio

    env = {k: v for k, v in os.environ.items() if k != "LENS_EXECUTOR_TOKEN"}
    if token is not None:
        env["LENS_EXECUTOR_TOKEN"] = token
    proc = await trio.lowlevel.open_process([*lens_command(), "executor", "serve", *argv], cwd=cwd, env=env,
                                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE)
    try:
        with trio.fail_after(60):
            out = b""
            while b"\n" not in out:
                chunk = await proc.stdout.receive_some(4096)
                if not chunk:
                    break
                out += chunk
            if out.startswith(b"lens executor: listening on "):
                proc.terminate()
                await proc.wait()
                return None, out.decode().splitlines()[0], ""
            err = b""
            while chunk := await proc.stderr.receive_some(4096):
                err += chunk
            return await proc.wait(), "", err.decode().strip().splitlines()[-1]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_the_executor_starts_and_refuses_as_the_page_says(tmp_path: Path):
    """The token's bounds (16 and 4096 characters start; 15, none and 4097 are refused) and the
    refusals the page lists, each ``lens executor: CODE: message``, exit 2; a started one prints
    ``lens executor: listening on 127.0.0.1:<port>``."""
    low, high = (int(n) for n in _one(r"# (\d+) to (\d+) printable ASCII characters", EXECUTOR).groups())
    refusals = dict(re.findall(rf"`({_CODE})`\s+\(([^)]*(?:\([^)]*\)[^)]*)*)\)", _one(
        r"When it cannot start it prints `lens executor: CODE: message` on stderr and exits 2:(.*?)\n\n",
        EXECUTOR, re.S).group(1)))
    assert {"EXECUTOR_TOKEN_MISSING", "EXECUTOR_TOKEN_INVALID", "INVALID_ARGUMENT", "LISTEN_FAILED",
            "WORKSPACE_INVALID", "STATE_DIR_INVALID"} == set(refusals), refusals
    assert f"shorter than {low} characters" in refusals["EXECUTOR_TOKEN_MISSING"]
    assert f"longer than {high} characters" in refusals["EXECUTOR_TOKEN_INVALID"]
    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    base = ["--workspace", str(ws), "--listen", "127.0.0.1:0", "--state", str(state)]
    for token in ("t" * low, "t" * high):
        code, line, err = await _executor(tmp_path, token, *base)
        assert code is None and re.fullmatch(r"lens executor: listening on 127\.0\.0\.1:\d+", line), (len(token), err)
    cases = [
        ("t" * (low - 1), base, "EXECUTOR_TOKEN_MISSING"),
        (None, base, "EXECUTOR_TOKEN_MISSING"),
        ("t" * (high + 1), base, "EXECUTOR_TOKEN_INVALID"),
        ("t" * (low - 1) + "\u00e9", base, "EXECUTOR_TOKEN_INVALID"),
        ("t" * low, ["--workspace", str(ws), "--listen", "localhost", "--state", str(state)], "INVALID_ARGUMENT"),
        ("t" * low, ["--workspace", str(tmp_path / "none"), "--listen", "127.0.0.1:0", "--state", str(state)],
         "WORKSPACE_INVALID"),
        ("t" * low, ["--workspace", str(ws), "--listen", "127.0.0.1:0", "--state", str(ws / "st")], "STATE_DIR_INVALID"),
    ]
    for token, argv, expected in cases:
        code, _, err = await _executor(tmp_path, token, *argv)
        assert code == 2 and err.startswith(f"lens executor: {expected}: "), (expected, token and len(token), err)


# --------------------------------------------------------------------------- providers.md


def _provider_config(**fields: object) -> str:
    entry = {"id": "oa", "protocol": "openai-responses", "models": [{"id": "m1"}], **fields}
    return json.dumps({"providers": [entry]})


def test_the_providers_config_example_is_read_as_the_page_says():
    """The page's example, put in braces, is a config Lens reads, with the providers, models and
    default it shows; each key of the key table is a key of a provider or model entry."""
    from runtime.config import ModelConfig, ProviderConfig, parse_config, unknown_keys

    block = _one(r"## Configuration\n\n```jsonc\n(.*?)```", PROVIDERS, re.S).group(1)
    text = "{" + block + "}"
    assert unknown_keys(text) == []
    cfg = parse_config(text, "providers.md")
    assert [(p.id, p.protocol) for p in cfg.providers] == re.findall(
        r'"id": "([a-z]+)", "protocol": "([a-z-]+)"', block)
    assert cfg.default_model == "claude/claude-sonnet-5"
    table = _one(r"\| key \| meaning \|\n(.*?)\n\n", PROVIDERS, re.S).group(1)
    keys = re.findall(r"^\| `([A-Za-z\[\]._]+)`(?: · `([A-Za-z\[\]._]+)`)? \|", table, re.M)
    provider_fields = set(ProviderConfig.__struct_encode_fields__)
    model_fields = set(ModelConfig.__struct_encode_fields__)
    named = [k for pair in keys for k in pair if k]
    assert len(named) >= 12, named
    for key in named:
        if key.startswith("models[]."):
            assert key.removeprefix("models[].") in model_fields, key
        else:
            assert key in provider_fields, key


@pytest.mark.parametrize("key", ["timeoutSeconds", "maxRetries"])
def test_the_provider_bounds_and_defaults_hold_at_and_one_past_them(key: str):
    from runtime.config import ConfigError, ProviderConfig, parse_config

    row = _one(rf"^\| `{key}` \|[^\n]*", PROVIDERS, re.M).group(0)
    lo, hi, default = (int(n.replace(",", "")) for n in re.search(r"\(([\d,]+)–([\d,]+); default ([\d,]+)\)", row).groups())
    assert getattr(ProviderConfig(id="x", protocol="faux"), {"timeoutSeconds": "timeout_seconds",
                                                             "maxRetries": "max_retries"}[key]) == default
    for value in (lo, hi):
        parse_config(_provider_config(**{key: value}))
    for value in (lo - 1, hi + 1):
        with pytest.raises(ConfigError, match=rf"providers\[0\]\.{key} must be {lo} to {hi}"):
            parse_config(_provider_config(**{key: value}))


def test_the_cache_ttl_refusal_is_the_one_the_page_quotes():
    from runtime.config import ConfigError, parse_config

    quoted = _one(r"\(`(provider 'oa' model 'm1': cacheTtl must be '30m' or '12h', not '2h')`\)", PROVIDERS).group(1)
    with pytest.raises(ConfigError) as caught:
        parse_config(json.dumps({"providers": [{"id": "oa", "protocol": "openai-responses",
                                                "models": [{"id": "m1", "cacheTtl": "2h"}]}]}))
    assert quoted in str(caught.value), caught.value


def test_the_built_in_providers_are_the_page_s():
    from runtime.providers.builtin import BUILTINS

    table = _one(r"\| id \| protocol \| base URL \| key \| models \(context window\) \|\n(.*?)\n\n", PROVIDERS, re.S).group(1)
    rows = []
    for line in table.splitlines()[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        ident, protocol = (re.search(r"`([^`]*)`", c).group(1) for c in cells[:2])
        url, url_env = re.findall(r"`([^`]*)`", cells[2])
        key = re.search(r"`([^`]*)`", cells[3]).group(1)
        window = int(re.search(r"\(([\d,]+) each\)", cells[4]).group(1).replace(",", ""))
        models = tuple((m, window) for m in re.findall(r"`([^`]*)`", cells[4]))
        rows.append((ident, protocol, url, key, url_env, models))
    assert rows == [(b.id, b.protocol, b.base_url, b.key_env, b.base_url_env, b.models) for b in BUILTINS]


# --------------------------------------------------------------------------- ptc.md


def _ptc_number(text: str) -> int:
    text = text.replace(",", "")
    return int(text.split()[0]) * 2**20 if text.endswith("MiB") else int(text)


def test_the_ptc_limits_table_and_numbers_are_the_code_s():
    from tools.ptc import tool
    from tools.ptc.interpreter import _MESSAGE_CHARS, MAX_INT_BITS, Limits

    table = _section(PTC, "## Limits").split("\n\n", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| ([\d,]+(?: MiB)?) \|", table, re.M))
    assert set(rows) == set(Limits.__dataclass_fields__), rows
    assert {k: _ptc_number(v) for k, v in rows.items()} == vars(Limits())
    default, lo, hi = (int(n.replace(",", "")) for n in
                       _one(r"`timeout_ms` \(default ([\d,]+), ([\d,]+)–([\d,]+)\)", PTC).groups())
    assert (default, lo, hi) == (tool.DEFAULT_TIMEOUT_MS, 1, tool.MAX_TIMEOUT_MS)
    assert _ptc_number(_one(r"what the program printed \(at most (1 MiB)\)", PTC).group(1)) == Limits().max_output_bytes
    assert int(_one(r"the images the calls returned \(at most (\d+)\)", PTC).group(1)) == tool.MAX_IMAGES
    bits = _ptc_number(_one(r"may not exceed ([\d,]+) bits \(`2 \*\* 9999`", PTC).group(1))
    assert bits == MAX_INT_BITS
    assert _ptc_number(_one(r"a message longer than ([\d,]+) characters is cut", PTC).group(1)) == _MESSAGE_CHARS


async def _run(code: str):
    from tools.ptc.interpreter import run_program

    async def no_tools(name: str, args: dict) -> object:
        raise AssertionError(name)

    return await run_program(code, no_tools, [])


async def test_the_ptc_limits_hold_at_and_one_past_them_with_the_page_s_codes():
    """The program's size (exactly the limit accepted), the integer bits (``2 ** 9999`` fine,
    ``2 ** 10000`` not), and each code the errors table names for them."""
    from tools.ptc.interpreter import Limits

    codes = dict(re.findall(r"^\| `(PTC_[A-Z_]+)` \| ([^|]*) \|", _section(PTC, "## Errors"), re.M))
    assert len(codes) == 12, codes
    size = Limits().max_code_bytes
    filler = "x = 1\n"
    program = filler * (size // len(filler)) + "#" * (size % len(filler))
    assert len(program.encode()) == size
    assert (await _run(program)).error is None
    out = await _run(program + "#")
    assert out.error is not None and out.error.code == "PTC_CODE_TOO_LARGE" and "PTC_CODE_TOO_LARGE" in codes
    fine, refused = _one(r"\(`(2 \*\* \d+)` is\s+fine, `(2 \*\* \d+)` is not\)", PTC).groups()
    assert (await _run(f"x = {fine}")).error is None
    out = await _run(f"x = {refused}")
    assert out.error is not None and out.error.code == "PTC_VALUE_TOO_LARGE", out.error
    assert "an integer over 10,000 bits" in codes["PTC_VALUE_TOO_LARGE"]
    quoted = {code: re.findall(r'"([^"]*\(line \d+\))"', when) for code, when in codes.items()}
    assert quoted["PTC_NAME_ERROR"] == ["name 'x' is not defined (line 2)"]
    out = await _run("y = 1\nprint(x)")
    assert (out.error.code, out.error.message) == ("PTC_NAME_ERROR", quoted["PTC_NAME_ERROR"][0])
    out = await _run("y = 1\n\nimport os")
    assert (out.error.code, out.error.message) == ("PTC_NOT_ALLOWED", quoted["PTC_NOT_ALLOWED"][0]), out.error.message
    out = await _run("d = {}\n\n\nd['x']")
    assert (out.error.code, out.error.message) == ("PTC_RUNTIME", quoted["PTC_RUNTIME"][0]), out.error.message
    out = await _run("\n" * 8 + "raise ValueError('bad input')")
    assert (out.error.code, out.error.message) == ("PTC_UNCAUGHT", quoted["PTC_UNCAUGHT"][0]), out.error.message


# --------------------------------------------------------------------------- every page: codes and variables


def _environment_names(text: str) -> set[str]:
    """The environment variables a page names (upper-case names in backquotes that are no code)."""
    return set(re.findall(r"`\$?((?:OPENAI|ANTHROPIC|LENS|EXA|XDG|HTTPS?|NO)_[A-Z_]+)\b(?!\()", text)) - {"HTTP_ERROR"}


def test_every_error_code_a_page_names_is_documented():
    documented = set(documented_codes())
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "runtime").rglob("*.py")) + "\n".join(
        p.read_text(encoding="utf-8") for pkg in ("tools", "events", "projections") for p in (ROOT / pkg).rglob("*.py"))
    for name, text in PAGES.items():
        if name == "errors.md":  # (its table is the documented list; it also names retired codes)
            continue
        named = set(re.findall(rf"`(?:lens(?: [a-z]+)*: )?({_CODE})`", text)) - _environment_names(text)
        # (names the code itself has: a constant, grpc's status names, the credential variables
        # it knows; a code the code does not spell anywhere and errors.md lacks is a page's slip)
        unknown = sorted(c for c in named if c not in documented and not re.search(rf"\b{c}\b", source))
        assert not unknown, (name, unknown)


def test_every_environment_variable_a_page_names_is_one_lens_reads():
    """A variable the pages tell a user to set (or say Lens reads or drops) is named in the code."""
    source = "\n".join(p.read_text(encoding="utf-8") for pkg in ("runtime", "tools", "events", "projections", "tests")
                       for p in (ROOT / pkg).rglob("*.py"))  # (tests: the SDKs' own variables Lens drops)
    named = set().union(*(_environment_names(t) for t in PAGES.values())) - {"LENS_ERROR"}  # (a base class's code)
    assert {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "LENS_EXECUTOR_TOKEN", "XDG_STATE_HOME"} <= named, named
    # (the HTTP client's proxy variables are httpx's, which the page says still apply)
    missing = sorted(v for v in named - {"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"} if v not in source)
    assert not missing, missing


def test_the_command_and_connection_numbers_of_the_executor_page_are_the_code_s():
    from runtime import executor_client as client
    from tools import workspace_tools
    from tools.executor import PROTOCOL_VERSION, commands, runs, server

    commands_text = _section(EXECUTOR, "## Commands (`Run(CommandRequest) -> stream CommandEvent`)")
    default, most = (int(n.replace(" ", "")) for n in
                     _one(r"`timeout_ms` \(default ([\d ]+), at most ([\d ]+)\)", commands_text).groups())
    assert (default, most) == (commands.DEFAULT_TIMEOUT_MS, commands.MAX_TIMEOUT_MS)
    assert most == workspace_tools.MAX_COMMAND_TIMEOUT_MS
    assert float(_one(r"then SIGKILL after (\d+) s", commands_text).group(1)) == commands.KILL_GRACE_S
    out_default, out_most = _one(r"`max_output_bytes` \(default (\d+) MiB, at most (\d+) MiB\)", commands_text).groups()
    assert int(out_default) * 2**20 == commands.DEFAULT_MAX_OUTPUT
    assert int(out_most) * 2**20 == commands.MAX_OUTPUT == workspace_tools.MAX_COMMAND_OUTPUT
    running, threads = _one(r"\*\*At most (\d+) commands run at once\*\* on one executor \(each holds a server thread"
                            r" while it\s+streams; the server has (\d+)\)", commands_text).groups()
    assert (int(running), int(threads)) == (server.MAX_RUNNING_COMMANDS, server.SERVER_THREADS)
    assert float(_one(r"takes none of its output for (\d+) s is cancelled", commands_text).group(1)) == server.SEND_STALL_S
    assert float(_one(r"read for ([\d.]+) s, then what is left is ended", commands_text).group(1)) == commands.DRAIN_GRACE_S
    kib, passing = _one(r"A command is at most (\d+) KiB of UTF-8\s+\(([\d,]+) bytes pass, one more is `COMMAND_TOO_LONG`",
                        commands_text).groups()
    assert int(kib) * 1024 == int(passing.replace(",", "")) == workspace_tools.MAX_COMMAND_BYTES
    assert float(_one(r"Core waits for the exit at most ([\d.]+) s\s+\(`ABORT_OUTPUT_WAIT_S`\)",
                      commands_text).group(1)) == workspace_tools.ABORT_OUTPUT_WAIT_S
    run_id, past = _one(r"`CommandRequest\.run_id` is at most (\d+) characters \((\d+) is `INVALID_ARGUMENT`",
                        commands_text).groups()
    assert int(run_id) == runs.MAX_RUN_ID_CHARS and int(past) == int(run_id) + 1
    assert int(_one(r"Both were added within `core-executor-rpc: (\d+)`", commands_text).group(1)) == PROTOCOL_VERSION

    contract = _section(EXECUTOR, "## Connection contract")
    assert int(_one(r"`lens-protocol: (\d+)`", contract).group(1)) == PROTOCOL_VERSION
    assert int(_one(r"reply past the (\d+) MiB a gRPC message may hold", contract).group(1)) * 2**20 == client.MAX_MESSAGE_BYTES
    assert int(_one(r"the\s+channel holds (\d+) events", contract).group(1)) == client.STREAM_BUFFER_EVENTS
    assert int(_one(r"a fixed (\d+) MiB HTTP/2 receive window", contract).group(1)) * 2**20 == client.RECEIVE_WINDOW_BYTES
    limiter = _one(r"Open streams share a\s+`CapacityLimiter` \((\d+)\)", contract).group(1)
    assert f"trio.CapacityLimiter({limiter})" in (ROOT / "runtime" / "executor_client.py").read_text()


def test_the_ptc_builtins_and_methods_are_exactly_the_page_s():
    """The builtins table and the method lists of ptc.md are the interpreter's, both ways."""
    from tools.ptc import interpreter

    table = _section(PTC, "## Builtins")
    listed = set()
    for first_cell in re.findall(r"^\| ([^|]*) \|", table, re.M):
        listed |= set(re.findall(r"`([A-Za-z_]+)(?:\(|`)", first_cell))
    listed -= {"Builtin"}
    known = set(interpreter._BUILTINS) | set(interpreter._ERROR_CLASSES)
    assert listed == known, (sorted(listed - known), sorted(known - listed))
    methods = _section(PTC, "## Methods")
    for kind, names in (("str", interpreter._STR_METHODS), ("list", interpreter._LIST_METHODS),
                        ("dict", interpreter._DICT_METHODS), ("set", interpreter._SET_METHODS)):
        said = _one(rf"^- `{kind}`: `([a-z\s]+)`", methods, re.M).group(1).split()
        assert set(said) == set(names), (kind, sorted(set(said) ^ set(names)))


def test_every_http_status_a_provider_answers_has_the_code_and_retry_the_error_table_gives():
    """Each status from 400 to 599 (401 aside: ``AUTH_FAILED`` before the status is read), as the
    SDK error of a refused request: the code and the retryable the page's table gives it (a row
    naming the status, else its ``5xx`` row, else its "any other 4xx status" row)."""
    from runtime.providers.sdk import _by_status

    table = _one(r"\| code \| when \| retryable \|\n(.*?)\n\n", PROVIDERS, re.S).group(1)
    by_status: dict[str, tuple[str, bool]] = {}
    for line in table.splitlines()[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        code, when, retry = re.match(r"`([A-Z_]+)`", cells[0]).group(1), cells[1], cells[2]
        if "any other 4xx status" in when:
            by_status.setdefault("4xx", (code, retry == "yes"))
        # (a status qualified by what the body says, ``429 `insufficient_quota` ``, is not the status alone)
        for status in re.findall(r"(?<![\w.])(\d{3}|5xx)(?![\w])(?! `)", when.split(" (")[0]):
            by_status.setdefault(status, (code, retry == "yes"))
    assert {"403", "404", "408", "413", "400", "422", "402", "429", "529", "5xx"} <= set(by_status), by_status
    wrong = []
    for status in (s for s in range(400, 600) if s != 401):
        said = by_status.get(str(status)) or by_status.get(f"{str(status)[0]}xx")
        if said != _by_status(status, "", ""):
            wrong.append((status, said, _by_status(status, "", "")))
    assert not wrong, wrong


@pytest.mark.parametrize("status", [409, 410, 451])
@pytest.mark.parametrize("protocol", ["openai-responses", "openai-chat", "anthropic"])
async def test_a_4xx_status_the_table_lists_is_answered_so_through_the_sdk(protocol: str, status: int):
    """The rows of those statuses, run: a loopback server speaking the protocol refuses the
    request with the status, through the official SDK (its retries off)."""
    from runtime.providers.base import ProviderError
    from tests.providers.test_stream_fuzz import _error_reply, ask

    rows = _one(r"\| code \| when \| retryable \|\n(.*?)\n\n", PROVIDERS, re.S).group(1)
    row = next((ln for ln in rows.splitlines() if re.search(rf"\| {status} \(", ln)), None) or next(
        ln for ln in rows.splitlines() if "any other 4xx status" in ln)
    code, retry = re.match(r"\| `([A-Z_]+)` \| [^|]* \| (yes|no) \|", row).groups()
    outcome, _, _, _ = await ask(protocol, [_error_reply(protocol, status, "provider", "refused", None)], then=False)
    assert isinstance(outcome, ProviderError), outcome
    assert (outcome.code, outcome.retryable, outcome.status) == (code, retry == "yes", status), outcome


def _tool_table() -> dict[str, tuple[list[str], list[str]]]:
    """The executor page's tool table: tool -> (required arguments, optional ones), as written."""
    text = _section(EXECUTOR, "## Tools (`Call(tool, call_id, arguments_json) -> ToolReply`)")
    out = {}
    for tool, args in re.findall(r"^\| `([a-z_]+)` \| `([^`]*)`", text, re.M):
        names = [a.split(":")[0].strip() for a in re.split(r",\s*", args)]
        out[tool] = ([n for n in names if not n.endswith("?")], [n.rstrip("?") for n in names if n.endswith("?")])
    return out


def test_the_executor_tool_arguments_are_those_the_executor_takes():
    """Each tool's arguments in the page's table, required and optional (``?``), are the
    executor's ``ARGUMENT_NAMES`` (what a call is checked against before it runs)."""
    from tools.executor.server import ARGUMENT_NAMES

    table = _tool_table()
    assert set(ARGUMENT_NAMES) <= set(table), table
    for tool, (required, optional) in ARGUMENT_NAMES.items():
        assert table[tool] == (list(required), list(optional)), (tool, table[tool], (required, optional))


async def test_a_browse_list_without_a_path_lists_the_workspace_root(tmp_path: Path):
    """``browse_list`` run on a real executor with the arguments its row marks optional left out."""
    from runtime.executor_client import ExecutorClient
    from tests.executor.conftest import start_executor, stop_process

    required, _ = _tool_table()["browse_list"]
    ex = start_executor(tmp_path)
    try:
        (ex.workspace / "a.txt").write_text("x")
        client = ExecutorClient(ex.address, ex.token)
        try:
            await client.hello()
            outcome = await client.call("browse_list", dict.fromkeys(required, "."))
        finally:
            client.close()
    finally:
        stop_process(ex.proc)
    assert [e["name"] for e in outcome.result["entries"]] == ["a.txt"], outcome
    shape = _one(r"^\| `browse_list` \| [^|]* \| `\{([^`]*)\}` \|", EXECUTOR, re.M).group(1)
    entry = re.search(r"entries: \[\{([^}]*)\}\]", shape).group(1)
    top = re.sub(r"entries: \[\{[^}]*\}\]", "entries", shape)
    assert sorted(outcome.result) == sorted(k.strip() for k in top.split(","))
    assert sorted(outcome.result["entries"][0]) == sorted(k.strip() for k in entry.split(","))


def test_the_file_events_the_executor_page_names_have_its_fields():
    from events import types as t

    edited = _one(r"a `file\.edited` event \(`([^`]*)`", EXECUTOR).group(1)
    fields = []
    for name in re.split(r",\s*", edited):
        fields += [name.replace("before/after", side) for side in ("before", "after")] if "before/after" in name else [name]
    assert fields == list(t.FileEdited.__struct_fields__), fields
    reverted = _one(r"`file\.reverted \{([^}]*)\}`", EXECUTOR).group(1).split(", ")
    assert reverted == list(t.FileReverted.__struct_fields__)


def test_every_file_of_the_repository_a_page_names_exists():
    """A page pointing at ``runtime/executors.py`` or ``tests/executor/`` points at something."""
    missing = []
    for name, text in PAGES.items():
        for path in set(re.findall(r"`((?:runtime|tools|events|projections|proto|config|tests|bench|docs)/[\w./-]*)`", text)):
            if not (ROOT / path).exists() and path not in {"config/lens.jsonc", "config/pair.json"}:  # (local, git-ignored)
                missing.append((name, path))
    assert not missing, missing


def test_the_restart_and_probe_numbers_of_the_executor_page_are_the_code_s():
    import inspect

    from runtime import executors

    restart = _section(EXECUTOR, "## Executor restart and reconnect")
    assert float(_one(r"and\s+`get\(\)`\s+waits\s+up\s+to\s+(\d+)\s+s\s+for\s+such\s+a\s+child\s+to\s+exit", restart).group(1)) == executors.LOST_GRACE_S
    probe = _section(EXECUTOR, "## sharedFilesystem probe")
    prefix, size = _one(r"a short-lived random file `([.\w-]+)<random>` \((\d+) random bytes\)", probe).groups()
    source = inspect.getsource(executors.ExecutorPool.probe_shared)
    assert prefix in source and f"token_bytes({size})" in source.replace("os.urandom", "token_bytes"), source


async def test_decode_s_kind_and_range_filters_hold_as_the_doc_says(made: Daemon):
    """At most N different kinds (repeats count once): N pass, N + 1 is a usage error; a
    ``--from`` past ``--to`` is an empty range, exit 0; ``--kind ''`` a usage error."""
    most = int(_one(r"at most ([\d,]+) different kinds", STORAGE).group(1).replace(",", ""))
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
    m = _one(r"`--json` prints `\{\"kinds\": \[\{([^}]*)\}\], \"total\": \{…\}\}`", STORAGE)
    fields = [f.strip() for f in m.group(1).split(",")]
    out = json.loads((await run_lens(made.root, "log", "stats", "--json", *data)).stdout)
    assert list(out) == ["kinds", "total"] and out["kinds"], out
    assert all(list(k) == fields for k in out["kinds"]), out["kinds"][0]
    assert set(out["total"]) <= set(fields) and out["total"]["events"] == sum(k["events"] for k in out["kinds"])
    assert all(k["compression_ratio"] == round(k["raw_bytes"] / k["stored_bytes"], 3) for k in out["kinds"])

    shown = _one(r"and prints\s+`(rebuilt) NAMES from N (event\(s\))`", STORAGE).groups()
    names = [p.name for p in all_projections()]
    out = await run_lens(made.root, "log", "rebuild", *data)
    line = out.stdout.strip().splitlines()[-1]
    assert re.fullmatch(rf"{shown[0]} (.*) from (\d+) {re.escape(shown[1])}", line), line
    assert all(n in line for n in names), (names, line)
    out = await run_lens(made.root, "log", "rebuild", "--projection", "nosuch", *data, check=False)
    assert out.returncode == 2 and "PROJECTION_UNKNOWN" in out.stderr, out.stderr
    assert all(n in out.stderr for n in names), out.stderr


async def test_lens_serve_says_the_default_model_it_took_as_the_providers_page_quotes(tmp_path: Path, nursery):
    """``lens serve`` with ``ANTHROPIC_API_KEY`` set and no config prints the line the page quotes
    (the key is only read, never used: no request is made)."""
    import os

    from tests.daemon.conftest import ServeProcess

    quoted = _one(r"\(`(lens: default model anthropic/claude-sonnet-5-5 \(built\s+in: ANTHROPIC_API_KEY is set\))`",
                  PROVIDERS).group(1)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.endswith("_BASE_URL")}
    env["ANTHROPIC_API_KEY"] = "sk-ant-docs-example-0000"
    serve = ServeProcess(tmp_path, env=env)
    try:
        await serve.run(nursery)
        assert " ".join(quoted.split()) in serve.lines, serve.lines
    finally:
        assert await serve.terminate() == 0


async def test_the_data_directory_holds_what_the_layout_table_lists_with_its_modes(made: Daemon):
    table = _section(STORAGE, "## Data directory layout").split("\n\n", 1)[0]
    listed = set()
    for first in re.findall(r"^\| ([^|]*) \|", table, re.M):
        names = re.findall(r"`([\w.-]+)/?`", first)
        base = names[0] if names else ""
        listed |= set(names) | {base + suffix for suffix in re.findall(r"`(-wal|-shm)`", first)}
    found = {p.name for p in made.data_dir.iterdir()}
    assert "lock" in found and "events.db" in found and found <= listed, (found, listed)
    dir_mode, file_mode = _one(r"a data directory Lens creates is mode `(0\d{3})`, and\s+`events\.db` and `projections\.db`"
                               r" are created `(0\d{3})`", STORAGE).groups()
    assert oct(made.data_dir.stat().st_mode & 0o777) == "0o" + dir_mode[1:]
    for name in ("events.db", "projections.db"):
        assert oct((made.data_dir / name).stat().st_mode & 0o777) == "0o" + file_mode[1:], name
