"""Replacing a small file atomically: the config files and the pair file."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def replace_atomically(path: Path, raw: bytes, mode: int = 0o600) -> None:
    """Write ``raw`` to a temporary file beside ``path``, fsync it, give it ``mode``, rename it
    over ``path`` and fsync the directory. A failure (``OSError``) leaves ``path`` as it was and
    no temporary file behind; readers see the old bytes or the new, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
