"""Typed errors of the event log.

Every error carries a stable ``code`` (UPPER_SNAKE) that HTTP and the CLI report as is,
and a message that names the problem. Driver errors (apsw, zstandard, msgspec) are
translated into these once, at the boundary of this package::

    LogError
    ├── StoreOpenError            the data directory cannot be used
    │   ├── DataDirMissing          DATA_DIR_MISSING
    │   ├── DataDirNotWritable      DATA_DIR_NOT_WRITABLE
    │   ├── DataDirNotReadable      DATA_DIR_NOT_READABLE (no permission to read the log)
    │   ├── StoreCorrupt            STORE_CORRUPT (SQLite reports the file or its tables damaged)
    │   ├── (schema) WalNeedsWriteAccess   STORE_WAL_UNREADABLE (committed events in a WAL of
    │   │                                  a directory this reader cannot write)
    │   ├── (schema) JournalNeedsRecovery  STORE_NEEDS_RECOVERY (a hot rollback journal)
    │   ├── (projections) ProjectionsDamaged  PROJECTIONS_DAMAGED (delete projections.db, rebuild)
    │   │   └── (projections) ProjectionsForeign  PROJECTIONS_DAMAGED (another program's database
    │   │                                         there: left unchanged, to move away)
    │   ├── ForeignStore            STORE_FOREIGN (not a Lens log, or an older layout)
    │   └── UnsupportedFormat       STORE_FORMAT_UNSUPPORTED (a Lens log of another version)
    ├── CorruptEvent              EVENT_CORRUPT (carries the seq when known)
    │   ├── EventTooLarge           EVENT_TOO_LARGE (declared/decoded size over the limit)
    │   └── UnknownDictionary       EVENT_UNKNOWN_DICTIONARY
    ├── AppendRejected            APPEND_REJECTED (bad draft: oversize body, two request ids…)
    ├── TooFewSamples             DICTIONARY_TOO_FEW_SAMPLES (fewer than 8 small events to train on)
    ├── ConcurrencyConflict       SESSION_SEQ_CONFLICT (expected session_seq did not match)
    └── StoreClosed               STORE_CLOSED
"""

from __future__ import annotations

from typing import ClassVar


QUOTED_MAX = 80  # characters (a blob: bytes) of a value read from the log that a message quotes


def clipped(text: str, limit: int = QUOTED_MAX) -> str:
    """``text`` as is, or its first ``limit`` characters and ``… (N characters)``: a value read
    from the log that a message names unquoted (a damaged row may hold megabytes of it)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def quoted(value: object, limit: int = QUOTED_MAX) -> str:
    """``value``'s ``repr`` as a message quotes a value read from the log (a damaged row's column,
    a ``meta`` record): a text (a blob) of more than ``limit`` characters (bytes) is cut there,
    followed by ``… (N characters)`` (``bytes``), so that the line stays short and still says
    how long the value is; another type's ``repr`` is cut at ``limit`` with ``…``."""
    if isinstance(value, (str, bytes)):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}… ({len(value)} {'characters' if isinstance(value, str) else 'bytes'})"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…"


class LogError(Exception):
    """Base of every event-log error; ``code`` is stable, ``str(err)`` is for people. The base has
    no code of its own: each subclass names one (docs/errors.md)."""

    code: ClassVar[str]

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StoreOpenError(LogError):
    code = "STORE_OPEN_FAILED"


class DataDirMissing(StoreOpenError):
    code = "DATA_DIR_MISSING"


class DataDirNotWritable(StoreOpenError):
    code = "DATA_DIR_NOT_WRITABLE"


class DataDirNotReadable(StoreOpenError):
    code = "DATA_DIR_NOT_READABLE"


class StoreBusy(StoreOpenError):
    """Another process holds the database locked past the busy timeout (an exclusive lock that
    keeps every other connection out); nothing is wrong with the file: try again later."""

    code = "STORE_BUSY"


class StoreCorrupt(StoreOpenError):
    """``events.db`` carries the Lens format marker but SQLite cannot read it as one: damaged
    pages, a missing or reshaped table. Raised at open, or by a read that reaches the damage."""

    code = "STORE_CORRUPT"


class ForeignStore(StoreOpenError):
    code = "STORE_FOREIGN"


class UnsupportedFormat(StoreOpenError):
    code = "STORE_FORMAT_UNSUPPORTED"


class WalDamaged(StoreOpenError):
    """``events.db-wal`` breaks before commits that were made durable: a writer opening the log
    would read it only up to the break and overwrite the rest (see :mod:`events.walcheck`)."""

    code = "WAL_DAMAGED"


class CorruptEvent(LogError):
    """A stored body that cannot be turned back into its event.

    ``seq`` is filled in by the reader that knows which row it was decoding.
    """

    code = "EVENT_CORRUPT"

    def __init__(self, message: str, *, seq: int | None = None) -> None:
        super().__init__(message)
        self.seq = seq

    def at(self, seq: int) -> "CorruptEvent":
        """Return the same error, naming ``seq``."""
        err = type(self)(self.message, seq=seq)
        return err

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.message}" if self.seq is not None else self.message


class EventTooLarge(CorruptEvent):
    code = "EVENT_TOO_LARGE"


class UnknownDictionary(CorruptEvent):
    code = "EVENT_UNKNOWN_DICTIONARY"


class AppendRejected(LogError):
    """``size`` and ``limit`` are set when the event is refused for its size alone: its
    MessagePack is ``size`` bytes, over the log's maximum event size ``limit``."""

    code = "APPEND_REJECTED"

    def __init__(self, message: str, *, size: int | None = None, limit: int | None = None) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class TooFewSamples(LogError):
    """A zstd dictionary asked for while fewer than 8 events qualify as its samples (a dictionary
    is for small events: events over 64 KiB are not samples)."""

    code = "DICTIONARY_TOO_FEW_SAMPLES"


class ConcurrencyConflict(LogError):
    code = "SESSION_SEQ_CONFLICT"


class StoreClosed(LogError):
    code = "STORE_CLOSED"
