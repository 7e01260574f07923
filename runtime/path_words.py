"""A request path's words as the client wrote them: an encoded slash (``%2F``) is part of a word.

The server decodes the path before routing, so ``/api/v1/sessions/x%2Fy`` was routed as
``/sessions/x/y`` (no route, the message naming a path the client never sent) and
``/api/v1/sessions/x%2Fevents`` as the events of session ``x`` (another resource). The raw path
(ASGI ``raw_path``) still holds the words as written: :func:`read_words` matches them against the
route table, each word decoded on its own. Pure functions of the route table and the raw path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from werkzeug.exceptions import HTTPException, MethodNotAllowed, NotFound
from werkzeug.routing import Map, MapAdapter

ENCODED_SLASH = re.compile(rb"%2f", re.IGNORECASE)
PLACEHOLDER = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")  # a rule's ``<name>`` or ``<converter:name>``

# A route's placeholder as its error messages name it (as the handlers' own id checks do).
PLACEHOLDER_WORDS = {
    "sid": "session id",
    "rid": "requestId",
    "qid": "question id",
    "job_id": "job id",
    "aid": "artifact id",
    "item_id": "context item id",
    "name": "config file name",
}


@dataclass(frozen=True)
class SlashInPlaceholder:
    """A route takes the path as written, and one of its placeholders holds a slash."""

    key: str  # the placeholder as the route names it (``sid``, ``name``)
    what: str  # the placeholder, named as in PLACEHOLDER_WORDS
    value: str  # its decoded value


@dataclass(frozen=True)
class NoRouteAsWritten:
    """No route takes the path's words as written.

    ``words`` is the path as its words were written, each slash inside a word replaced by
    ``mark`` (a character the path does not hold), to be matched against the route table as any
    path is; ``written`` is the path's first encoded slash as the client wrote it (``%2F`` or
    ``%2f``). ``slash_routes``: some route takes the path with a slash in place of each encoded
    one (``/api/v1/pair%2Frequests``), so the encoded slash is what keeps it from a route."""

    words: str
    mark: str
    written: str
    slash_routes: bool


@dataclass(frozen=True)
class MethodNotTaken:
    """A route takes the path's words as written, with other methods."""

    allowed: tuple[str, ...]


Reading = SlashInPlaceholder | NoRouteAsWritten | MethodNotTaken


def read_words(url_map: Map, raw_path: bytes | None, method: str) -> Reading | None:
    """What the route table makes of ``raw_path`` when a word of it holds an encoded slash; None
    when none does (or the target is no path: the asterisk or absolute form), as the decoded path
    is then routed as written."""
    if not raw_path or not raw_path.startswith(b"/") or not ENCODED_SLASH.search(raw_path):
        return None
    words = [unquote(w.decode("latin-1")) for w in raw_path.split(b"/")]
    mark = _absent_mark("".join(words))
    as_written = "/".join(w.replace("/", mark) for w in words)
    adapter = url_map.bind("lens")
    try:
        rule, args = adapter.match(as_written, method=method, return_rule=True)
    except MethodNotAllowed as exc:
        return MethodNotTaken(tuple(sorted(exc.valid_methods or ())))
    except NotFound:
        rule, args = None, {}
    if rule is not None:
        for key in PLACEHOLDER.findall(rule.rule):  # (in the path's order: the first holding one is named)
            value = args.get(key)
            if isinstance(value, str) and mark in value:
                return SlashInPlaceholder(key, PLACEHOLDER_WORDS.get(key, key), value.replace(mark, "/"))
    written = ENCODED_SLASH.search(raw_path)
    return NoRouteAsWritten(as_written, mark, written.group().decode("ascii") if written else "%2F",
                            _routes(adapter, "/".join(words)))


def _routes(adapter: MapAdapter, path: str) -> bool:
    """Whether some route takes ``path``, with any method."""
    try:
        adapter.match(path, method="GET")
    except MethodNotAllowed:
        return True
    except HTTPException:  # (no route; a redirect is none either)
        return False
    return True


def _absent_mark(text: str) -> str:
    """A character of Unicode's private use area that ``text`` does not hold: it stands for a slash
    inside a word while the route table matches the words."""
    held = set(text)  # (one pass over the text, not one a candidate)
    code = 0xE000
    while chr(code) in held:
        code += 1
    return chr(code)
