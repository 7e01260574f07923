"""The call journal (F-EXE-5 call replay): the same call id is never applied twice.

Layout under ``journal_dir`` (a trusted host directory of the executor, outside the workspace)::

    calls/<sha256(call_id)>.json   one small record per call id
    blobs/<sha256>                 content-addressed file bytes (before / after of each call)

Every file is written atomically (temp file in the same directory, fsync, rename, fsync of the
directory). A record is ``{"v": 1, "call_id", "tool", "path", "args_sha256", "state",
"before_sha256", "after_sha256", "structured", "written_path", "workspace"}`` where a sha of None means
"the file did not exist", ``written_path`` is the file the call wrote (records written before it was
kept have none: their replay says so, and Core asks where the path leads instead) and ``workspace``
the real path of the workspace the call was made in (records written before it was kept have none,
and are taken as this workspace's). A record is checked field by field when it is read: one that is
not what this module writes (damaged on disk, of another version) is ``IO_ERROR``, never taken for
a call not yet made. A record of another workspace (an executor of another workspace once used this
state directory) is ``CALL_ID_REUSED``: its file here was never written, and the record is left as
it was for its own workspace.

Protocol of an editing call with a call id (driven by :mod:`tools.files.workspace`):

1. compute the change in memory; when nothing changes, journal a ``done`` record and return;
2. store both blobs, then a ``pending`` record naming their hashes — before touching the file;
3. commit the file (atomic rename); when the commit fails before its publish (FILE_CHANGED, a
   full disk, a read-only file system, a permission: nothing written) the record is dropped, and
   the call is as if never tried; a failure once the file is published (its directory's fsync)
   leaves it pending, as a crash there would;
4. rewrite the record as ``done`` (when that write fails, the call still succeeds: the record
   stays pending over a file holding the ``after`` bytes, which a replay answers as done).

On a repeated call id: ``done`` returns the recorded outcome (blobs loaded back) without applying
again; ``pending`` (a crash between 2 and 4) looks at the file — holding the ``after`` bytes means
the commit happened (the record is marked done and its outcome returned), holding the ``before``
bytes means it did not (the call is applied afresh), anything else is CONFLICT. A call id recorded
for another tool, path or arguments is CALL_ID_REUSED. Failed calls are not journaled. Nothing is
pruned here: the owner of ``journal_dir`` decides how long call ids stay replayable.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from events.ids import SHA256_RE

from .errors import FileToolError

PENDING = "pending"
DONE = "done"
VERSION = 1


def sha256_hex(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def args_digest(tool: str, args: dict[str, Any]) -> str:
    """A stable digest of a call's arguments (for CALL_ID_REUSED)."""
    blob = json.dumps({"tool": tool, "args": args}, sort_keys=True, ensure_ascii=False, default=_hexify)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def _hexify(value: object) -> str:
    if isinstance(value, (bytes, bytearray)):
        return "hex:" + bytes(value).hex()
    raise TypeError(type(value).__name__)


@dataclass
class CallRecord:
    call_id: str
    tool: str
    path: str
    args_sha256: str
    state: str
    before_sha256: str | None
    after_sha256: str | None
    structured: dict[str, Any]
    v: int = 1
    # The file the call wrote (EditOutcome.written); absent from records written before it was kept.
    written_path: str | None = None
    # The real path of the workspace the call was made in (set by Journal.put); absent from records
    # written before it was kept.
    workspace: str | None = None


def _digest_or_none(value: object) -> bool:
    return value is None or (isinstance(value, str) and SHA256_RE.fullmatch(value) is not None)


def _record(data: object) -> CallRecord | None:
    """``data`` as a record, or None when it is not one this module writes."""
    if not isinstance(data, dict) or type(data.get("v")) is not int or data["v"] != VERSION:
        return None
    try:
        rec = CallRecord(**data)
    except TypeError:  # (a field missing, or one no record has)
        return None
    if not all(isinstance(text, str) for text in (rec.call_id, rec.tool, rec.path)):
        return None
    if rec.state not in (PENDING, DONE) or not isinstance(rec.structured, dict):
        return None
    if not (isinstance(rec.args_sha256, str) and SHA256_RE.fullmatch(rec.args_sha256)
            and _digest_or_none(rec.before_sha256) and _digest_or_none(rec.after_sha256)):
        return None
    if not all(v is None or isinstance(v, str) for v in (rec.written_path, rec.workspace)):
        return None
    return rec


class Journal:
    """One directory of call records and blobs; safe for one executor process at a time.
    ``workspace`` (the real path of the workspace its calls edit) is stamped on every record put
    and checked on every record got."""

    def __init__(self, directory: Path, workspace: str | None = None) -> None:
        self.dir = Path(directory)
        self.workspace = workspace
        self.calls = self.dir / "calls"
        self.blobs = self.dir / "blobs"
        self.calls.mkdir(parents=True, exist_ok=True)
        self.blobs.mkdir(parents=True, exist_ok=True)

    def _record_path(self, call_id: str) -> Path:
        return self.calls / (hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest() + ".json")

    def get(self, call_id: str) -> CallRecord | None:
        try:
            raw = self._record_path(call_id).read_bytes()
        except FileNotFoundError:
            return None
        try:
            rec = _record(json.loads(raw))
        except ValueError:  # (not JSON, not UTF-8: a record cut short or overwritten)
            rec = None
        if rec is None:
            raise FileToolError("IO_ERROR", "the call journal holds an unreadable record for this call id")
        if rec.call_id != call_id:
            raise FileToolError("IO_ERROR", "the call journal holds a record of another call id under this name")
        if rec.workspace is not None and self.workspace is not None and rec.workspace != self.workspace:
            raise FileToolError("CALL_ID_REUSED", "call id already used for a call in another workspace (an "
                                                  "executor of another workspace used this state directory); "
                                                  "not applied here")
        return rec

    def put(self, record: CallRecord) -> None:
        if self.workspace is not None:
            record.workspace = self.workspace
        data = json.dumps(asdict(record), ensure_ascii=False).encode("utf-8", "surrogatepass")
        _write_atomic(self._record_path(record.call_id), data)

    def drop(self, call_id: str) -> None:
        """Forget a call that failed without writing its file (its blobs stay: content-addressed,
        other records may name them)."""
        try:
            self._record_path(call_id).unlink()
        except FileNotFoundError:
            pass

    def put_blob(self, data: bytes | None) -> str | None:
        digest = sha256_hex(data)
        if data is None or digest is None:
            return None
        path = self.blobs / digest
        if not path.exists():  # content-addressed and written atomically: present means complete
            _write_atomic(path, data)
        return digest

    def blob(self, digest: str | None) -> bytes | None:
        if digest is None:
            return None
        try:
            data = (self.blobs / digest).read_bytes()
        except FileNotFoundError:
            raise FileToolError("IO_ERROR", "the call journal lost the bytes of a recorded call") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise FileToolError("IO_ERROR", "the call journal holds corrupt bytes for a recorded call")
        return data


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
