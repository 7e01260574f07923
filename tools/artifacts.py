"""Content-addressed artifacts: binaries stored once by SHA-256 outside the log.

``put`` writes ``artifacts/<sha256>`` atomically (temp file, fsync, rename) and is idempotent;
``get`` verifies the bytes against their name before returning them, so a damaged file is
caught before it is sent anywhere.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from pathlib import Path

SHA_RE = re.compile(r"[0-9a-f]{64}")  # whole strings only: fullmatch


class ArtifactError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / digest
        if _intact(path, digest):
            return digest  # (a damaged copy is written again: it failed every request naming it)
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{digest}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return digest

    def get(self, artifact_id: str) -> bytes:
        if not SHA_RE.fullmatch(artifact_id):
            raise ArtifactError("ARTIFACT_NOT_FOUND", f"no artifact {artifact_id!r}")
        try:
            data = (self.root / artifact_id).read_bytes()
        except FileNotFoundError:
            raise ArtifactError("ARTIFACT_NOT_FOUND", f"no artifact {artifact_id!r}") from None
        if hashlib.sha256(data).hexdigest() != artifact_id:
            raise ArtifactError("ARTIFACT_CORRUPT", f"artifact {artifact_id} does not match its SHA-256")
        return data


def _intact(path: Path, digest: str) -> bool:
    """Whether ``path`` exists and holds the bytes of ``digest``."""
    try:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:  # missing (or not a readable file): written afresh
        return False
    return h.hexdigest() == digest
