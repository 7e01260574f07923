"""``lens log decode | rebuild | verify | stats``: the event log from the command line.

All four open the log read-only (``rebuild`` and ``stats`` write only ``projections.db``), so
they never change events. Exit codes: 0 fine, 1 something in the log failed (each failing seq is
printed with its reason), 2 the command could not run (missing or foreign data directory, bad
arguments).
"""

from __future__ import annotations

import argparse
import base64
import errno
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterator

import apsw
import msgspec
import zstandard

from events.errors import CorruptEvent, DataDirMissing, DataDirNotWritable, LogError, StoreCorrupt, clipped, quoted
from events.reader import SEQ_MAX, SEQ_MIN, LogReader, StoredRow, numbering_step, row_problem
from events.schema import (
    ACTIVE_DICT_KEY,
    EVENTS_DB,
    FORMAT,
    FORMAT_VERSION,
    MAX_EVENT_BYTES_KEY,
    PROJECTIONS_DB,
    data_dir_problem,
    now_ms,
    recorded_active_dictionary,
    recorded_max_event_bytes,
    ts_ahead,
    ts_steps_back,
)
from events.secrets import Secrets
from events.types import KIND_MAX, KIND_TO_TYPE
from events.walcheck import REFUSED_COMMITS_AFTER, WalFinding, hidden_commits
from projections.projector import Projector, ProjectionsDamaged, ProjectionsDeletedWhileOpen, open_projections_db
from projections.registry import all_projections
from projections.stats import KindStats

from .config import ConfigError, expand_path, load_config
from .credentials import WELL_KNOWN_KEY_ENV
from .cliargs import Once, config_path, text as _text, whole_number
from .json_lines import json_line
from .terminal import shown, to_stderr
from .trust import check_private_data_dir

_json = msgspec.json.Encoder()




def _seq(value: str) -> int:
    n = whole_number(value)  # (ASCII digits: as the HTTP routes read a seq)
    if not SEQ_MIN <= n <= SEQ_MAX:
        raise argparse.ArgumentTypeError(f"{value} is outside the range of a seq ({SEQ_MIN}..{SEQ_MAX})")
    return n


def _path(value: str) -> str:
    """A directory argument: UTF-8 and not empty (see events.schema.data_dir_problem)."""
    problem = data_dir_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def _config_path(value: str) -> Path:
    """A ``lens log`` config argument: UTF-8 and not empty."""
    return config_path(_text(value))


def resolve_data_dir(data: str | None, config: Path | None) -> tuple[Path, Path | None]:
    """The data directory a ``lens log`` command reads, found as ``lens serve`` finds it:
    ``--data`` if given, else the ``dataDir`` of the config (``--config``, else
    ``config/lens.jsonc`` when present), else ``.lens``; ``~`` expanded in either.

    Raises :class:`ConfigError` (``CONFIG_INVALID``, exit 2) for a config that cannot be read
    when it is needed: an explicit ``--config`` always is (as ``lens serve`` reads it), the
    default one only without ``--data`` (the message says ``--data`` bypasses it).

    Returns the directory and the config file it was taken from (None: ``--data``, or no config
    file), which :func:`run` names in one line on stderr."""
    if data is None or config is not None:
        try:
            cfg, path, _notes = load_config(config)
        except ConfigError as exc:
            if config is not None:
                raise
            raise ConfigError(f"{exc.message}; the data directory is its dataDir (pass --data DIR to read "
                              f"a log without it)") from None
    if data is not None:
        return expand_path(data, "--data", "the command line"), None
    # (the config file it came from; None: the built-in default, there being no config file)
    return expand_path(cfg.data_dir, "dataDir", str(path)), path if path.exists() or path.is_symlink() else None


SHOWN_VALUE_CHARS = 120  # of a value echoed in a usage error, as a request path is in the API's


def _shown_value(value: str) -> str:
    """A command-line value for a message: quoted (a control character shows escaped) and cut to
    :data:`SHOWN_VALUE_CHARS` characters (a long value is not echoed whole)."""
    return repr(value if len(value) <= SHOWN_VALUE_CHARS else value[:SHOWN_VALUE_CHARS] + "…")


def _comma_list(what: str, nothing: str, example: str) -> Callable[[str], str]:
    """The type of an option that repeats or takes a comma-separated list (``--kind``,
    ``--projection``): every item must name a ``what``. A value that names none (``''``, ``,,``)
    is refused with ``nothing``; an empty item beside others (``a,,b``, ``a,``: only spaces count
    as empty) is refused naming its place, rather than skipped (it reads as a name left out)."""
    def parse(value: str) -> str:
        value = _text(value)
        items = value.split(",")
        empty = [n for n, item in enumerate(items, 1) if not item.strip()]
        if len(empty) == len(items):
            raise argparse.ArgumentTypeError(f"{nothing}; name one such as {example}")
        if empty:
            places = ("item " if len(empty) == 1 else "items ") + ", ".join(str(n) for n in empty)
            raise argparse.ArgumentTypeError(
                f"{_shown_value(value)} has an empty item ({places} of {len(items)}); each comma-separated "
                f"{what} must name one, such as {example}")
        return value
    return parse


_kind = _comma_list("kind", "an empty kind matches nothing", "input.submitted")
_projection = _comma_list("projection name", "an empty name names no projection", "stats")


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    log = sub.add_parser("log", help="decode, rebuild, verify and summarise the event log")
    # --data is taken before the subcommand too (`lens log --data DIR verify`); the subcommand's
    # own has no default, so that it replaces this one only when given (the later one wins).
    # --config likewise: the data directory is found as `lens serve` finds it (resolve_data_dir).
    # Given twice in one place (`verify --data a --data b`) either is a usage error, as for `lens
    # serve` (cliargs.Once): a repeat is no choice of place.
    log.add_argument("--data", type=_path, default=None, action=Once, metavar="DIR",
                     help="data directory (default: the config's dataDir, else .lens), also accepted after "
                          "the subcommand")
    log.add_argument("--config", type=_config_path, default=None, action=Once, metavar="PATH",
                     help="config file whose dataDir is read (default config/lens.jsonc if present), also "
                          "accepted after the subcommand")
    cmds = log.add_subparsers(dest="log_command", required=True, metavar="COMMAND")

    def data_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data", type=_path, default=argparse.SUPPRESS, action=Once, metavar="DIR",
                       help="data directory (default: the config's dataDir, else .lens)")
        p.add_argument("--config", type=_config_path, default=argparse.SUPPRESS, action=Once, metavar="PATH",
                       help="config file whose dataDir is read (default config/lens.jsonc if present)")

    p = cmds.add_parser("decode", help="print events as JSON lines")
    data_arg(p)
    p.add_argument("--session", type=_text, action=Once, help="only this session's events")
    p.add_argument("--kind", type=_kind, action="append",
                   help="only this kind (repeatable, or comma-separated)")
    p.add_argument("--from", dest="from_seq", type=_seq, default=None, metavar="SEQ", action=Once,
                   help="first seq (inclusive)")
    p.add_argument("--to", dest="to_seq", type=_seq, default=None, metavar="SEQ", action=Once,
                   help="last seq (inclusive)")
    p.add_argument("--raw", action="store_true", help="print the stored body bytes (base64) instead of decoding")
    p.set_defaults(func=run, command_func=cmd_decode, usage_error=p.error)

    p = cmds.add_parser("rebuild", help="rebuild projections from the log")
    data_arg(p)
    p.add_argument("--projection", type=_projection, action="append", metavar="NAME",
                   help="only this projection (repeatable, or comma-separated)")
    p.set_defaults(func=run, command_func=cmd_rebuild)

    p = cmds.add_parser("verify", help="check every row; never changes data")
    data_arg(p)
    p.set_defaults(func=run, command_func=cmd_verify)

    p = cmds.add_parser("stats", help="counts, sizes and compression ratio per kind")
    data_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=run, command_func=cmd_stats)


def _out(line: bytes | str) -> None:
    """One line to standard output: JSON lines with every line break escaped (see
    :func:`json_line`), text with what a terminal would act on escaped (see runtime.terminal)."""
    line = shown(line).encode() if isinstance(line, str) else json_line(line)
    if sys.stdout is None:  # started with standard output closed
        raise OSError(errno.EBADF, "standard output is closed")
    sys.stdout.buffer.write(line + b"\n")


def silence_stdout() -> None:
    """The reader of our output went away: send the rest nowhere (exit codes still count)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _err(msg: str, secrets: Secrets) -> None:
    """A line on stderr, without ``secrets`` (a stored value quoted in an error may hold one)."""
    to_stderr(msg, secrets)


MAX_KINDS = 1000  # distinct --kind values (each is one SQL parameter)


def _kinds(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return list(dict.fromkeys(k.strip() for v in values for k in v.split(",") if k.strip()))


# ---------------------------------------------------------------------- decode


def cmd_decode(args: argparse.Namespace) -> int:
    """Print the events; 1 if any row failed to decode (the others are still printed) or a
    damaged WAL hides commits (those before the damage are printed)."""
    failures = 0
    # No lower bound by default: a row whose seq was edited to 0 or below is still shown.
    after = max(args.from_seq - 1, SEQ_MIN) if args.from_seq is not None else SEQ_MIN
    kinds = _kinds(args.kind)
    if len(kinds or ()) > MAX_KINDS:  # a usage error (prints the usage, exits 2)
        args.usage_error(f"at most {MAX_KINDS} different --kind values")
    secrets = _known_secrets(args)
    with LogReader(Path(args.data)) as reader:
        if _wal_damage(reader, secrets, what="the events printed end before that frame") is not None:
            failures += 1  # (exit 1: the log holds events this prints nothing of)
        try:
            for _failed in _decode_rows(reader, args, after, kinds, secrets):
                failures += 1
        except BrokenPipeError:  # e.g. `| head -1`: stop; what failed so far still counts
            silence_stdout()
        except (StoreCorrupt, CorruptEvent) as exc:  # damaged past some row (or a session's numbering out
            # of step with seq, met by a read of that session): the rows before it are printed
            sys.stdout.flush()
            _err(f"lens: {exc.code}: {exc}", secrets)
            return 1
    return 1 if failures else 0


def _decode_rows(
    reader: LogReader, args: argparse.Namespace, after: int, kinds: list[str] | None, secrets: Secrets
) -> Iterator[None]:
    """Print each row's JSON line, scrubbed of ``secrets``; yield once per row that failed (its
    error on stderr)."""
    for kind in kinds or ():
        if kind not in KIND_TO_TYPE:  # most likely a typo; a newer Lens's kind still matches
            _err(f"lens: note: {kind!r} is not an event kind this Lens knows; "
                 f"only rows stored under exactly that name are printed", secrets)
    for row in reader.rows(after=after, to=args.to_seq, session_id=args.session, kinds=kinds):
        if args.raw:
            problem = row_problem(row)
            if problem is not None:  # e.g. a body stored as text: there are no bytes to show
                _err(f"lens: EVENT_CORRUPT: seq {row.seq}: {problem}", secrets)
                yield None
                continue
            _out(_json.encode(_raw_json(row)))
            continue
        try:
            event = reader.decode(row)
        except CorruptEvent as exc:
            _err(f"lens: {exc.code}: {exc}", secrets)
            yield None
            continue
        _out(secrets.encode(event.to_json(), _json.encode))


def _known_secrets(args: argparse.Namespace) -> Secrets:
    """The keys ``lens serve`` started here would know (built by the CLI before the command ran:
    the values this environment holds under the credential variables of the config at its
    default place), with its note on stderr when that config cannot be read. Events stored
    before their key was scrubbed are printed without it."""
    secrets: Secrets = args.secrets
    if args.secrets_note:
        _err(f"lens: note: {args.secrets_note}; only the values of {', '.join(WELL_KNOWN_KEY_ENV)} and of the "
             f"credential variables it names are redacted", secrets)
    return secrets


def _raw_json(row: StoredRow) -> dict[str, Any]:
    return {
        "seq": row.seq,
        "ts": row.ts,
        "project_id": row.project_id,
        "session_id": row.session_id,
        "session_seq": row.session_seq,
        "agent_id": row.agent_id,
        "task_id": row.task_id,
        "kind": row.kind,
        "request_id": row.request_id,
        "dict_id": row.dict_id,
        "raw_size": row.raw_size,
        "body_encoding": "zstd+msgpack;base64",
        "body": base64.b64encode(row.body).decode(),
    }


def _wal_damage(reader: LogReader, secrets: Secrets, *, what: str) -> WalFinding | None:
    """What a damaged ``events.db-wal`` hides from this command's read (commits SQLite no
    longer reads: see :mod:`events.walcheck`), said on stderr as one ``WAL_DAMAGED`` line before
    the command reads; None when it hides nothing. ``what``: what the command does with the
    shortened log, for that line."""
    wal = reader.data_dir / f"{EVENTS_DB}-wal"
    try:
        found = hidden_commits(wal)
    except OSError:  # (a WAL that cannot be read: the reader's own open says so, as it did)
        return None
    if found is not None:
        _err(f"lens: WAL_DAMAGED: {found.message(wal)} ({what}; `lens log verify` reports it)", secrets)
    return found


# ---------------------------------------------------------------------- verify


def _verify_active_dictionary(reader: LogReader, meta: dict[str, Any]) -> Iterator[tuple[int | None, str]]:
    """``meta.active_dict_id``, when recorded, names a dictionary the log holds: the writer stores
    the dictionary and names it in one transaction, and dictionaries are never deleted. Otherwise
    the writer goes on without a dictionary, which no row would show."""
    if ACTIVE_DICT_KEY not in meta:
        return
    value = meta[ACTIVE_DICT_KEY]
    shown = quoted(value, 40) if isinstance(value, str) else f"{type(value).__name__} {quoted(str(value), 40)}"
    dict_id = recorded_active_dictionary(meta)
    if dict_id is None:
        yield None, (f"META_INVALID: meta {ACTIVE_DICT_KEY} is {shown}, not a dictionary id a writer records; "
                     f"new bodies are written without a dictionary")
    elif dict_id not in reader.dictionaries():
        yield None, (f"META_INVALID: meta {ACTIVE_DICT_KEY} is {shown}, but the log holds no dictionary "
                     f"{dict_id}; new bodies are written without a dictionary")


def verify_log(reader: LogReader) -> Iterator[tuple[int | None, str]]:
    """Yield ``(seq, reason)`` for every problem found; reads only. Each reason starts with a
    stable code (``SEQ_GAP: …``, ``WAL_DAMAGED: …``, ``EVENT_CORRUPT: …``; the
    list is in docs/storage-format.md), so scripts can tell the findings apart."""
    meta = reader.meta()
    if meta.get("format") != FORMAT or str(meta.get("format_version")) != str(FORMAT_VERSION):
        version = clipped(str(meta.get("format_version")))
        yield None, f"FORMAT_MARKER: format marker is {quoted(meta.get('format'))} v{version}"
    recorded = meta.get(MAX_EVENT_BYTES_KEY)
    if recorded is not None and str(recorded) != str(recorded_max_event_bytes(meta)):  # edited
        yield None, (f"META_INVALID: meta {MAX_EVENT_BYTES_KEY} is {quoted(str(recorded), 40)}, not a maximum event "
                     f"size a writer records; reads take it as {recorded_max_event_bytes(meta)}")
    try:
        for (text,) in reader.conn.execute("PRAGMA integrity_check"):
            for line in str(text).splitlines():  # one result row may hold several lines
                if line not in ("ok", "*** in database main ***"):
                    yield None, f"SQLITE_INTEGRITY: sqlite integrity_check: {line}"
    except apsw.Error as exc:
        yield None, f"SQLITE_INTEGRITY: sqlite integrity_check could not finish: {exc}"
    wal = reader.data_dir / f"{EVENTS_DB}-wal"
    if (hidden := hidden_commits(wal)) is not None:
        yield None, f"WAL_DAMAGED: {hidden.message(wal)}"
    yield from _verify_active_dictionary(reader, meta)
    for dict_id, reason in sorted(reader.damaged_dictionaries.items()):
        yield None, f"DICTIONARY_DAMAGED: dictionary {dict_id} is damaged ({reason}); bodies that need it cannot be decoded"
    try:
        yield from _verify_rows(reader)
    except StoreCorrupt as exc:  # SQLite cannot read on from some row: report, stop there
        yield None, f"{exc.code}: {exc.message}"


def _verify_rows(reader: LogReader) -> Iterator[tuple[int | None, str]]:
    expected = 1
    last_ts = 0
    last_ts_seq = 0  # (the row holding it)
    session_seq: dict[str, int] = defaultdict(int)
    steps = ts_steps_back(reader.meta())  # (the writer's recorded steps back from a ts far ahead)
    for row in reader.rows(after=SEQ_MIN):  # every row, also one whose seq was edited below 1
        if row.seq < 1:
            yield row.seq, f"SEQ_NOT_POSITIVE: seq {row.seq} is not positive (seqs start at 1)"
        elif row.seq != expected:
            yield row.seq, f"SEQ_GAP: seq gap: expected {expected}, found {row.seq}"
        expected = max(expected, row.seq + 1)
        problem = row_problem(row)  # a mistyped column (the table is not STRICT)
        if type(row.ts) is int:
            if row.ts < 0:
                yield row.seq, f"TS_NEGATIVE: ts {row.ts} is negative (UTC milliseconds count from 1970)"
            elif row.ts < last_ts:
                if steps.get(row.seq) == (last_ts, row.ts):
                    last_ts = row.ts  # a step back the writer recorded: stamps go on from here
                else:
                    yield row.seq, f"TS_OUT_OF_ORDER: ts {row.ts} is earlier than the previous event's {last_ts}"
            if row.ts >= last_ts:
                last_ts, last_ts_seq = row.ts, row.seq
        if type(row.session_id) is str:
            want = session_seq[row.session_id] + 1
            if type(row.session_seq) not in (int, type(None)):
                session_seq[row.session_id] = want  # mistyped (reported below): take it as the next
            elif row.session_seq is None:  # reported as a row problem (EVENT_CORRUPT) below
                session_seq[row.session_id] = want
            else:  # (e.g. two rows' numbers swapped: each is reported)
                session_seq[row.session_id], wrong = numbering_step(clipped(row.session_id), want - 1, row.session_seq)
                if wrong is not None:
                    yield row.seq, f"SESSION_SEQ_OUT_OF_ORDER: {wrong}"
        if problem is not None:
            yield row.seq, f"EVENT_CORRUPT: {problem}"
            continue
        if row.session_id is None:  # the envelope rules appends enforce
            if row.session_seq is not None:
                yield row.seq, f"ENVELOPE_INVALID: session_seq {row.session_seq} on an event that belongs to no session"
            if row.request_id is not None:
                yield row.seq, (f"ENVELOPE_INVALID: request_id {quoted(row.request_id)} on an event that belongs to "
                                f"no session")
        try:
            reader.decode(row)
        except CorruptEvent as exc:
            yield row.seq, f"{exc.code}: {exc.message}"
            continue
        if row.kind not in KIND_TO_TYPE:
            yield row.seq, f"EVENT_KIND_UNKNOWN: unknown event kind {row.kind!r} (decoded as opaque; written by a newer Lens?)"
        if len(row.body) and row.raw_size <= 0:
            yield row.seq, f"RAW_SIZE_INVALID: raw_size {row.raw_size} is not positive"
        else:
            declared = zstandard.frame_content_size(row.body)  # decoded: a well-formed frame
            if declared < 0:  # a frame of unknown size holds what it decompresses to (bounded)
                declared = len(reader.codec.decompress(row.body, row.dict_id))
            if declared != row.raw_size:
                yield row.seq, f"RAW_SIZE_INVALID: raw_size {row.raw_size}, but the frame holds {declared} bytes"
    if (ahead := ts_ahead(last_ts, now_ms())) is not None:
        yield last_ts_seq, ahead


def cmd_verify(args: argparse.Namespace) -> int:
    secrets: Secrets = args.secrets  # (a reason may quote a damaged row's stored value)
    failures = 0
    count: int | str = "?"
    printing = True
    try:
        reader = LogReader(Path(args.data))
    except StoreCorrupt as exc:  # damaged past opening: that is verify's finding, not a misuse
        _out(secrets.scrub_message(f"log: {exc.code}: {exc}"))
        _out("FAILED: the log cannot be read")
        return 1
    with reader:
        try:
            count = reader.event_count()
        except StoreCorrupt:
            pass  # verify_log reports the damage
        for seq, reason in verify_log(reader):
            failures += 1
            if printing:
                try:
                    _out(secrets.scrub_message(f"seq {seq}: {reason}" if seq is not None else f"log: {reason}"))
                except BrokenPipeError:  # `| head`: keep checking, so the exit code stays true
                    silence_stdout()
                    printing = False
    try:
        if failures:
            _out(f"FAILED: {failures} problem(s) in {count} event(s)")
        else:
            _out(f"ok: {count} event(s) verified")
    except BrokenPipeError:
        silence_stdout()
    return 1 if failures else 0


# ---------------------------------------------------------------------- rebuild


def _progress_bar(enabled: bool) -> tuple[Callable[[int, int], None] | None, Callable[[], None]]:
    if not enabled:
        return None, lambda: None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    bar = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                   TimeRemainingColumn(), transient=True)
    bar.start()
    task = bar.add_task("rebuilding", total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return update, bar.stop


def cmd_rebuild(args: argparse.Namespace) -> int:
    data = Path(args.data)
    secrets = _known_secrets(args)
    with LogReader(data) as reader:
        found = _wal_damage(reader, secrets, what="the projections would be rebuilt without the events after it")
        if found is not None and found.commits_after >= REFUSED_COMMITS_AFTER:
            _err("lens: the rebuild changed nothing (the projections are as they were); restore the log, then "
                 "rebuild again", secrets)
            return 1
        # The history index forgets the keys `lens serve` would know, as the daemon's does.
        projector = Projector(reader, open_projections_db(data), all_projections(secrets))
        try:
            # (repeated or comma-separated like decode's --kind; each named once, in order)
            names = _kinds(args.projection) or sorted(projector.projections)
            for name in names:
                projector.get(name)
            if sys.stdout is None:  # started with standard output closed: nowhere to report to
                raise OSError(errno.EBADF, "standard output is closed")
            update, stop = _progress_bar(sys.stdout.isatty())
            try:
                n = projector.rebuild(names, update)
            except (CorruptEvent, StoreCorrupt) as exc:  # the log's problem, met on the way: 1
                _err(f"lens: {exc.code}: {exc}", secrets)
                _err("lens: the rebuild stopped at this row and changed nothing (the projections are as they "
                     "were); restore the log, then rebuild again", secrets)
                return 1
            except KeyboardInterrupt:  # one transaction, rolled back: say so with the interruption
                raise KeyboardInterrupt("the rebuild changed nothing (the projections are as they were)") from None
            except (apsw.FullError, apsw.IOError) as exc:  # the disk's problem: 2, as other failures
                _err(f"lens: PROJECTIONS_WRITE_FAILED: {data / PROJECTIONS_DB} could not be written ({exc}): the "
                     f"disk may be full or failing", secrets)
                _err("lens: the rebuild changed nothing (the projections are as they were); free some space, "
                     "then rebuild again", secrets)
                return 2
            finally:
                stop()
        finally:
            projector.close()
    _out(f"rebuilt {', '.join(names)} from {n} event(s)")
    return 0


# ---------------------------------------------------------------------- stats


def _in_memory(reader: LogReader, data: Path, failed: Projector | apsw.Connection) -> Projector:
    """Stats folded in a throwaway in-memory ``projections.db``, once ``failed`` (the projector on
    the file, or its connection when the projector could not be opened) could not write."""
    failed.close()
    projector = Projector(reader, open_projections_db(data, memory=True), [KindStats()])
    projector.catch_up()
    return projector


def cmd_stats(args: argparse.Namespace) -> int:
    data = Path(args.data)
    with LogReader(data) as reader:
        hidden = _wal_damage(reader, args.secrets, what="the figures count the events before that frame only")
        try:
            conn = open_projections_db(data)
            note = None
        except DataDirNotWritable:
            conn = open_projections_db(data, memory=True)
            note = "projections.db is not writable here; stats computed in memory"
        except ProjectionsDeletedWhileOpen:
            conn = open_projections_db(data, memory=True)
            note = ("projections.db was deleted while a daemon still has it open (it is rebuilt when the daemon "
                    "starts again); stats computed in memory")
        projector: Projector | None = None
        try:
            try:
                # (Opening the projector writes too: a new file's positions, a reset projection.)
                projector = Projector(reader, conn, [KindStats()])
                projector.catch_up()
            except apsw.ReadOnlyError:
                projector = _in_memory(reader, data, projector or conn)
                note = "projections.db is not writable here; stats computed in memory"
            except (apsw.FullError, apsw.IOError) as exc:  # (what was folded before stays committed)
                projector = _in_memory(reader, data, projector or conn)
                note = (f"projections.db could not be written ({exc}: the disk may be full or failing); "
                        f"stats computed in memory")
            try:
                rows = KindStats.read(projector.conn)
            except apsw.SQLError as exc:
                raise ProjectionsDamaged(data / PROJECTIONS_DB, f"SQLite: {exc}") from None
        except (CorruptEvent, StoreCorrupt) as exc:  # the log's problem, met on the way: exit 1
            _err(f"lens: {exc.code}: {exc}", args.secrets)
            _err("lens: no figures printed: the stats projection cannot count this row; restore the log, "
                 "then run stats again", args.secrets)
            return 1
        finally:
            (projector or conn).close()
    if note:
        _err(f"lens: note: {note}", args.secrets)
    kinds = [
        {"kind": k, "events": n, "stored_bytes": s, "raw_bytes": r,
         "compression_ratio": round(r / s, 3) if s else None}
        for k, n, s, r in rows
    ]
    tot_n = sum(k["events"] for k in kinds)
    tot_s = sum(k["stored_bytes"] for k in kinds)
    tot_r = sum(k["raw_bytes"] for k in kinds)
    total = {"events": tot_n, "stored_bytes": tot_s, "raw_bytes": tot_r,
             "compression_ratio": round(tot_r / tot_s, 3) if tot_s else None}
    failed = 1 if hidden is not None else 0  # (the figures are printed: they are what the log reads)
    if args.json:
        _out(_json.encode({"kinds": kinds, "total": total}))
        return failed
    # The kind column fits the longest kind as shown (escaped: see _out), 24 characters at least;
    # a row's kind longer than any kind can be (damage) overflows it rather than widen every row.
    width = max([24, *(n for k in kinds if (n := len(shown(k["kind"]))) <= KIND_MAX)])
    header = f"{'kind':<{width}} {'events':>10} {'stored bytes':>14} {'raw bytes':>14} {'ratio':>7}"
    _out(header)
    _out("-" * len(header))
    for k in kinds + [dict(total, kind="TOTAL")]:
        ratio = f"{k['compression_ratio']:.3f}" if k["compression_ratio"] is not None else "-"
        _out(f"{shown(k['kind']):<{width}} {k['events']:>10} {k['stored_bytes']:>14} {k['raw_bytes']:>14} {ratio:>7}")
    return failed


def run(args: argparse.Namespace) -> int:
    """Run the ``lens log`` subcommand ``args`` names, on the data directory it resolves to."""
    func: Callable[[argparse.Namespace], int] = args.command_func
    data_dir, source = resolve_data_dir(args.data, args.config)
    if source is not None and (data_dir / EVENTS_DB).exists():  # one line on stderr, never on stdout (which
        # scripts parse; a missing log's error names the config itself, in its one line)
        _err(f"lens: data directory {data_dir} (the dataDir of {source})", args.secrets)
    for note in check_private_data_dir(data_dir):  # (files inside it others could write: made private, said)
        _err(f"lens: {note}", args.secrets)
    args.data = str(data_dir)
    try:
        return func(args)
    except DataDirMissing as exc:
        if source is None:
            raise
        # (the directory came from a config the user may not have meant: say which, and that
        # --data reads another)
        raise DataDirMissing(f"{exc.message}; {data_dir} is the dataDir of {source}") from None


__all__ = ["add_parser", "run", "verify_log", "LogError"]
