"""The route a request no route takes may have meant, for its 404's message.

Two mistakes a new client makes with a path: the ``/api/v1`` prefix left out, half written or of
another version (``/health``, ``/v1/projects``, ``/api/v2/health``: :func:`under_the_api`), and
a word or two of the path misspelt (``…/input``, ``/session/…``, ``/sesions/…/inputt``:
:func:`near_route`). Both answer a path the client can send as it is, or None. Pure functions of
the route table and the path.
"""

from __future__ import annotations

from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.routing import Map

API_PREFIX = "/api/v1"
MAX_EDITS = 2  # letters added, dropped or changed in a misspelt word (and fewer than half of it)
MAX_MISSPELT = 2  # words of a path mended at most


def under_the_api(url_map: Map, path: str, method: str) -> str | None:
    """The route under :data:`API_PREFIX` a path outside it names, when one takes some method
    there."""
    if path.startswith(API_PREFIX + "/"):
        return None
    if path.startswith("/api/"):
        after = path[len("/api"):]
        candidates = ["/" + after[1:].partition("/")[2], after]  # (another version; none)
    elif path.startswith("/v1/"):
        candidates = [path[len("/v1"):]]
    else:
        candidates = [path]
    adapter = url_map.bind("lens")
    for rest in candidates:
        if rest == "/":
            continue
        try:
            adapter.match(API_PREFIX + rest, method=method)
        except MethodNotAllowed:
            return API_PREFIX + rest
        except HTTPException:
            continue
        return API_PREFIX + rest
    return None


def near_route(url_map: Map, path: str) -> str | None:
    """``path`` with its misspelt words mended, when one route of the API alone differs from it
    in the fewest words, at most :data:`MAX_MISSPELT`, each at most :data:`MAX_EDITS` edits away
    and fewer than half its letters (a placeholder takes any word): ``/api/v1/sessions/s1/input``
    -> ``/api/v1/sessions/s1/inputs``, ``/api/v1/sesions/s1/inputt`` -> the same. Only routes of
    as many words as the path are compared. None when no route or several are that near."""
    words = path.split("/")
    nearest: dict[str, int] = {}  # mended path -> its misspelt words
    for rule in url_map.iter_rules():
        pattern = rule.rule.split("/")
        if not rule.rule.startswith(API_PREFIX + "/") or len(pattern) != len(words):
            continue
        mended = _mended(pattern, words)
        if mended is not None:
            misses, shown = mended
            nearest[shown] = min(misses, nearest.get(shown, misses))
    if not nearest:
        return None
    fewest = min(nearest.values())
    best = [shown for shown, misses in nearest.items() if misses == fewest]
    return best[0] if len(best) == 1 else None


def _mended(pattern: list[str], words: list[str]) -> tuple[int, str] | None:
    """(how many words were misspelt, the path mended) when ``words`` differ from the route's
    ``pattern`` in 1 to :data:`MAX_MISSPELT` words each near the route's own; else None."""
    out = list(words)
    misses = 0
    for i, (want, got) in enumerate(zip(pattern, words)):
        if want == got or (want.startswith("<") and got):
            continue
        misses += 1
        if (misses > MAX_MISSPELT or want.startswith("<")
                or _edits(want, got) > min(MAX_EDITS, (len(want) - 1) // 2)):
            return None
        out[i] = want
    return (misses, "/".join(out)) if misses else None


def _edits(a: str, b: str) -> int:
    """The Levenshtein distance of two words (short ones: a path's)."""
    if abs(len(a) - len(b)) > MAX_EDITS:
        return MAX_EDITS + 1
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]
