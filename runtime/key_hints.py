"""Keys of a file that Lens does not know, and the known key each may have meant.

A config or pair file may hold keys Lens ignores (a newer file must not stop an older daemon);
they are named where the file is read or written: ``lens serve``'s start-up note, the answer of
``PUT /config/files/{name}`` (``unknownKeys``, ``unknownKeysMeant``) and the pair file's warning.
The objects of a config that take no unknown key (a tool's policy, ``localPtc``, a faux script's
turns) refuse one instead (``CONFIG_INVALID``), and the refusal names the key meant too.
A key that is a known key of the same object but for its case or ``_``/``-`` (``ContextWindow``,
``context_window``), or a letter or two off one (``contextWindw``, ``provders``, ``prot``), is
named with that key: ``server.prot (did you mean "port"?)``. Keys are the user's text: each is
shown cut to 80 characters, and a list as many as fit in :data:`~runtime.errors.MAX_REASON`
characters. Pure functions.
"""

from __future__ import annotations

import difflib
import re
from typing import Callable, Collection, NamedTuple, Sequence

from .body_hints import fields_at
from .errors import MAX_QUOTED, MAX_REASON, shortened

_UNKNOWN_FIELD = re.compile(r"^Object contains unknown field `([^`]*)`(?: - at `(\$[^`]*)`)?$")

# difflib's ratio a key must reach against a known one: two letters swapped in a word of four
# (``prot``/``port``: 0.75) is near; ``ctx``/``contextWindow`` (0.38), ``zzz``/``log`` are not.
CUTOFF = 0.75
# Unknown keys given a hint, the first of a list: more than any list shows (the note's 400
# characters hold at most some 130 keys, a write's answer 100).
MAX_HINTED = 200


class UnknownKey(NamedTuple):
    """A key Lens does not know: its ``path`` as the note writes it (``server.prot``,
    ``providers[0].models[0].contextWindw``), and the known key of the same object it is near
    (``port``), if any."""

    path: str
    meant: str | None = None


def _folded(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "")


def meant_key(key: str, known: Collection[str]) -> str | None:
    """The key of ``known`` that ``key`` (not one of them) may have meant: one equal to it but for
    case, ``_`` and ``-``, else the nearest at difflib's ratio :data:`CUTOFF` or more (compared
    in lower case); None when none is that near. A key longer than 80 characters is no
    misspelling of a config key and is not compared (it is the user's text, of any length)."""
    if key in known or not key or len(key) > MAX_QUOTED:
        return None
    folded = _folded(key)
    same = sorted(k for k in known if _folded(k) == folded)
    if same:
        return same[0]
    lowered = {k.lower(): k for k in known}
    near = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=CUTOFF)
    return lowered[near[0]] if near else None


def hinted(found: Sequence[tuple[str, str, Collection[str]]]) -> list[UnknownKey]:
    """``found`` (each unknown key's path, the key, its object's known keys), in the order they
    are listed, as :class:`UnknownKey`: the first :data:`MAX_HINTED` with the key each may have
    meant, the others without (no list shows them; a config of 4 MiB can hold hundreds of
    thousands of keys, and comparing 400,000 took 9 s)."""
    return [UnknownKey(path, meant_key(key, known) if i < MAX_HINTED else None)
            for i, (path, key, known) in enumerate(found)]


def shown_key(key: UnknownKey) -> str:
    """A key for a note: cut to 80 characters, with the key it may have meant."""
    path = shortened(key.path)
    return f'{path} (did you mean "{key.meant}"?)' if key.meant else path


def unknown_keys_listed(keys: Sequence[UnknownKey]) -> str:
    """``keys`` for a note: each as :func:`shown_key` writes it, and as many as fit in
    :data:`MAX_REASON` characters, then how many more (a file may hold any number, of any length)."""
    shown: list[str] = []
    size = 0
    for key in map(shown_key, keys):
        if shown and size + len(key) > MAX_REASON:
            break
        shown.append(key)
        size += len(key) + 2
    more = len(keys) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


def unknown_keys_meant(keys: Sequence[UnknownKey], limit: int,
                       show: Callable[[str], str] = shortened) -> dict[str, str]:
    """For an answer listing the first ``limit`` of ``keys`` (each as ``show`` gives it: cut to 80
    characters): those of them near a known key, to that key. Keys shown alike (the same path
    written of different objects, ``a.b`` + ``c`` and ``a`` + ``b.c``, or paths cut to the same
    80 characters) are left out unless all have the same hint: the answer could not say which
    one a hint is for."""
    hints: dict[str, set[str | None]] = {}
    for k in keys[:limit]:
        hints.setdefault(show(k.path), set()).add(k.meant)
    return {path: meant for path, (meant, *others) in hints.items() if meant and not others}


def refused_key_hint(kind: type, reason: str) -> str:
    """`` (did you mean "approval"?)`` for msgspec's ``reason`` refusing an unknown key of an object
    that takes none (``Object contains unknown field `aproval` - at `$.tools.policy['bash']```),
    when the key is near a field of that object; else ``""``."""
    m = _UNKNOWN_FIELD.match(reason)
    if m is None:
        return ""
    meant = meant_key(m.group(1), fields_at(kind, m.group(2) or "$"))
    return f' (did you mean "{meant}"?)' if meant else ""
