"""Search-result snippets for ``history_search``, in linear time.

FTS5's ``snippet()`` grows faster than linearly with the query's hits in an item: one common
word in a 1 MiB command output, or a few prefix terms, kept the projections connection (which
every HTTP list waits for) busy for seconds to minutes. A snippet here is found in one pass over
at most :data:`SCAN_CHARS` of the item's text: the first occurrence of a query term, a window of
:data:`SNIPPET_TOKENS` tokens around it, matched tokens in ``[brackets]`` and ``…`` where the
window cuts the text — the shape ``snippet()`` gave. Tokens are found and compared as the index
sees them (:mod:`projections.tokens`: runs of letters and digits, each character of a script
written without spaces apart, compared case-folded and without diacritics); an item whose first
hit lies past the scanned prefix shows its beginning.
"""

from __future__ import annotations

import unicodedata
from collections import deque
from dataclasses import dataclass
from typing import Sequence

from .tokens import WORD as _WORD
from .tokens import fold, fold_text, is_character_token

SNIPPET_TOKENS = 24  # words in a snippet (a CJK character counts a third: CHARACTERS_PER_WORD)
SCAN_CHARS = 256 * 1024  # of an item's text searched for the first hit
LEAD_TOKENS = 4  # words shown before the first hit, within LEAD_CHARS
CHARACTERS_PER_WORD = 3  # of an unspaced script, each its own token, counted as one word
LEAD_CHARS = 120
MAX_CHARS = 600  # a snippet longer than this (very long tokens) is cut
TAIL_CHARS = 40  # what follows the last token, if no more than this and no token, is shown
FOLD_WINDOW = 16 * 1024  # non-ASCII text is searched for a term's first word this much at a time...
FOLD_OVERLAP = 1024  # ... with windows overlapping by this much (a token spanning two is in one)


@dataclass(frozen=True)
class Term:
    words: tuple[str, ...]  # folded; a phrase has several
    prefix: bool  # the last word matches as a prefix

    def matches_word(self, i: int, token: str) -> bool:
        word = self.words[i]
        return token.startswith(word) if self.prefix and i == len(self.words) - 1 else token == word


def term(text: str, prefix: bool) -> Term | None:
    words = tuple(fold(w) for w in _WORD.findall(text))
    return Term(words, prefix) if words else None


def snippet(text: str, terms: list[Term], *, more: bool = False) -> str:
    """The snippet of ``text`` for ``terms`` (see the module docstring); ``more``: ``text`` is
    the beginning of a longer item."""
    scanned = text[:SCAN_CHARS]
    lead_max = LEAD_TOKENS * CHARACTERS_PER_WORD  # tokens, if each is a CJK character
    recent: deque[tuple[int, int, str]] = deque(maxlen=lead_max + max((len(t.words) for t in terms), default=1))
    begin = 0
    if scanned.isascii():  # (the common case) folding is lower(): find the first hit's region in C
        lowered = scanned.lower()
        found = [i for i in (lowered.find(t.words[0]) for t in terms) if i >= 0]
        if not found:
            begin = len(scanned)  # no term occurs at all: the text's beginning
        else:
            begin = max(0, min(found) - 256)  # tokens from a little before it (the lead)
    else:
        begin = _first_window_with_a_term(scanned, terms)
    tokens = _WORD.finditer(scanned, begin)
    hit = -1  # index in `recent` of the first token of the first hit
    for m in tokens:
        recent.append((m.start(), m.end(), fold(m.group())))
        hit = _phrase_ending_here(recent, terms)
        if hit >= 0:
            break
    budget = SNIPPET_TOKENS * CHARACTERS_PER_WORD
    if hit < 0:  # no hit in the scanned text: its beginning
        window, used = [], 0
        for m in _WORD.finditer(scanned):
            if used >= budget:
                break
            window.append((m.start(), m.end(), ""))
            used += _units(scanned, m.start())
        return _render(text, window, set(), more)
    first, used = hit, 0
    while first > 0 and used + _units(scanned, recent[first - 1][0]) <= lead_max:
        first -= 1
        used += _units(scanned, recent[first][0])
    window = list(recent)[first:]
    while len(window) > 1 and window[0] is not recent[hit] and recent[hit][0] - window[0][0] > LEAD_CHARS:
        window.pop(0)  # a long token (or a run of them) before the hit is no context
    used = sum(_units(scanned, w[0]) for w in window)
    for m in tokens:
        if used >= budget:
            break
        window.append((m.start(), m.end(), fold(m.group())))
        used += _units(scanned, m.start())
    marked: set[int] = set()
    for t in terms:  # every whole occurrence of a term in the window
        for i in range(len(window) - len(t.words) + 1):
            if _occurs_at(t, window, i):
                marked.update(range(i, i + len(t.words)))
    return _render(text, window, marked, more)


def _units(text: str, start: int) -> int:
    """A token's length in thirds of a word: a CJK character is one, any other token three."""
    return 1 if is_character_token(text, start) else CHARACTERS_PER_WORD


def _first_window_with_a_term(text: str, terms: list[Term]) -> int:
    """Where the token walk may start in a non-ASCII ``text``: a little before the first window
    of :data:`FOLD_WINDOW` characters (overlapping by :data:`FOLD_OVERLAP`) whose folded form
    holds a term's first word, or ``len(text)`` when none does. Folding works character by
    character, so a token's folded form is a piece of its window's (unless the token is longer
    than the overlap); the walk token by token, ~0.45 µs a character, then skips what cannot hold
    a hit (a Cyrillic item without the term: 0.11 s → 0.03 s for 256k characters)."""
    for start in range(0, len(text), FOLD_WINDOW):
        folded = fold_text(text[start:start + FOLD_WINDOW + FOLD_OVERLAP])
        if any(t.words[0] in folded for t in terms):
            return max(0, start - 256)
    return len(text)


def _occurs_at(t: Term, tokens: Sequence[tuple[int, int, str]], i: int) -> bool:
    """Whether ``t``'s words are the tokens from index ``i`` on."""
    return all(t.matches_word(j, tokens[i + j][2]) for j in range(len(t.words)))


def _phrase_ending_here(recent: deque[tuple[int, int, str]], terms: list[Term]) -> int:
    """Index in ``recent`` where a term's words end at its last token, or -1."""
    n = len(recent)
    for t in terms:
        if len(t.words) <= n and _occurs_at(t, recent, n - len(t.words)):
            return n - len(t.words)
    return -1


def _render(text: str, window: list[tuple[int, int, str]], marked: set[int], more: bool) -> str:
    if not window:
        return text[:200]
    start, end = window[0][0], window[-1][1]
    # (piece, highlighted): a highlight takes in the combining marks after its token — the index
    # splits Devanagari, Thai or Arabic words at their vowel signs, and `[ह]ि[न]्[द]ी` left the
    # marks outside on their own — and touching highlights are one (CJK: each character a token)
    pieces: list[tuple[str, bool]] = [("…" if start > 0 else "", False)]
    pos = start
    for i, (s, e, _) in enumerate(window):
        if i in marked:
            e = _after_marks(text, e)
            if s == pos and pieces[-1][1]:
                pieces[-1] = (pieces[-1][0] + text[s:e], True)
            else:
                pieces.append((text[pos:s], False))
                pieces.append((text[s:e], True))
            pos = max(pos, e)
    end = max(end, pos)
    pieces.append((text[pos:end], False))
    rest = text[end:end + TAIL_CHARS + 1]
    if 0 < len(rest) <= TAIL_CHARS and not _WORD.search(rest):  # only punctuation follows: show it
        pieces.append((rest, False))
        end += len(rest)
    cut = more or (end < len(text) and bool(text[end:].strip()))
    out: list[str] = []
    room = MAX_CHARS  # a snippet longer than this is cut, a highlight it cuts closed
    for piece, highlighted in pieces:
        shown = f"[{piece}]" if highlighted else piece
        if len(shown) <= room:
            out.append(shown)
            room -= len(shown)
            continue
        kept = _cut(piece, room - 2 if highlighted else room)
        if highlighted and kept:  # (no empty `[]` where the cut leaves nothing of the token)
            out.append(f"[{kept}]")
        elif not highlighted:
            out.append(kept)
        cut = True
        break
    return "".join(out) + ("…" if cut else "")


def _after_marks(text: str, end: int) -> int:
    """``end`` moved past the combining marks that follow it."""
    n = len(text)
    while end < n and unicodedata.category(text[end])[0] == "M":
        end += 1
    return end


def _cut(piece: str, n: int) -> str:
    """The first ``n`` characters of ``piece``, less a letter whose marks would be cut off."""
    if n >= len(piece):
        return piece
    while n > 0 and unicodedata.category(piece[n])[0] == "M":
        n -= 1
    return piece[:n]
