"""Pairing and credentials: ``config/pair.json``.

A client's first ``POST /pair/requests`` records a *pending* identity. ``lens pair approve``
issues a credential (256 random bits, shown once) and stores only its hash, bound to the client
id and trust level: ``sha256("lens-credential:v1" \\0 clientId \\0 trust \\0 token)``. So a hash
copied to another record, or a trust level edited by hand, matches nothing; flags such as
``isVerified`` are not read at all (a record's unknown fields are ignored and logged, never
fatal: they grant nothing, and must not lock the other clients out either). Re-issuing replaces the hash, which revokes the old
credential. Writes are atomic (temp file, fsync, rename), 0600, under a lock file shared by the
daemon and the CLI; a pair file that is a symbolic link is written where it points (the link
stays; the target's lock is taken too, and the write is refused if the link moved or the file
was replaced since it was read), and one to nothing is invalid, never replaced. The daemon re-reads the file when it changes: each credential check and each
pairing request looks first (one ``stat``), so a revocation counts from the next request; open streams learn of it
from a watcher that the change itself wakes (inotify), or that looks every 250 ms. A file other users can write, or that another user owns,
grants nothing (:func:`check_private`); a directory holding it that another user can change is
written in by nothing (:meth:`PairStore._check_directories`), and one that is not there is made
by the first write, mode 0700.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, NoReturn

import msgspec

from events.ids import SHA256_RE

from .atomicfile import (FileTooLarge, NotARegularFile, others_can_change, read_regular_file, replace_in_directory,
                         why_not_written)
from .byte_order import byte_order_mark
from .config import config_place_problem, place_problem
from .errors import LensError, short_reason
from .filewatch import DirectoryWatch
from .key_hints import UnknownKey, hinted, unknown_keys_listed
from .terminal import unshowable_in
from .trust import swap_fix, the_fix

log = logging.getLogger("lens.pairing")

CLIENT_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")  # whole strings only: fullmatch
CLIENT_ID_RULE = "1 to 64 characters of ASCII letters, digits, '.', '_' or '-'"  # CLIENT_ID_RE, as messages say it
TOKEN_PREFIX = "lens_"
POLL_SECONDS = 0.25
# A pending request older than this no longer holds a place under ``server.maxPendingPairings``:
# when the limit is reached, expired requests are dropped from the file to make room. So a burst
# of unauthenticated requests can fill the list for an hour at most, not for ever.
PENDING_TTL_MS = 60 * 60 * 1000
# Revoked records kept, so that ``lens pair list`` shows the latest revocations. Past this many,
# a write drops those revoked longest ago (a record revoked before ``revokedAt`` was kept counts
# from its last request or approval). A revoked record holds no credential hash, so dropping it
# allows nothing; that client asks again (``POST /pair/requests``) before it can be approved
# again, as an unknown one does. So a pair file that sees fresh client ids paired and revoked
# (one per CI run, say) does not grow for ever.
MAX_REVOKED = 1000
MAX_NAME = 200  # characters of a client's name (a pairing request's, a record's)
# The largest pair file read: records of at most ~400 bytes, and at most
# ``server.maxPendingPairings`` (100,000) of them pending, fit many times over.
MAX_PAIR_FILE_BYTES = 64 * 1024 * 1024


class PairingError(LensError):
    code = "PAIRING_INVALID"


class PairFileInvalid(LensError):
    code = "PAIR_FILE_INVALID"


class PairFileUnwritable(LensError):
    code = "PAIR_FILE_UNWRITABLE"


class PairingLimit(LensError):
    code = "PAIRING_LIMIT"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after  # seconds until the oldest pending request gives up its place


class ClientNotFound(LensError):
    code = "CLIENT_NOT_FOUND"


Trust = Literal["read", "strong"]


class ClientRecord(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    """One client. Fields it does not have (``isVerified``, a copied ``deviceId``…) are ignored:
    they grant nothing (F-API-2), are named once in the log, and the next write drops them."""

    client_id: str
    name: str = ""
    status: Literal["pending", "approved", "revoked"] = "pending"
    trust: Trust = "read"
    credential_hash: str | None = None
    requested_at: int = 0
    approved_at: int | None = None
    revoked_at: int | None = None  # (records revoked before it was kept have none)


class PairFile(msgspec.Struct, kw_only=True):
    version: int = 1
    clients: list[ClientRecord] = []


class _PairFileText(msgspec.Struct, forbid_unknown_fields=True):
    """A pair file as written: both keys required and nothing else (a misspelt ``clients``
    would otherwise read as "no clients" and lock every client out)."""

    version: int
    clients: list[ClientRecord]


@dataclass(frozen=True)
class Principal:
    client_id: str
    trust: Trust

    @property
    def strong(self) -> bool:
        return self.trust == "strong"


def credential_hash(client_id: str, trust: str, token: str) -> str:
    material = b"\0".join([b"lens-credential:v1", client_id.encode(), trust.encode(), token.encode()])
    return hashlib.sha256(material).hexdigest()


def validate_client_id(client_id: Any) -> str:
    if not isinstance(client_id, str) or not CLIENT_ID_RE.fullmatch(client_id):
        raise PairingError(f"clientId must be {CLIENT_ID_RULE}")
    return client_id


PAIR_FILE_VERSION = 1


def parse_pair_file(raw: bytes, where: str) -> PairFile:
    """Decode and check a pair file: its shape, version, and one well-formed record per client id.

    Raises :class:`PairFileInvalid` naming the first problem. The daemon refuses every credential
    while its pair file is invalid, and a write through the config API that fails this check
    changes nothing; so two records of one client (one revoked, one still approved, say) can
    never both be in force.
    """
    if not raw.strip():  # (msgspec says "Input data was truncated", which names nothing a writer did)
        raise PairFileInvalid(f'{where} is not a valid pair file (it is empty; a pair file without clients is '
                              f'{{"version": {PAIR_FILE_VERSION}, "clients": []}})')
    if mark := byte_order_mark(raw):  # (msgspec says "invalid character (byte 0)": an editor's save, unnamed)
        raise PairFileInvalid(f"{where} is not a valid pair file (it starts with a {mark} byte order mark; a pair "
                              f"file is plain JSON in UTF-8: save it as UTF-8 without one)")
    try:
        text = msgspec.json.decode(raw, type=_PairFileText)
        data = PairFile(version=text.version, clients=text.clients)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PairFileInvalid(f"{where} is not a valid pair file ({short_reason(exc)})") from None
    except RecursionError:
        raise PairFileInvalid(f"{where} is not a valid pair file (nested too deeply)") from None
    if data.version != PAIR_FILE_VERSION:
        raise PairFileInvalid(f"{where}: version {data.version} is not supported (this daemon reads {PAIR_FILE_VERSION})")
    seen: set[str] = set()
    for i, c in enumerate(data.clients):
        if not CLIENT_ID_RE.fullmatch(c.client_id):
            raise PairFileInvalid(f"{where}: clients[{i}].clientId {c.client_id[:80]!r} is not {CLIENT_ID_RULE}")
        if c.client_id in seen:
            raise PairFileInvalid(f"{where}: client {c.client_id!r} has more than one record")
        seen.add(c.client_id)
        if c.credential_hash is not None and not SHA256_RE.fullmatch(c.credential_hash):
            raise PairFileInvalid(f"{where}: clients[{i}].credentialHash is not 64 lowercase hex digits")
        if len(c.name) > MAX_NAME:
            raise PairFileInvalid(f"{where}: clients[{i}].name is longer than {MAX_NAME} characters")
    return data


def ignored_record_fields(raw: bytes) -> list[UnknownKey]:
    """The fields of a pair file's records that :class:`ClientRecord` does not have
    (``clients[2].isVerified``), each with the field it may have meant (``credentialhash``:
    ``credentialHash``), for a file :func:`parse_pair_file` accepted."""
    known = {f.encode_name for f in msgspec.structs.fields(ClientRecord)}
    try:
        clients = msgspec.json.decode(raw).get("clients")
    except (msgspec.DecodeError, RecursionError, AttributeError):
        return []
    return hinted([(f"clients[{i}].{key}", key, known) for i, c in enumerate(clients or [])
                   if isinstance(c, dict) for key in c if key not in known])


def check_private(st: os.stat_result, path: Path) -> None:
    """:class:`PairFileInvalid` for a pair file that is not its owner's alone: writable by the
    group or by others, or owned by a user other than this process's (or root). Whoever can
    write the file can add a record whose hash matches a credential of their own, with strong
    trust; so such a file grants nothing (as sshd ignores an ``authorized_keys`` others can
    write). Readable by others is fine: it holds only hashes of 256-bit credentials."""
    why = others_can_change(st)
    if why is None:
        return
    fix = "give it to the daemon's user (chown)" if why.startswith("owned") else f"make it private (chmod 600 {path})"
    raise PairFileInvalid(f"pair file {path} is {why}, who could give themselves a credential; check its records, "
                          f"then {fix}; every credential is refused until it is fixed")


def make_pair_directory(path: Path) -> None:
    """Make the directory of the pair file ``path`` if it is not there, and each missing one
    above it, mode 0700 under any umask, as the data directory is made: the directory check of
    every write (:func:`pair_place_problem`) then passes. Raises ``OSError``."""
    missing = []
    folder = Path(os.path.abspath(path.parent))
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # (made meanwhile by another write: judged as it is found)
            pass


def pair_place_problem(path: Path, *, resolved: bool = False) -> tuple[Path, str | OSError, Path | None] | None:
    """What keeps the pair file ``path`` from being written, by the main config's rule
    (:func:`~runtime.config.place_problem`): a directory holding it that another user can change
    (a sticky one too), or one above that such a user can swap; ``None`` when there is none.
    Before the file is resolved, its own directory (as named, and as its links lead), not
    judged while it is not there (the first write makes it, private); ``resolved``: a link's
    target's directory too, which must be there."""
    if resolved:
        return config_place_problem(path)
    own = list(dict.fromkeys([path.parent, Path(os.path.realpath(path.parent))]))
    return place_problem(own, missing_ok=True)


class LockFileIsLink(OSError):
    """The pair file's lock file is a symbolic link (never followed: a file of another's could
    be made, or taken, in its place). ``strerror`` names it by its name only."""


@contextmanager
def pair_lock(path: Path, *, judge: Callable[[os.stat_result], None] | None = None) -> Iterator[None]:
    """Hold the pair file's lock (``<path>.lock``, ``flock``) for a read-modify-write of it.

    Taken by ``lens pair approve|revoke``, by pairing requests and by config-API writes of the
    pair file, in any process: a change made under it is never lost to another's write (a
    store whose file is a link takes its target's lock too: see :meth:`PairStore._locked`).
    The directory is opened once: ``judge`` is called with its ``fstat`` before the lock file is
    opened through it, so the directory judged is the one it is made in. Makes no directory;
    the lock file is never followed as a link (:class:`LockFileIsLink`); raises ``OSError`` if
    it cannot be opened (``FileNotFoundError``: no directory)."""
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if judge is not None:
            judge(os.fstat(dir_fd))
        name = path.name + ".lock"
        try:
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise LockFileIsLink(errno.ELOOP, f"its lock file {name} is a symbolic link, which is never followed; "
                                              f"check where it leads, then remove it") from None
    finally:
        os.close(dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (releases the lock)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _drop_oldest_revoked(data: PairFile) -> None:
    """Keep the :data:`MAX_REVOKED` revoked records revoked last (the file's order kept)."""
    revoked = [c for c in data.clients if c.status == "revoked"]
    if len(revoked) <= MAX_REVOKED:
        return
    revoked.sort(key=lambda c: c.revoked_at or max(c.requested_at, c.approved_at or 0))
    dropped = {id(c) for c in revoked[:len(revoked) - MAX_REVOKED]}
    data.clients = [c for c in data.clients if id(c) not in dropped]


_DAEMON_USER = "the daemon's user"


def _not_asked(client_id: str) -> ClientNotFound:
    return ClientNotFound(f"no pairing request from client {client_id!r}; the client must call POST "
                          f"/api/v1/pair/requests first")


class _Changed(Exception):
    """The pair file's name no longer leads to the file read (its link moved, the file was
    replaced) when its new bytes were ready."""


@dataclass
class _Place:
    """Where the pair file is: its final name (the configured path, or the last target of its
    links, resolved once) and the open directory holding it, which reads and writes go through
    (never following a link there); ``read``: the device and inode of the file read, ``None``
    when there was none."""

    target: Path
    dir_fd: int
    read: tuple[int, int] | None = None


# A credential's length: the prefix, then 32 random bytes in URL-safe base64 (43 characters).
CREDENTIAL_LENGTH = len(TOKEN_PREFIX) + 43


def new_credential() -> str:
    """A new client credential (what :meth:`PairStore.approve` issues)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class PairStore:
    """The pair file, shared by the daemon (register, authenticate) and the CLI (approve…)."""

    def __init__(self, path: Path, *, log_problems: bool = True,
                 before_write: Callable[[], None] | None = None) -> None:
        self.path = Path(path)
        # (called just before a write replaces the file; what it raises leaves the file as it was:
        # the CLI takes a Ctrl-C still waiting for its re-delivery there)
        self._before_write = before_write
        # (False for the CLI: each of its commands refuses an invalid file with this same message)
        self._log_problems = log_problems
        self._data = PairFile()
        self._stamp: tuple[int, ...] | None = None
        self.valid = True
        self.problem: str | None = None  # why the file is not valid (logged once per change)
        self.generation = 0  # bumped on every reload: open streams re-check their credential
        self._ignored: list[UnknownKey] = []  # record fields ignored, as last logged
        self.reload(force=True)

    # ------------------------------------------------------------------ file I/O

    def _stat(self) -> tuple[int, ...] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            try:  # a link to nothing is there all the same (as the link itself: a new target is a change)
                st = os.lstat(self.path)
            except OSError:
                return None
            return (-2, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        except OSError as exc:  # cannot even look: reading it fails too, and says why
            return (-1, exc.errno or 0, 0)
        # (mode and owner too: a `chmod 600` that makes the file private again changes neither
        # its bytes nor its mtime, and must be taken without a restart; and the change time,
        # which no one can set: an edit in place of the same size whose mtime was put back —
        # `touch -r`, `cp -p`, a restore that keeps times — left every other field as it was)
        return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode, st.st_uid)

    def _target(self) -> Path:
        """The file the pair file's name leads to: itself, or its links' last target (which
        need not exist)."""
        return Path(os.path.realpath(self.path)) if os.path.islink(self.path) else self.path

    def _open_place(self) -> _Place:
        """The pair file's :class:`_Place`, its directory opened (the caller closes it). Raises
        ``OSError`` (``FileNotFoundError``: no directory, so no file), or :class:`PairFileInvalid`
        for a link whose target's directory is not there."""
        target = self._target()
        try:
            return _Place(target, os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        except (FileNotFoundError, NotADirectoryError):
            if target == self.path:
                raise
            raise self._dangling(target) from None

    def _dangling(self, target: Path) -> PairFileInvalid:
        # (a volume not mounted yet, say: "no clients" there, and a write in the link's place,
        # lost every approval once it was; refused as the main config is. A target whose path
        # runs through a regular file does not exist either.)
        return PairFileInvalid(f"pair file {self.path} is a symbolic link to {target}, which does not exist; every "
                               f"credential is refused until it is fixed (make the file it points to there, or "
                               f"remove the link)")

    def _read(self, place: _Place | None = None) -> tuple[bytes, PairFile]:
        """The file's bytes and what they say, read in ``place`` (opened here when ``None``)
        without following a link there, its device and inode noted in ``place.read``; raises
        ``OSError`` (``FileNotFoundError``…) or :class:`PairFileInvalid` (a file other users can
        write, or that another user owns; a link to nothing; a link loop)."""
        if place is None:
            place = self._open_place()
            try:
                return self._read_in(place)
            finally:
                os.close(place.dir_fd)
        return self._read_in(place)

    def _read_in(self, place: _Place) -> tuple[bytes, PairFile]:
        def check(st: os.stat_result) -> None:
            check_private(st, self.path)
            place.read = (st.st_dev, st.st_ino)

        try:
            raw = read_regular_file(place.target.name, MAX_PAIR_FILE_BYTES, follow_symlinks=False, check=check,
                                    dir_fd=place.dir_fd)
        except (FileNotFoundError, NotADirectoryError):
            if place.target == self.path:
                raise
            raise self._dangling(place.target) from None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise PairFileInvalid(self._unreadable(exc)) from None
        return raw, self._parse(raw)

    def _unreadable(self, exc: OSError) -> str:
        return (f"pair file {self.path} cannot be read ({exc.strerror or exc}); every credential is refused "
                f"until it is fixed")

    def reload(self, force: bool = False) -> bool:
        """Re-read the file if it changed; returns whether it did. A bad file denies everyone.

        The new records are in place before the new stamp is: the daemon re-reads on a worker
        thread after each pairing write it makes, and a credential check on the event loop
        during that read must not find the file's stamp already taken with the old records still
        in place (it would match a credential just revoked). A check that still sees the old
        stamp reads the file itself."""
        stamp = self._stat()
        if not force and stamp == self._stamp:
            return False
        if stamp is None:
            data, valid, problem = PairFile(), True, None
        else:
            try:
                # (never blocks, on the event loop: a FIFO in the pair file's place froze the daemon)
                raw, data = self._read()
                valid, problem = True, None
                self._note_ignored(ignored_record_fields(raw))
            except (PairFileInvalid, OSError) as exc:
                # Unreadable (a directory, no permission: written by another user with mode 0600)
                # is as good as invalid: everyone is refused, and the daemon keeps serving.
                problem = exc.message if isinstance(exc, PairFileInvalid) else self._unreadable(exc)
                if self._log_problems:
                    log.warning("%s", problem)
                data, valid = PairFile(), False
        # (the records first: a check between these stores matches against the new ones, and an
        # invalid file's are empty)
        self._data, self.valid, self.problem = data, valid, problem
        self._stamp = stamp
        self.generation += 1
        return True

    def _note_ignored(self, fields: list[UnknownKey]) -> None:
        """Log the ignored record fields once (not again on each reload while they stay)."""
        if fields and fields != self._ignored:
            log.warning("pair file %s: ignoring fields its records do not have (%s); they grant nothing, and the "
                        "next pairing change removes them", self.path, unknown_keys_listed(fields))
        self._ignored = fields

    def _parse(self, raw: bytes) -> PairFile:
        try:
            return parse_pair_file(raw, f"pair file {self.path}")
        except PairFileInvalid as exc:
            raise PairFileInvalid(f"{exc.message}; every credential is refused until it is fixed") from None

    @contextmanager
    def _locked(self) -> Iterator[PairFile]:
        """Read-modify-write under the lock file; the yielded data is written back atomically (when
        it changed: a revocation of a client revoked already, say, leaves the file untouched).

        A file-system failure (no permission, a full or read-only disk) is
        :class:`PairFileUnwritable`, and the file is left as it was."""
        with ExitStack() as stack:
            try:
                # Judged before anything is made in it (the lock file), a link's own directory
                # too (its target's once it is resolved, below): the first write makes the
                # directory, private, and one others can change, or swap, is refused.
                self._check_directories()
                if not os.path.islink(self.path):
                    make_pair_directory(self.path)
                stack.enter_context(pair_lock(self.path, judge=self._judged_in(self.path.parent)))
                place = self._open_place()
                stack.callback(os.close, place.dir_fd)
                self._judged_in(place.target.parent)(os.fstat(place.dir_fd))  # (the one the write goes through)
            except OSError as exc:
                raise self._unwritable(exc) from None
            if place.target not in (self.path, Path(os.path.realpath(self.path.parent)) / self.path.name):
                # Through a link (not one to itself, a loop: its lock is the one held): its target's lock too, which a store configured with the
                # target takes (never making a directory there), in a directory only this user
                # can change, as the main config's must be.
                self._check_directories(resolved=True)
                try:
                    stack.enter_context(pair_lock(place.target, judge=self._judged_in(place.target.parent)))
                except (FileNotFoundError, NotADirectoryError):
                    raise self._dangling(place.target) from None
                except OSError as exc:
                    raise self._unwritable(exc) from None
            try:
                data = self._read(place)[1]
            except FileNotFoundError:
                data = PairFile()
            except (NotARegularFile, FileTooLarge) as exc:
                raise PairFileInvalid(f"pair file {self.path} cannot be read ({exc.strerror}); fix it first") from None
            except OSError as exc:
                raise self._unwritable(exc) from None
            before = msgspec.json.encode(data)
            yield data
            _drop_oldest_revoked(data)
            if msgspec.json.encode(data) != before:  # (nothing changed: the file is left as it was)
                try:
                    self._write(data, place)
                except OSError as exc:
                    raise self._unwritable(exc) from None
                except _Changed:
                    raise PairFileUnwritable(f"the pair file {self.path} cannot be updated (it changed while it was "
                                             f"being updated: another program moved its link or replaced it); "
                                             f"nothing was written; try again") from None
        self.reload(force=True)

    def _unwritable(self, exc: OSError) -> PairFileUnwritable:
        return PairFileUnwritable(f"the pair file {self.path} cannot be updated ({why_not_written(exc)})")

    def _check_directories(self, *, resolved: bool = False) -> None:
        """:class:`PairFileUnwritable` when a directory holding the pair file (its own; a link's
        target's once ``resolved``) is one another user can change, or one above it one such a
        user can swap (:func:`pair_place_problem`, the main config's rule: a sticky directory,
        the temporary directory's mode 1777, is refused itself, and passes above). Such a user
        could remove the file, rename another of the daemon user's pair files (an old copy) over
        it, or take its lock file."""
        problem = pair_place_problem(self.path, resolved=resolved)
        if problem is None:
            return
        folder, why, below = problem
        if isinstance(why, OSError):
            which = f"its directory {folder}" if below is None else f"the directories above its directory {below}"
            raise PairFileUnwritable(f"the pair file {self.path} cannot be updated ({which} cannot be checked: "
                                     f"{why.strerror}); nothing was written")
        if below is not None:
            raise PairFileUnwritable(f"the pair file {self.path} cannot be updated: the directory {folder}, above "
                                     f"the directory {below} holding it, is {why}, who could put a directory of "
                                     f"theirs, and a pair file in it, in its place; check what it holds, then "
                                     f"{swap_fix(why, folder)}; nothing was written")
        self._refuse_directory(folder, why)

    def _judged_in(self, folder: Path) -> Callable[[os.stat_result], None]:
        """The own-directory part of :meth:`_check_directories` for the directory ``folder`` once
        opened (called with its ``fstat``): the one the lock file or the write then goes through
        is the one judged, even if another took its name's place since."""
        def judge(st: os.stat_result) -> None:
            why = others_can_change(st)
            if why is not None:
                self._refuse_directory(folder, why)
        return judge

    def _refuse_directory(self, folder: Path, why: str) -> NoReturn:
        holds = "it or its link's target" if os.path.islink(self.path) else "it"
        raise PairFileUnwritable(f"the pair file {self.path} cannot be updated: the directory {folder}, which holds "
                                 f"{holds}, is {why}, who could put a pair file of theirs in its "
                                 f"place; check what it holds, then {the_fix(why, folder, _DAEMON_USER)}; "
                                 f"nothing was written")

    def _write(self, data: PairFile, place: _Place) -> None:
        """Replace the file read in ``place`` (the temporary file, the rename and the fsync in its
        directory, opened once: a link an operator made stays a link), unless by then the pair
        file's name leads elsewhere or to another file (:class:`_Changed`)."""

        def unchanged() -> None:
            try:
                st = os.stat(place.target.name, dir_fd=place.dir_fd, follow_symlinks=False)
                now = (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else (-1, -1)
            except FileNotFoundError:
                now = None
            if now != place.read or self._target() != place.target:
                raise _Changed
            if self._before_write is not None:
                self._before_write()

        raw = msgspec.json.format(msgspec.json.encode(data), indent=2) + b"\n"
        replace_in_directory(place.dir_fd, place.target.name, raw, 0o600, before_rename=unchanged)

    # ------------------------------------------------------------------ operations

    def register(self, client_id: str, name: str, max_pending: int) -> str:
        """Record a pairing request; returns the client's status (never a credential)."""
        validate_client_id(client_id)
        found = unshowable_in(name) if isinstance(name, str) else None
        if not isinstance(name, str) or len(name) > MAX_NAME or found is not None:
            raise PairingError(f"name must be a string of at most {MAX_NAME} characters without control characters, "
                               "line separators or invisible format characters (zero-width characters, "
                               "bidirectional controls)" + ("" if found is None else f"; it holds {found}"))
        # (as last read: the daemon's route looks at the file first, on its event loop, as a
        # credential check does; see pairing_api.pair_request)
        existing = self.find(client_id)
        if existing is not None and existing.status != "revoked":
            return existing.status
        with self._locked() as data:
            rec = next((c for c in data.clients if c.client_id == client_id), None)
            if rec is not None and rec.status != "revoked":
                return rec.status
            # A revoked client asking again takes a pending place as a new one does (it escaped
            # the limit: each revoked record kept was one more request past it).
            pending = sum(1 for c in data.clients if c.status == "pending")
            if pending >= max_pending:
                cutoff = _now_ms() - PENDING_TTL_MS
                data.clients = [c for c in data.clients if c.status != "pending" or c.requested_at > cutoff]
                pending = sum(1 for c in data.clients if c.status == "pending")
            if pending >= max_pending:
                oldest = min(c.requested_at for c in data.clients if c.status == "pending")
                wait = max(1, -(-(oldest + PENDING_TTL_MS - _now_ms()) // 1000))  # (whole seconds, rounded up)
                raise PairingLimit(
                    f"too many pending pairing requests ({pending}); approve or revoke some first, "
                    f"or ask again once the oldest is an hour old (in {wait} s)", retry_after=wait
                )
            if rec is not None:
                rec.status, rec.name, rec.requested_at = "pending", name, _now_ms()
                rec.credential_hash = rec.revoked_at = None
            else:
                data.clients.append(ClientRecord(client_id=client_id, name=name, requested_at=_now_ms()))
            return "pending"

    def approve(self, client_id: str, *, strong: bool, token: str | None = None) -> str:
        """Issue a credential for ``client_id`` (replacing any earlier one); returns it, once.
        ``token``: the credential to issue, from :func:`new_credential` (made here when None): a
        caller holding it can tell whether the write was made when the call was interrupted.
        Raises ``ValueError`` for a ``token`` not of its shape (no ``lens_`` prefix, or not its
        length), before anything is read or written."""
        if token is not None and (not token.startswith(TOKEN_PREFIX) or len(token) != CREDENTIAL_LENGTH):
            raise ValueError(f"a credential to issue must be {CREDENTIAL_LENGTH} characters starting with "
                             f"{TOKEN_PREFIX!r}, as new_credential() makes")
        validate_client_id(client_id)
        if not os.path.lexists(self.path):  # no client asked yet: nothing to lock, nor a directory to make
            raise _not_asked(client_id)
        if self._read_records(client_id) == []:  # (no write needed to say so, wherever the file is)
            raise _not_asked(client_id)
        token = new_credential() if token is None else token
        with self._locked() as data:
            rec = next((c for c in data.clients if c.client_id == client_id), None)
            if rec is None:
                raise _not_asked(client_id)
            rec.status = "approved"
            rec.trust = "strong" if strong else "read"
            rec.credential_hash = credential_hash(client_id, rec.trust, token)
            rec.approved_at = _now_ms()
            rec.revoked_at = None
        return token

    def revoke(self, client_id: str) -> bool:
        """Revoke ``client_id``'s credential (or decline its pending request); returns whether
        that changed anything: a client revoked already is left as it was (its ``revokedAt`` too,
        which orders the revoked records kept). Raises :class:`ClientNotFound` for an unknown one."""
        validate_client_id(client_id)
        if not os.path.lexists(self.path):  # (a link to nothing is there: reading it says what is wrong)
            raise ClientNotFound(f"no client {client_id!r} in {self.path}")
        # The answers that change nothing come from a read, before the lock and the directory
        # check of a write: in a directory others can change, a client revoked already is left as
        # it was and an unknown one is not found, as anywhere else.
        found = self._read_records(client_id)
        if found == []:
            raise ClientNotFound(f"no client {client_id!r} in {self.path}")
        if found is not None and all(rec.status == "revoked" for rec in found):
            return False
        with self._locked() as data:
            records = [c for c in data.clients if c.client_id == client_id]
            if not records:
                raise ClientNotFound(f"no client {client_id!r} in {self.path}")
            if all(rec.status == "revoked" for rec in records):
                return False
            for rec in records:  # (one per client: the file was checked when it was read)
                rec.status = "revoked"
                rec.credential_hash = None
                rec.revoked_at = _now_ms()
        return True

    def _read_records(self, client_id: str) -> list[ClientRecord] | None:
        """The records of ``client_id`` in the file as read now (re-read if it changed), or
        ``None`` when it cannot be read (the write that follows says why)."""
        self.reload()
        return [c for c in self._data.clients if c.client_id == client_id] if self.valid else None

    def clients(self) -> list[ClientRecord]:
        return list(self._data.clients)

    def find(self, client_id: str) -> ClientRecord | None:
        return next((c for c in self._data.clients if c.client_id == client_id), None)

    def authenticate(self, token: str) -> Principal | None:
        """The principal holding ``token``, or ``None``. Compares every hash in constant time.

        Every check looks at the file first (one ``stat``; it is read again only when it
        changed): a credential works the moment ``lens pair approve`` has written it, and one
        ``lens pair revoke`` or a re-issue replaced is refused from the next request on — on a
        connection already authenticated too — not only after the watcher's next poll.
        """
        if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
            return None
        self.reload()
        return self._match(token)

    def _match(self, token: str) -> Principal | None:
        if not self.valid:
            return None
        found: Principal | None = None
        for c in self._data.clients:
            if c.status != "approved" or not c.credential_hash:
                continue
            if hmac.compare_digest(credential_hash(c.client_id, c.trust, token), c.credential_hash):
                found = Principal(c.client_id, c.trust)
        return found

    async def watch(self, changed: Callable[[], None] = lambda: None) -> None:
        """Re-read the file when it changes (run in the daemon's nursery), and call ``changed``
        after each re-read, by this task or by a credential check (``generation``): open streams
        re-check their credential then. A change in the file's directory (inotify: a rename,
        a ``chmod``) wakes it at once; it also looks every :data:`POLL_SECONDS` (where inotify
        cannot be had, and for what it does not see: a file system mounted over the network)."""
        seen = self.generation
        with DirectoryWatch(self.path.parent) as changes:
            while True:
                await changes.wait(POLL_SECONDS)
                self.reload()
                if self.generation != seen:
                    seen = self.generation
                    changed()
