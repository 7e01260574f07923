"""Content-addressed artifacts: binaries stored once by SHA-256 outside the log.

``put`` writes ``artifacts/<sha256>`` atomically (:func:`runtime.atomicfile.replace_atomically`:
temp file, fsync, rename, directory fsync) and is idempotent;
``get`` verifies the bytes against their name before returning them, so a damaged file is
caught before it is sent anywhere. Both read only a regular file, without blocking and up to
:data:`MAX_ARTIFACT_BYTES` (:func:`runtime.atomicfile.read_regular_file`): something else in an
artifact's place (a FIFO, a directory, a link to a device) is a damaged artifact, refused at
once by ``get`` and replaced by ``put``.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from runtime.atomicfile import FileTooLarge, NotARegularFile, read_regular_file, replace_atomically

# Far above any artifact the tools store (a file edit keeps files of at most 8 MiB, view_image
# images of 5 MiB): only a bound on what is read.
MAX_ARTIFACT_BYTES = 64 * 1024 * 1024

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
        replace_atomically(path, data)
        return digest

    def get(self, artifact_id: str) -> bytes:
        if not SHA_RE.fullmatch(artifact_id):
            raise ArtifactError("ARTIFACT_NOT_FOUND", f"no artifact {artifact_id!r}")
        try:
            data = read_regular_file(self.root / artifact_id, MAX_ARTIFACT_BYTES)
        except FileNotFoundError:
            raise ArtifactError("ARTIFACT_NOT_FOUND", f"no artifact {artifact_id!r}") from None
        except (NotARegularFile, FileTooLarge) as exc:
            raise ArtifactError("ARTIFACT_CORRUPT", f"artifact {artifact_id} is damaged on disk: {exc.strerror}") from None
        if hashlib.sha256(data).hexdigest() != artifact_id:
            raise ArtifactError("ARTIFACT_CORRUPT", f"artifact {artifact_id} is damaged on disk (its bytes no longer "
                                                  "match its SHA-256)")
        return data


def _intact(path: Path, digest: str) -> bool:
    """Whether ``path`` exists and holds the bytes of ``digest``."""
    try:
        data = read_regular_file(path, MAX_ARTIFACT_BYTES)
    except OSError:  # missing, not a regular file, too large, unreadable: written afresh
        return False
    return hashlib.sha256(data).hexdigest() == digest
