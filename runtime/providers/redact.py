"""Secrets out of text: a key quoted by a server, whole, cut or masked, as ``[redacted]``.

Imports nothing of Lens, so the providers and the tools that call other services (web_search)
share one rule.
"""

from __future__ import annotations

import re

KEY_PIECE = 8  # this many of the key's characters in a row are a piece of it
MASKED_MIN = 4  # a masked form showing at least this many of the key's characters is the key's
_MASK = re.compile(r"\*+|\.{2,}|\u2026")  # what a provider puts in place of the hidden part


def redact_key(text: str, key: str | None) -> str:
    """``text`` with the key, and the words of it that quote part of it, as ``[redacted]``.

    A provider's error can quote the key whole, cut (``key=sk-proj-Q7mZ4kT1vB8n``, from a proxy's
    page) or masked as OpenAI's 401 does (``sk-proj-****…atA1``, DeepSeek's ``****atA1``). A word
    — a run of the characters a key or its mask is made of (letters, digits, the key's own
    punctuation, ``*`` and ``.``) — is replaced whole when it holds :data:`KEY_PIECE` characters
    of the key in a row, or when it has a mask (``*``, ``..``, ``…``) and what the mask leaves
    are pieces of the key, :data:`MASKED_MIN` characters or more in all. Shorter hints (a key's
    last four characters alone, ``sk-***``) are left: they cannot be told from ordinary words.
    """
    if not key:
        return text
    text = text.replace(key, "[redacted]")
    extra = "".join(sorted({ch for ch in key if not ch.isalnum()} | {"*", ".", "_", "-"}))
    word = re.compile(f"[\\w{re.escape(extra)}\u2026]+")
    grams = {key[i:i + KEY_PIECE] for i in range(len(key) - KEY_PIECE + 1)}

    def judge(m: re.Match[str]) -> str:
        w = m.group()
        stop = w.endswith(".") and not w.endswith("..") and not key.endswith(".")  # (a sentence's full stop)
        core = w[:-1] if stop else w
        if any(core[i:i + KEY_PIECE] in grams for i in range(len(core) - KEY_PIECE + 1)):
            return w.replace(core, "[redacted]", 1)
        shown = [p for p in _MASK.split(core) if p]
        if shown != [core] and shown and all(p in key for p in shown) and sum(map(len, shown)) >= MASKED_MIN:
            return w.replace(core, "[redacted]", 1)
        return w

    return word.sub(judge, text)
