"""The ranking of ``capability_search`` (F-TOOL-3): a query's words against a tool's name and
description, in any script (:func:`tokens`, :func:`score`, :func:`rank`).

Nothing here does I/O or reads a clock."""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from projections.tokens import UNSPACED, fold_text
from runtime.providers.names import alias_for  # (imports nothing of tools: no cycle)

from .base import ToolSpec

# Scripts written without spaces between words (Han, kana, Hangul; Thai, Lao, Khmer, Burmese: the
# history index's ``UNSPACED``): a run of them is read as its overlapping character bigrams
# ("天气预报" -> 天气, 气预, 预报), so a query word of two or more such characters finds the text it
# occurs in (a query word of one such character finds the text holding it: :func:`score`). The
# vowel signs and tone marks of Thai, Lao, Khmer and Burmese are folded away first, as the
# history index drops them. Other scripts' words are runs of letters and digits.
_TOKEN = re.compile(rf"(?P<cjk>[{UNSPACED}]+)|(?:(?![{UNSPACED}])[^\W_])+")  # (``_`` separates, as in tool names)


def _fold(text: str) -> str:
    """``text`` as the ranking compares it: case-folded (``Straße`` is ``STRASSE``), compatibility
    forms unified (full-width letters) and diacritics dropped (``Café`` is ``cafe``; the vowel signs
    and tone marks of Thai, Lao, Khmer and Burmese too), as the history index folds (kana keep
    their voicing: が is not か)."""
    return text.lower() if text.isascii() else fold_text(text.casefold())


def tokens(text: str) -> list[str]:
    """The words of ``text``, folded: runs of letters and digits of any script (``mcp__t__echo``
    -> mcp, t, echo; ``Прогноз погоды`` -> прогноз, погоды), runs of Han, kana, Hangul, Thai,
    Lao, Khmer or Burmese as their character bigrams (a lone character as itself)."""
    out: list[str] = []
    for m in _TOKEN.finditer(_fold(text)):
        run = m.group()
        if m.group("cjk") is not None and len(run) > 1:
            out += [run[i:i + 2] for i in range(len(run) - 1)]
        else:
            out.append(run)
    return out


def _characters(text: str) -> set[str]:
    """The letters of ``text``'s runs of two or more characters of an unspaced script, folded:
    a query of one such letter is a word too short for bigrams, and finds the text holding it
    (as the history index, which reads these scripts by single letters, finds it)."""
    return {c for m in _TOKEN.finditer(_fold(text)) if m.group("cjk") is not None and len(m.group()) > 1
            for c in m.group()}


# English function words: a query word among them scores only as a whole word of a tool's name.
# Every description holds some ("Get the weather for a city"), so "the" or "for a" ranked and
# loaded tools that had nothing to do with what was asked.
COMMON_WORDS = frozenset(
    "a about an and any are as at be by can could do does for from get give has have how i if in "
    "into is it its let me my need of on or our please should so some than that the their them "
    "then there these this those to us use using want was we what when where which who why will "
    "with would you your".split())


def score(query: str, spec: ToolSpec, offered: Mapping[str, str] | None = None) -> int:
    """How well ``query`` matches a tool: for each distinct query word, 3 if it is a word of the
    tool's name, else 2 if a name word starts with it (3+ letters) or, for one letter of an
    unspaced script (Han, kana, Hangul, Thai…), holds it, else 1 if it is (or, with 3+ letters,
    starts) a word of the description or is one of its letters of such scripts; plus 10 when the
    query is the tool's name (case-folded), 11 when it is the name exactly as written (two tools
    whose names differ only by case: the one named is first). The name a model is offered for a
    tool (its digest alias, when its id is no native name) counts as its name for that bonus. A
    word of :data:`COMMON_WORDS` scores only as a name word."""
    name_words = set(tokens(spec.name))
    name_chars = _characters(spec.name)
    desc_words = set(tokens(spec.description)) | _characters(spec.description)
    total = named(query, spec, offered)
    for w in dict.fromkeys(tokens(query)):
        if w in name_words:
            total += 3
        elif w in COMMON_WORDS:
            continue
        elif (len(w) >= 3 and any(n.startswith(w) for n in name_words)) or w in name_chars:
            total += 2
        elif w in desc_words or (len(w) >= 3 and any(d.startswith(w) for d in desc_words)):
            total += 1
    return total


def named(query: str, spec: ToolSpec, offered_as: Mapping[str, str] | None = None) -> int:
    """The bonus of a query that is ``spec``'s name (or the name it is offered under, from
    ``offered_as``, :meth:`tools.catalog_names.CatalogNames.offered_names`; else its digest alias): 11 exactly as
    written, 10 in another case, else 0."""
    asked = query.strip()
    offered = (offered_as or {}).get(spec.name) or alias_for(spec.name)
    return (11 if asked in (spec.name, offered) else
            10 if _fold(asked) in (_fold(spec.name), _fold(offered)) else 0)


def rank(query: str, specs: Sequence[ToolSpec], offered: Mapping[str, str] | None = None) -> list[tuple[int, ToolSpec]]:
    """The tools matching ``query`` (score above 0), best first; ties by name (``offered``: the
    names the tools are offered under, as :func:`named` takes them)."""
    scored = [(score(query, s, offered), s) for s in specs]
    return sorted([x for x in scored if x[0] > 0], key=lambda x: (-x[0], x[1].name))
