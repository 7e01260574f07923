"""Secrets the log never holds: the exact values of configured credentials, each replaced by a
marker naming the environment variable it came from (``[redacted OPENAI_API_KEY]``).

A provider or a model can echo a key in an answer, a command (``env``) or a file can print one;
whatever the producer, the event store passes every body through :meth:`Secrets.scrub_packed`
before it is stored, so that the log — and the projections, SSE frames and HTTP answers derived
from it — never carry one. Values shorter than :data:`MIN_SECRET` characters are not scrubbed:
they cannot be told from ordinary words (and are no real key).

The cost on the append path is one substring search of each event's MessagePack per secret;
only an event that holds one is decoded, rewritten and encoded again.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import msgspec

MIN_SECRET = 8  # values shorter than this are never scrubbed (see the module's docstring)


def marker(name: str) -> str:
    """What stands in place of the value of the variable ``name``."""
    return f"[redacted {name}]"


class Secrets:
    """Exact values to scrub, each with its marker. Immutable; cheap to share between threads."""

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        """``values``: secret value -> the environment variable it came from. Values shorter
        than :data:`MIN_SECRET` (or not encodable as UTF-8) are left out."""
        usable = {}
        for value, name in (values or {}).items():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                continue
            if len(value) >= MIN_SECRET:
                usable[value] = name
        # Longest first: a key that holds another key is replaced whole.
        self._pairs = sorted(((v, marker(n)) for v, n in usable.items()), key=lambda p: -len(p[0]))
        self._needles = [v.encode("utf-8") for v, _ in self._pairs]

    @classmethod
    def from_environ(cls, names: Iterable[str], environ: Mapping[str, str]) -> "Secrets":
        """The values ``environ`` holds under ``names`` (unset and empty ones ignored). A value
        held by several names is named by the first of them in sorted order."""
        values: dict[str, str] = {}
        for name in sorted(names):
            value = environ.get(name)
            if value:
                values.setdefault(value, name)
        return cls(values)

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def scrub_text(self, text: str) -> str:
        """``text`` with every secret replaced by its marker."""
        for value, mark in self._pairs:
            if value in text:
                text = text.replace(value, mark)
        return text

    def scrub_packed(self, raw: bytes) -> bytes | None:
        """The MessagePack ``raw`` with every secret in its strings (keys included) and binaries
        replaced, re-encoded; None when ``raw`` holds none (the common case, one search each)."""
        for needle in self._needles:  # (a plain loop: a generator in any() costs half again)
            if needle in raw:
                return msgspec.msgpack.encode(self._scrub(msgspec.msgpack.decode(raw)))
        return None

    def _scrub(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.scrub_text(value)
        if isinstance(value, list):
            return [self._scrub(v) for v in value]
        if isinstance(value, dict):
            return {self._scrub(k): self._scrub(v) for k, v in value.items()}
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
            for (_, mark), needle in zip(self._pairs, self._needles):
                data = data.replace(needle, mark.encode())
            return data
        return value

    def stream(self) -> "StreamScrub":
        """A scrubber for one stream of text pieces (a streamed answer's deltas)."""
        return StreamScrub(self)


class StreamScrub:
    """Scrubs text that arrives in pieces: a secret may be cut between two of them, so the end
    of what arrived that could begin a secret is held back until the next piece (or
    :meth:`flush`) tells whether it does."""

    def __init__(self, secrets: Secrets) -> None:
        self._secrets = secrets
        self._held = ""

    def feed(self, piece: str) -> str:
        """What of ``piece`` (after what was held) can be shown now, scrubbed."""
        text = self._secrets.scrub_text(self._held + piece)
        keep = self._open_prefix(text)
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def flush(self) -> str:
        """What is still held (the stream ended: it is no secret)."""
        held, self._held = self._held, ""
        return held

    def _open_prefix(self, text: str) -> int:
        """The length of the longest end of ``text`` that is the start of some secret."""
        best = 0
        for value, _ in self._secrets._pairs:
            for n in range(min(len(value) - 1, len(text)), best, -1):
                if text.endswith(value[:n]):
                    best = n
                    break
        return best
