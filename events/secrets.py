"""Secrets the log never holds: the exact values of configured credentials, each replaced by a
marker naming the environment variable it came from (``[redacted OPENAI_API_KEY]``).

A provider or a model can echo a key in an answer, a command (``env``) or a file can print one;
whatever the producer, the event store passes every body through :meth:`Secrets.scrub_packed`
before it is stored, so that the log — and the projections, SSE frames and HTTP answers derived
from it — never carry one. Values shorter than :data:`MIN_SECRET` characters are not scrubbed:
they cannot be told from ordinary words (and are no real key).

A value is caught as written and as a JSON text writes it (tool-call arguments, a JSON tool
output): any character but a letter, a digit, ``-``, ``_`` and ``.`` may stand escaped, as
``\\uXXXX`` or (``/``, ``"``, ``\\``) after a backslash.

The cost on the append path is one substring search of each event's MessagePack per secret (for
a value holding a character JSON may escape: of its longest run of the others); only an event
that holds one is decoded, rewritten and encoded again. What the daemon serves from the log
(events stored before a key was scrubbed, say, and everything built from them: a session's view,
history, a model request) passes :meth:`Secrets.holds` and :meth:`Secrets.scrub` on the way out,
at the same cost: every JSON answer (:meth:`Secrets.scrub_json`), every SSE frame, the Working
Context sent to a provider.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Callable, Iterable, Mapping, TypeVar

import msgspec

MIN_SECRET = 8  # values shorter than this are never scrubbed (see the module's docstring)
_ANCHOR = MIN_SECRET // 2  # (any MIN_SECRET characters of a value hold one of its anchors: scrub_message)
_NEVER_ESCAPED = re.compile(r"[A-Za-z0-9._-]+")  # (no JSON encoder escapes these)
S = TypeVar("S")
T = TypeVar("T", str, bytes)
FINGERPRINT_ROUNDS = 100_000  # of Secrets.fingerprint: tens of milliseconds, once per start or rebuild


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
        self._names = usable  # (value -> variable: what sent_whole keeps of them)
        self._marks = sorted({marker(n) for n in usable.values()})  # (what the scrub puts in: cut keeps them whole)
        # Longest first: a key that holds another key is replaced whole.
        self._pairs = sorted(((v, marker(n)) for v, n in usable.items()), key=lambda p: -len(p[0]))
        # What is searched first: the value, or its longest part that JSON never escapes.
        self._needles = [max(_NEVER_ESCAPED.findall(v) or [v], key=len) for v, _ in self._pairs]
        self._packed_needles = [n.encode("utf-8") for n in self._needles]
        # A value with a character JSON may escape is replaced by a pattern of both forms.
        self._forms = [None if _NEVER_ESCAPED.fullmatch(v) else re.compile("".join(map(_either_form, v)))
                       for v, _ in self._pairs]
        # Each value's pieces of _ANCHOR characters at every _ANCHOR-th position, by where they
        # stand in it: every piece of MIN_SECRET characters holds one whole (scrub_message).
        self._anchors: list[dict[str, list[int]]] = []
        for value, _ in self._pairs:
            anchors: dict[str, list[int]] = {}
            for at in range(0, len(value) - _ANCHOR + 1, _ANCHOR):
                anchors.setdefault(value[at:at + _ANCHOR], []).append(at)
            self._anchors.append(anchors)

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

    def fingerprint(self, salt: bytes) -> str:
        """A digest of the set of secrets and their markers, salted: what a projection built from
        text scrubbed of them records, to tell whether it was built with the same set. ``""``
        for no secrets. Never the values: a salted PBKDF2 (:data:`FINGERPRINT_ROUNDS` rounds),
        so that a short value cannot be found again from the digest by trying candidates fast."""
        if not self._pairs:
            return ""
        joined = "\0".join(f"{value}\0{mark}" for value, mark in sorted(self._pairs)).encode("utf-8")
        return hashlib.pbkdf2_hmac("sha256", joined, salt, FINGERPRINT_ROUNDS).hex()

    def scrub_text(self, text: str) -> str:
        """``text`` with every secret, as written or JSON-escaped, replaced by its marker."""
        for (value, mark), needle, form in zip(self._pairs, self._needles, self._forms):
            if form is None:
                if value in text:
                    text = text.replace(value, mark)
            elif needle in text:
                text = form.sub(mark, text)
        return text

    def sent_whole(self, text: str) -> "Secrets":
        """The secrets ``text`` holds whole (as written or JSON-escaped), as a :class:`Secrets` of
        their own: the keys a client's request holds, whose pieces an answer to it may lose
        (:meth:`scrub_message`) without telling the client anything it did not send. Of any
        other key, only whole ones are judged in what a client sent: an answer that changed as
        its text agreed with a key for longer would tell it how far a guess matched. ``text`` may
        be a JSON text: a key it holds in any JSON spelling (a letter written ``\\u0073``) is held
        whole."""
        return self.sent_whole_in((), text.encode("utf-8", "surrogatepass"))

    def sent_whole_in(self, texts: Iterable[str], data: bytes = b"") -> "Secrets":
        """:meth:`sent_whole` of ``texts`` and of ``data`` (a request's body, as bytes) together,
        without joining them into one text: ``data`` is searched as it is, one bytes search per
        secret (its part JSON never escapes), and decoded only when one is there and it may be
        written escaped. ``data`` that is JSON holding a ``\\u`` escape (which may write any
        character, a letter too, so that no search of its bytes finds the key) is decoded once,
        and a key one of its strings holds whole is held too. Work in proportion to ``data``: a
        caller with a large body runs it in a worker thread."""
        texts = tuple(texts)
        held = {}
        decoded: str | None = None
        for (value, _mark), needle, packed, form in zip(self._pairs, self._needles, self._packed_needles, self._forms):
            if any(needle in text and (value in text if form is None else form.search(text)) for text in texts):
                held[value] = self._names[value]
            elif data and packed in data:
                if form is None:
                    found = value.encode("utf-8") in data
                else:
                    if decoded is None:
                        decoded = data.decode("utf-8", "surrogateescape")
                    found = form.search(decoded) is not None
                if found:
                    held[value] = self._names[value]
        if data and len(held) < len(self._pairs) and b"\\u" in data:
            strings = _json_strings(data)
            for value, _mark in self._pairs:
                if value not in held and any(value in string for string in strings):
                    held[value] = self._names[value]
        return Secrets(held) if held else _NONE

    def scrub_message(self, text: str) -> str:
        """``text``, a message or a line that may quote a value cut to a limit (an error naming
        a bad field's value, a log line), with every secret, whole (as :meth:`scrub_text`
        finds it) or any piece of :data:`MIN_SECRET` or more of its characters, replaced by its
        marker. A message quoting a value cuts it before anything could scrub it, and what the
        cut leaves of a key is no exact value; in a message, unlike content, eight characters of
        a key are nothing but a piece of it. One substring search of ``text`` per four characters
        of each secret (a dozen for a key of 48): for messages and lines, not for content. Not
        for text a client chose either: an answer that changed as that text agreed with a key for
        longer would tell the client how far a guess matched (:meth:`sent_whole`)."""
        text = self.scrub_text(text)
        for (value, mark), anchors in zip(self._pairs, self._anchors):
            spans: list[tuple[int, int]] = []
            for anchor, offsets in anchors.items():
                at = text.find(anchor)
                while at >= 0:
                    for offset in offsets:  # (the piece around it: as far as it goes on as the value does)
                        begin, first = at, offset  # (first: where in the value text[begin] stands)
                        while begin > 0 and first > 0 and text[begin - 1] == value[first - 1]:
                            begin, first = begin - 1, first - 1
                        end, last = at + _ANCHOR, offset + _ANCHOR  # (last: where text[end] would)
                        while end < len(text) and last < len(value) and text[end] == value[last]:
                            end, last = end + 1, last + 1
                        if end - begin >= MIN_SECRET:
                            spans.append((begin, end))
                    at = text.find(anchor, at + 1)
            if not spans:
                continue
            # (one piece is found from each anchor it holds; two side by side, a key and then a
            # cut copy of it, stay two)
            spans.sort()
            merged = [list(spans[0])]
            for begin, end in spans[1:]:
                if begin < merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], end)
                else:
                    merged.append([begin, end])
            out: list[str] = []
            done = 0
            for begin, end in merged:
                out += [text[done:begin], mark]
                done = end
            text = "".join(out) + text[done:]
        return text

    def scrub_message_json(self, data: bytes) -> bytes | None:
        """The JSON text ``data`` (an error answer) with :meth:`scrub_message` applied to each of
        its strings (keys included); None when that changes nothing. Text that is not JSON is
        scrubbed as text."""
        if not self._pairs:
            return None
        try:
            value = msgspec.json.decode(data)
        except msgspec.DecodeError:
            text = data.decode("utf-8", "surrogateescape")
            clean_text = self.scrub_message(text)
            return None if clean_text == text else clean_text.encode("utf-8", "surrogateescape")
        clean = msgspec.json.encode(self.scrub(value, self.scrub_message))
        return None if clean == msgspec.json.encode(value) else clean

    def holds(self, data: bytes) -> bool:
        """False when ``data`` (a MessagePack or JSON encoding) holds no secret, in any form;
        True when it may. One substring search per secret."""
        for needle in self._packed_needles:  # (a plain loop: a generator in any() costs half again)
            if needle in data:
                return True
        return False

    def encode(self, value: Any, encode: Callable[[Any], bytes]) -> bytes:
        """``encode(value)``, scrubbed when it holds a secret: for what is read back from the log
        and shown (an event stored before its key was scrubbed)."""
        data = encode(value)
        return encode(self.scrub(value)) if self.holds(data) else data

    def scrub_json(self, data: bytes) -> bytes | None:
        """The JSON text ``data`` with every secret in its strings (keys included) replaced,
        encoded again; None when ``data`` holds none (the common case, one search each). Text
        that is not JSON is scrubbed as text."""
        if not self.holds(data):
            return None
        try:
            value = msgspec.json.decode(data)
        except msgspec.DecodeError:
            return self.scrub_text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        clean = msgspec.json.encode(self.scrub(value))
        return None if clean == data else clean

    def scrub_packed(self, raw: bytes) -> bytes | None:
        """The MessagePack ``raw`` with every secret in its strings (keys included) and binaries
        replaced, re-encoded; None when ``raw`` holds none (the common case, one search each)."""
        for needle in self._packed_needles:  # (inline, not holds(): the call costs as much again)
            if needle in raw:
                clean = msgspec.msgpack.encode(self.scrub(msgspec.msgpack.decode(raw)))
                return None if clean == raw else clean  # (only the searched part of a value was there)
        return None

    def scrub_structs(self, values: list[S], kind: type[S]) -> list[S]:
        """``values`` (MessagePack structs of ``kind``) with each that holds a secret replaced by a
        scrubbed copy; ``values`` itself when none does (one encode and one search per secret)."""
        if not self._pairs or not self.holds(msgspec.msgpack.encode(values)):
            return values
        out = []
        for value in values:
            clean = self.scrub_packed(msgspec.msgpack.encode(value))
            out.append(value if clean is None else msgspec.msgpack.decode(clean, type=kind))
        return out

    def scrub(self, value: Any, by: Callable[[str], str] | None = None) -> Any:
        """``value`` (as MessagePack or JSON decodes) with every secret in its strings (map keys
        included) and binaries replaced by its marker (by :meth:`scrub_text`, or ``by``)."""
        by = by or self.scrub_text
        if isinstance(value, str):
            return by(value)
        if isinstance(value, list):
            return [self.scrub(v, by) for v in value]
        if isinstance(value, dict):
            return {self.scrub(k, by): self.scrub(v, by) for k, v in value.items()}
        if isinstance(value, (bytes, bytearray, memoryview)):
            text = bytes(value).decode("utf-8", "surrogateescape")
            return by(text).encode("utf-8", "surrogateescape")
        return value

    def scrub_page(self, text: str, next_offset: int, eof: bool) -> tuple[str, int, bool]:
        """A page of a longer text (a file, a job's output) read up to the byte ``next_offset``
        (``eof``: nothing follows), scrubbed, as ``(text, next_offset, eof)``. A page that ends
        in what could begin a secret holds that end back for the next page (which then starts
        with the secret), as streamed deltas do; a page that is nothing but such a beginning
        shows its first ``MIN_SECRET - 1`` characters only, so that a reader still advances.
        No page ends in ``MIN_SECRET`` or more characters of a secret."""
        text = self.scrub_text(text)
        if eof or not self._pairs:
            return text, next_offset, eof
        held = self.open_end(text)
        if held == len(text):
            held = max(0, held - (MIN_SECRET - 1))
        if not held:
            return text, next_offset, eof
        return text[:-held], next_offset - len(text[-held:].encode("utf-8")), False

    def cut(self, text: T, limit: int, more: T | None = None) -> T:
        """``text`` (a str, or bytes) scrubbed, then cut to its first ``limit`` characters (or
        bytes; ``more`` added when it was longer). Scrubbed first: a secret across the cut is
        replaced whole, where a cut made first would leave its first characters, which no later
        scrub recognises. A marker the limit would cut (``[redacted NAME]`` losing its name) is
        left out whole: the text is cut before it, ``more`` added all the same. Every text the
        daemon cuts to a limit and may show is cut here."""
        text = self.scrub(text)
        if len(text) <= limit:
            return text
        at = max(0, limit)
        for mark in self._marks:
            m: Any = mark if isinstance(text, str) else mark.encode("utf-8")
            # (the first of it that could cross the cut: one starting past the cut is no matter)
            start = text.find(m, max(0, limit - len(m) + 1), limit + len(m) - 1)
            if 0 <= start < at:
                at = start
        return text[:at] + (more or text[:0])

    def mend(self, text: str, *, cut_start: bool = False, cut_end: bool = False) -> str:
        """``text``, a part of a longer text cut where no secret was known (the executor's cap on
        a command's output, a tail of a ring of bytes), scrubbed: where it was cut at its end
        (``cut_end``), what could begin a secret is left out; where at its start
        (``cut_start``), what could end one. The pieces of a secret the cut left stay out."""
        text = self.scrub_text(text)
        if not self._pairs:
            return text
        if cut_end:
            held = self.open_end(text)
            text = text[:len(text) - held]
        if cut_start:
            text = text[self.open_start(text):]
        return text

    def open_start(self, text: str) -> int:
        """The length of the longest start of ``text`` that is the end of some secret."""
        best = 0
        for value, _ in self._pairs:
            for n in range(min(len(value) - 1, len(text)), best, -1):
                if text.startswith(value[-n:]):
                    best = n
                    break
        return best

    def open_end(self, text: str) -> int:
        """The length of the longest end of ``text`` that is the start of some secret."""
        best = 0
        for value, _ in self._pairs:
            for n in range(min(len(value) - 1, len(text)), best, -1):
                if text.endswith(value[:n]):
                    best = n
                    break
        return best

    def stream(self) -> "StreamScrub":
        """A scrubber for one stream of text pieces (a streamed answer's deltas)."""
        return StreamScrub(self)


_NONE = Secrets()


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
        keep = self._secrets.open_end(text)
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def flush(self) -> str:
        """What is still held (the stream ended: it is no secret)."""
        held, self._held = self._held, ""
        return held


def _json_strings(data: bytes) -> list[str]:
    """The strings (map keys included) of the JSON text ``data``; none when it is no JSON."""
    try:
        value = msgspec.json.decode(data[3:] if data.startswith(b"\xef\xbb\xbf") else data)
    except (msgspec.DecodeError, RecursionError):
        return []
    out: list[str] = []
    stack = [value]
    while stack:  # (no recursion: a body may nest as deep as its decoder lets it)
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            out.extend(item)
            stack.extend(item.values())
    return out


def _either_form(char: str) -> str:
    """A pattern for ``char`` as written or as JSON may escape it."""
    if _NEVER_ESCAPED.fullmatch(char):
        return re.escape(char)
    code = ord(char)
    units = [code] if code < 0x10000 else [0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)]
    forms = [re.escape(char), "".join(rf"\\u(?i:{u:04x})" for u in units)]
    if char in '/"\\':
        forms.append(re.escape("\\" + char))
    return "(?:" + "|".join(forms) + ")"
