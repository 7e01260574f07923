"""The config-file API (F-API-4): list, read and write the daemon's own config files only.

Listed: the main config, the pair file, and existing non-template ``.json``/``.jsonc`` regular
files in the main config's directory (other symlinks, dotfiles and names that are not UTF-8 are
never listed: no JSON answer can carry such a name, no URL reach it; the main config and the pair
file are no exception). The main config and the
pair file are listed whatever is in their place; only a regular file is read or replaced (a
symlink is never followed, a directory or a FIFO never opened for reading without
``O_NONBLOCK``): anything else is ``CONFIG_FILE_NOT_REGULAR``. A name is matched
exactly against that list, never treated as a path. A write is parsed and validated first, then
replaces the file atomically with the text exactly as given (comments stay byte-exact); an
invalid write changes nothing.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NoReturn

import msgspec

from events.secrets import Secrets

from . import jsonc
from .atomicfile import (FileTooLarge, NotARegularFile, kind_of, others_can_change, read_regular_file,
                         replace_atomically, why_not_written)
from .config import ConfigError, check_config_file_mode, check_size, config_place_problem, parse_config, unknown_keys
from .errors import LensError, shortened
from .key_hints import unknown_keys_meant
from .pairing import (MAX_PAIR_FILE_BYTES, PairFileInvalid, make_pair_directory, pair_lock, pair_place_problem,
                      parse_pair_file)
from .startcheck import check_startable

TEMPLATE_SUFFIXES = (".example.json", ".example.jsonc", ".template.json", ".template.jsonc")

# When a write takes effect, by the file's role (the ``appliesAt`` of a write's answer): the main
# config is read once, at start (the running daemon keeps the one it started with); the pair file
# is watched (honoured within a second); the daemon reads no other file of the directory.
APPLIES_AT = {"main": "nextStart", "pair": "watched"}
NOT_READ = "notRead"


class ConfigFileNotFound(LensError):
    code = "CONFIG_FILE_NOT_FOUND"


def not_listed(name: str) -> ConfigFileNotFound:
    """The error of a name that is not one of the directory's listed files."""
    return ConfigFileNotFound(f"{name[:80]!r} is not one of the daemon's config files")


class ConfigFileUnreadable(LensError):
    """A listed file the API cannot serve as text: larger than the body limit, or not UTF-8."""

    code = "CONFIG_FILE_UNREADABLE"


class ConfigFileNotRegular(LensError):
    """A listed name where something other than a regular file is (a directory, a FIFO…): it is
    neither read (a FIFO would block the reader) nor replaced."""

    code = "CONFIG_FILE_NOT_REGULAR"


class ConfigFileChanged(LensError):
    """``expectDigest`` no longer matches: the file changed since the client read it."""

    code = "CONFIG_FILE_CHANGED"


class ConfigFileUnwritable(LensError):
    """The file system refused the write (no permission, a full or read-only disk)."""

    code = "CONFIG_FILE_UNWRITABLE"


def _is_utf8(name: str) -> bool:
    """Whether a file name from the file system is UTF-8 (one that is not comes with surrogate
    escapes, which cannot be encoded)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


MAX_UNKNOWN_KEYS_SHOWN = 100  # unknown keys a write's answer lists (each cut to 80 characters); the total is given too


class ConfigFiles:
    def __init__(self, main_config: Path, pair_file: Path, max_bytes: int = 1024 * 1024,
                 secrets: Secrets | None = None) -> None:
        self.main = Path(main_config)
        self.secrets = secrets or Secrets()  # the daemon's keys: scrubbed from a key name before it is cut
        self.pair = Path(pair_file)
        self.dir = self.main.parent
        self.max_bytes = max_bytes
        self._write_lock = threading.Lock()  # this daemon's writes of the other files, one at a time

    def _candidates(self) -> dict[str, tuple[Path, str]]:
        files: dict[str, tuple[Path, str]] = {}
        # The pair file is listed wherever ``pairFile`` puts it (under its own name, which then
        # hides a file of that name in the config directory). Either one whose own name is not
        # UTF-8 (``--config`` given such a path) is left out, as such a file of the directory is.
        for path, role in ((self.main, "main"), (self.pair, "pair")):
            if _is_utf8(path.name):
                files.setdefault(path.name, (path, role))
        try:
            entries = sorted(os.scandir(self.dir), key=lambda e: e.name)
        except FileNotFoundError:
            entries = []
        for e in entries:
            name = e.name
            if name in files or not name.endswith((".json", ".jsonc")) or name.endswith(TEMPLATE_SUFFIXES):
                continue
            if name.startswith(".") or e.is_symlink() or not e.is_file(follow_symlinks=False):
                continue
            if not name.isascii() and not _is_utf8(name):  # (no JSON answer can name it, no URL reach it)
                continue
            files[name] = (Path(e.path), "other")
        return files

    def list(self) -> list[dict[str, Any]]:
        out = []
        for name, (path, role) in self._candidates().items():
            # ``exists``: something is there (the daemon may be running from it: a symlinked main
            # config was listed as absent, and a client offered to create it); ``editable``: it
            # is a regular file, which the API reads and replaces. A symlink, a directory or a
            # FIFO is left to be edited where it lives (GET and PUT: CONFIG_FILE_NOT_REGULAR).
            try:
                st = os.lstat(path)
            except OSError:
                out.append({"name": name, "role": role, "exists": False, "editable": True, "size": 0})
                continue
            editable = stat.S_ISREG(st.st_mode)
            size = st.st_size if editable else 0
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = os.stat(path)
                    size = target.st_size if stat.S_ISREG(target.st_mode) else 0
                except OSError:
                    pass  # (a link to nothing: there, but nothing to read)
            out.append({"name": name, "role": role, "exists": True, "editable": editable, "size": size})
        return out

    def _lookup(self, name: str) -> tuple[Path, str]:
        found = self._candidates().get(name)
        # (a name is one of the directory's entries, whose path is its own: a backslash in it is
        # an ordinary character here, and refusing it made such a listed file unreachable)
        if found is None or "/" in name or "\0" in name:
            raise not_listed(name)
        return found

    def read(self, name: str) -> dict[str, Any]:
        path, role = self._lookup(name)
        try:
            raw = read_regular_file(path, self.max_bytes, follow_symlinks=False)
        except FileNotFoundError:
            return {"name": name, "role": role, "exists": False, "text": "", "digest": None}
        except FileTooLarge:
            raise ConfigFileUnreadable(f"{name} is larger than {self.max_bytes} bytes (server.maxBodyBytes); "
                                       f"edit it where it lives") from None
        except NotARegularFile as exc:
            raise ConfigFileNotRegular(f"{name} cannot be read through the API: {exc.strerror}") from None
        except OSError as exc:
            if exc.errno != errno.ELOOP or not os.path.islink(path):
                raise ConfigFileNotFound(f"{name!r} cannot be read ({exc.strerror})") from None
            raise ConfigFileNotRegular(f"{name} is a symbolic link; the API neither follows nor replaces links: "
                                       f"edit it where it lives") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigFileUnreadable(f"{name} is not UTF-8 text (byte {exc.start}); edit it where it lives") from None
        if self.put_body_bytes(text) > self.max_bytes:
            # Served only what can be written back: the PUT body (the text as a JSON string) is
            # held to the same limit, and escaping makes it longer than the file.
            raise ConfigFileUnreadable(f"{name} is too large to write back through the API (its PUT body would be "
                                       f"over {self.max_bytes} bytes, server.maxBodyBytes); edit it where it lives")
        return {"name": name, "role": role, "exists": True, "text": text, "digest": hashlib.sha256(raw).hexdigest()}

    @staticmethod
    def put_body_bytes(text: str) -> int:
        """The size of ``{"text": <text>}``, the body that writes ``text`` back."""
        return len(json.dumps({"text": text}, ensure_ascii=False).encode("utf-8"))

    def validate(self, role: str, name: str, text: str) -> None:
        if role == "main":
            # every check the next start runs on the file, not only its parse: a write the
            # next `lens serve` refuses would leave a daemon that cannot come back
            check_startable(parse_config(text, name), self.main, name)
        elif role == "pair":
            raw = text.encode()
            if len(raw) > MAX_PAIR_FILE_BYTES:
                # (the daemon and `lens pair` read no larger one: it would lock every client out,
                # the writer too, and the API could not fix it)
                raise ConfigError(f"{name}: the pair file is larger than {MAX_PAIR_FILE_BYTES} bytes "
                                  f"(the limit for a pair file)")
            try:
                parse_pair_file(raw, name)
            except PairFileInvalid as exc:
                raise ConfigError(exc.message) from None
        else:
            check_size(text, name)
            try:
                jsonc.loads(text)
            except jsonc.JsoncError as exc:
                raise ConfigError(f"{name}: {exc}") from None

    def write(self, name: str, text: str, expect_digest: str | None | msgspec.UnsetType = msgspec.UNSET) -> dict[str, Any]:
        """Validate ``text`` and replace the file with it.

        ``expect_digest``: the ``digest`` a ``GET`` returned (``None``: the file did not exist);
        if the file's current one differs, :class:`ConfigFileChanged` and nothing is written.
        The comparison and the write are one step: under the pair file's lock (which
        ``lens pair`` and pairing requests take) for the pair file, under this object's lock for
        the others."""
        path, role = self._lookup(name)
        raw = text.encode("utf-8")
        if len(raw) > self.max_bytes:
            raise ConfigError(f"{name}: the text is larger than {self.max_bytes} bytes")
        self.validate(role, name, text)
        try:
            lock: AbstractContextManager[Any] = self._write_lock
            if role == "pair":
                # Judged before the lock file is made there, a link's directory too (a link is
                # refused, as itself, below), as `lens pair` and pairing requests judge it; a
                # directory not there is made private first, and the one the lock file is
                # opened in is judged once opened.
                self._check_directory(path, name, role)
                if not os.path.islink(path):
                    make_pair_directory(path)
                lock = pair_lock(path, judge=lambda st: self._judge_opened(st, name))
            with lock:
                written = self._replace(path, role, name, raw, expect_digest)
        except OSError as exc:  # (the pair file's lock could not be opened)
            raise ConfigFileUnwritable(f"{name} cannot be written ({why_not_written(exc)}); nothing was changed") from None
        # Keys the daemon does not know are written (a newer config must not stop an older
        # daemon) but will be ignored: the writer is told which, as `lens serve` tells at start
        # (a misspelt `server.prot` was answered 200 and nothing more).
        # Each shown key near a known one is answered with it too (a misspelt `contextWindw`:
        # `contextWindow`), as the start-up note says `(did you mean "contextWindow"?)`.
        unknown = unknown_keys(text) if role == "main" else []
        # (each scrubbed of whole keys, then cut: a provider key pasted as a key name and cut first
        # left its first characters, which the answer's scrub of whole keys does not recognise)
        written["unknownKeys"] = [self._shown_key(key.path) for key in unknown[:MAX_UNKNOWN_KEYS_SHOWN]]
        written["unknownKeysTotal"] = len(unknown)
        written["unknownKeysMeant"] = unknown_keys_meant(unknown, MAX_UNKNOWN_KEYS_SHOWN, self._shown_key)
        # ... and when the write takes effect: a 200 read as "applied" left the running daemon on
        # the config it started with and the writer none the wiser.
        written["appliesAt"] = APPLIES_AT.get(role, NOT_READ)
        return written

    def _shown_key(self, path: str) -> str:
        """A key's path as a write's answer shows it: each whole key of the daemon's replaced by its
        marker, then cut to 80 characters. Whole keys only: the path is the caller's own text, and
        an answer that changed with how much of it agrees with a key would tell the caller how far
        a guess matched (a piece scrub here rebuilt a key one character at a time)."""
        return shortened(self.secrets.scrub_text(path))

    def _replace(self, path: Path, role: str, name: str, raw: bytes,
                 expect_digest: str | None | msgspec.UnsetType) -> dict[str, Any]:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            mode = 0o600
        else:
            if stat.S_ISLNK(st.st_mode):  # a symlink is never followed (read refuses it too) nor replaced
                raise ConfigFileNotRegular(f"{name} is a symbolic link; the API neither follows nor replaces links: "
                                           f"edit it where it lives; nothing was changed")
            if not stat.S_ISREG(st.st_mode):
                raise ConfigFileNotRegular(f"{name} cannot be written through the API: it is {kind_of(st.st_mode)}, "
                                           f"not a regular file; nothing was changed")
            mode = stat.S_IMODE(st.st_mode) & 0o777  # (the permission bits: no set-ID or sticky bit carried on)
            if role == "main":
                # the write keeps the mode, and the next `lens serve` refuses a config others can
                # write: a 200 `nextStart` would name a start that does not come. The mode alone:
                # the file written is a new one, the daemon user's, whoever owned the old one.
                try:
                    check_config_file_mode(Path(name), st)
                except ConfigError as exc:
                    raise ConfigError(f"{name}: {exc.message}; nothing was changed") from None
        if role == "main":
            self._check_directory(path, name, role)
        if expect_digest is not msgspec.UNSET:  # (after the checks above: "changed" is for a file it can write)
            current = self._digest(path, name)
            if current != expect_digest:
                now = "it does not exist now" if current is None else f"its digest is now {current}"
                raise ConfigFileChanged(f"{name} changed since it was read ({now}); read it again and re-apply the "
                                        f"edit. Nothing was changed")
        try:
            replace_atomically(path, raw, mode)
        except OSError as exc:
            raise ConfigFileUnwritable(f"{name} cannot be written ({why_not_written(exc)}); nothing was changed") from None
        return {"name": name, "role": role, "written": len(raw), "digest": hashlib.sha256(raw).hexdigest()}

    @staticmethod
    def _check_directory(path: Path, name: str, role: str) -> None:
        """:class:`ConfigError` for a main config whose place the next start refuses
        (:func:`~runtime.config.config_place_problem`, the start's own rule: its directory, its
        link target's, or one above them that another user can change, a sticky one of root's
        or the daemon user's passing above; a daemon that started on its defaults, with no
        config file, judged none of them), or for a pair file in such a place, which pairing
        requests and ``lens pair`` refuse to write. The message names the file and "its
        directory" or "a directory above its directory", not a path, which the API's answers do
        not show."""
        problem = config_place_problem(path) if role == "main" else pair_place_problem(path)
        if problem is None:
            return
        _, why, below = problem
        if isinstance(why, OSError):
            which = "its directory" if below is None else "the directories above its directory"
            raise ConfigFileUnwritable(f"{name} cannot be written ({which} cannot be checked: "
                                       f"{why.strerror}); nothing was changed")
        if below is None:
            ConfigFiles._refuse_directory(name, role, why)
        fix = ("give it to root or the daemon's user (chown)" if why.startswith("owned")
               else "take the group's and others' write permission from it (chmod go-w), or make it sticky (chmod +t)")
        then = ("a config in it, in its place, and the next start would refuse it" if role == "main" else
                "a pair file in it, in its place, and pairing requests and `lens pair` refuse to write it")
        raise ConfigError(f"{name}: a directory above its directory is {why}, who could put a directory of theirs, "
                          f"and {then}; check what that directory holds, then {fix}; nothing was changed")

    @staticmethod
    def _judge_opened(st: os.stat_result, name: str) -> None:
        """The pair file's directory as opened for its lock file (``st``: its ``fstat``), judged as
        :meth:`_check_directory` judges it by name: the directory judged is the one written in."""
        why = others_can_change(st)
        if why is not None:
            ConfigFiles._refuse_directory(name, "pair", why)

    @staticmethod
    def _refuse_directory(name: str, role: str, why: str) -> NoReturn:
        fix = ("give it to the daemon's user (chown)" if why.startswith("owned")
               else "take the group's and others' write permission from it (chmod go-w)")
        then = ("a config of theirs in its place, and the next start would refuse it" if role == "main" else
                "a pair file of theirs in its place, and pairing requests and `lens pair` refuse to write it")
        raise ConfigError(f"{name}: its directory is {why}, who could put {then}; check what the directory "
                          f"holds, then {fix}; nothing was changed")

    def _digest(self, path: Path, name: str) -> str | None:
        """The current file's digest as ``GET`` gives it; ``None`` when there is none. A file
        ``GET`` could not serve has no digest a client can hold: "too large" for those."""
        try:
            return hashlib.sha256(read_regular_file(path, self.max_bytes, follow_symlinks=False)).hexdigest()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"unavailable ({exc.strerror})"
