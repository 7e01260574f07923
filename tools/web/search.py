"""``web_search(query, num_results?, livecrawl?, type?, context_max_characters?)`` (F-TOOL-8).

``query`` is a non-blank string of at most :data:`MAX_QUERY_CHARS` characters.

The backend is configured (``webSearch`` in the server config): an Exa-compatible
``POST {baseUrl}/search`` answering ``{"results": [{title, url, publishedDate, author, text}]}``.
The arguments map onto its request::

    {"query": query, "numResults": num_results, "type": type,
     "contents": {"text": {"maxCharacters": context_max_characters}, "livecrawl": livecrawl}}

The key comes only from the environment variable ``webSearch.apiKeyEnv`` names (sent as
``x-api-key``; never logged, never in a result or an error: a backend's message quoting it,
whole, cut or masked, has it as ``[redacted]``). No backend, or its key variable
unset: ``WEB_SEARCH_NOT_CONFIGURED``. The whole call, DNS to the last byte, has
:data:`TIMEOUT_SECONDS` (``WEB_SEARCH_TIMEOUT``).

The backend is an endpoint the operator chose, not a URL from the model: it is not held to
``web_fetch``'s public-address rule (a search service on the local network is fine).

At most ``num_results`` results are shown, whatever the backend sends, each URL once (the first
result of it, the URL as sent), its title, date and author each on one line (line breaks in a
title could show the model a result the backend never sent).
``context_max_characters`` bounds the page text in the answer: each result's text is cut so
that all of them together hold at most that many characters (titles and URLs are always shown).
The other fields a backend sends are bounded too (:data:`FIELD_LIMITS`), so that no answer is
too large for the log to record: a title, author or date past its bound is cut (``…``), a URL
past its bound is left out (a cut URL names another page), and so is a URL with white space
inside (rewritten to one line it would name another page); the text says so after the result's
heading, and its structured result lists the fields in ``cut`` (present only then).
"""

from __future__ import annotations

import json
import math
import os
import ssl
from typing import Any, Mapping

import trio

from events.secrets import Secrets
from runtime.errors import shortened_json, shortened_names  # (imports nothing: no cycle)
from runtime.providers.redact import redact_key

from ..base import INT64, ToolContext, ToolError, ToolResult, ToolSpec
from ..workspace_tools import int_arg
from .address import Resolver, SystemResolver, parse_url, resolve
from .http import TlsOnDemand, request

TIMEOUT_SECONDS = 25
# A query's characters (as JSON Schema's maxLength counts them): history_search's bound in number,
# far past what a search box is typed with, and short enough that sending it and repeating it in
# the answer ("No results for …", the structured result's query) costs nothing.
MAX_QUERY_CHARS = 4096
MAX_RESULTS = 50
DEFAULT_RESULTS = 8
MAX_CONTEXT_CHARS = 1_048_576
DEFAULT_CONTEXT_CHARS = 10_000
# The backend's answer held in memory. Not every answer arguments in range may ask for: 50
# results of up to 1,048,576 characters each can be past it (RESPONSE_TOO_LARGE then says to ask
# for less); the answer shows at most context_max_characters of page text in all.
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
LIVECRAWL = ("fallback", "preferred")
TYPES = ("auto", "fast", "deep")
ERROR_EXCERPT_CHARS = 500
# A backend's field -> the characters of it shown: 50 results at these bounds are about 1 MB
# (twice: in the text and the structured result), far below the log's 32 MiB event. A URL's is
# RFC 9110's (section 4.1: at least 8,000 octets should be supported), so a usable URL fits.
FIELD_LIMITS = {"title": 1_000, "url": 8_192, "publishedDate": 100, "author": 1_000}


def check_arguments(args: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments with their defaults, or ``INVALID_ARGUMENT``."""
    extra = sorted(set(args) - {"query", "num_results", "livecrawl", "type", "context_max_characters"})
    if extra:
        raise ToolError("INVALID_ARGUMENT", f"web_search does not take {shortened_names(extra)}")
    if "query" not in args:
        raise ToolError("INVALID_ARGUMENT", "web_search needs 'query', a non-empty string")
    query = args["query"]
    if not isinstance(query, str) or not query.strip():
        raise ToolError("INVALID_ARGUMENT", f"web_search needs 'query', a non-empty string, got {shortened_json(query)}")
    if len(query) > MAX_QUERY_CHARS:
        raise ToolError("INVALID_ARGUMENT", f"query is {len(query):,} characters, more than {MAX_QUERY_CHARS:,}")
    out: dict[str, Any] = {"query": query}
    # (an optional argument sent as null is that argument left out: its default)
    out["num_results"] = int_arg(args, "num_results", DEFAULT_RESULTS, 1, MAX_RESULTS)
    out["context_max_characters"] = int_arg(args, "context_max_characters", DEFAULT_CONTEXT_CHARS, 1, MAX_CONTEXT_CHARS)
    for name, default, allowed in (("livecrawl", "fallback", LIVECRAWL), ("type", "auto", TYPES)):
        value = args.get(name)
        if value is None:
            value = default
        elif value not in allowed:
            raise ToolError("INVALID_ARGUMENT", f"{name} must be one of {', '.join(allowed)}, got {shortened_json(value)}")
        out[name] = value
    return out


# What asking for a result's text may cost at most in the backend's answer: 12 bytes a character
# (as JSON writes one escaped: \u001f, and one outside the BMP as a surrogate pair,
# \ud83d\ude00), and a result's title, URL and other fields besides.
ASKED_BYTES_PER_CHAR = 12
ASKED_BYTES_PER_RESULT = 4 * 1024


def _too_large_hint(a: dict[str, Any]) -> str:
    """What a RESPONSE_TOO_LARGE adds: the arguments that can go lower, when what they asked for
    could come near :data:`MAX_RESPONSE_BYTES`; otherwise (3 results of 1 character, say) that
    the backend sent more than was asked for (it ignored ``maxCharacters``), since asking for
    less would not help."""
    n, chars = a["num_results"], a["context_max_characters"]
    if n * (chars * ASKED_BYTES_PER_CHAR + ASKED_BYTES_PER_RESULT) < MAX_RESPONSE_BYTES:
        return f"; the backend sent more than was asked for (num_results {n}, context_max_characters {chars})"
    lower = [f"{what} ({name} {a[name]})" for what, name in (("fewer results", "num_results"),
                                                             ("less text per result", "context_max_characters"))
             if a[name] > 1]
    return "; ask for less: " + " or ".join(lower)


def web_search_tool(base_url: str | None, api_key_env: str | None, *, environ: Mapping[str, str] | None = None,
                    tls: ssl.SSLContext | None = None, resolver: Resolver | None = None) -> ToolSpec:
    """The ``web_search`` tool over the backend at ``base_url`` (``None``: not configured), its
    key read from ``environ`` (default ``os.environ``) under ``api_key_env`` at each call.
    ``resolver`` looks the backend's host up (default: a ``SystemResolver`` of its own)."""
    tls_store = TlsOnDemand(tls)
    lookup = resolver or SystemResolver()

    async def web_search(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        a = check_arguments(args)
        if base_url is None:
            raise ToolError("WEB_SEARCH_NOT_CONFIGURED",
                            "web search has no backend (the server config key webSearch.baseUrl is null)")
        key = None
        if api_key_env:
            key = (os.environ if environ is None else environ).get(api_key_env) or None
            if key is None:
                raise ToolError("WEB_SEARCH_NOT_CONFIGURED",
                                f"web search needs its API key in the environment variable {api_key_env}, "
                                f"which is not set")
            if not key.isascii() or not key.isprintable():
                raise ToolError("WEB_SEARCH_NOT_CONFIGURED",
                                f"the environment variable {api_key_env} holds characters an HTTP header cannot carry")
        url = parse_url(base_url.rstrip("/") + "/search", what="webSearch.baseUrl")
        payload = {"query": a["query"], "numResults": a["num_results"], "type": a["type"],
                   "contents": {"text": {"maxCharacters": a["context_max_characters"]}, "livecrawl": a["livecrawl"]}}
        headers = [("Content-Type", "application/json"), ("Accept", "application/json")]
        if key is not None:
            headers.append(("x-api-key", key))
        try:
            with trio.fail_after(TIMEOUT_SECONDS):
                addresses = await resolve(url, full_access=True, resolver=lookup)  # (a configured endpoint: see the docstring)
                resp = await request(url, addresses, method="POST", headers=headers,
                                     body=json.dumps(payload).encode(), max_body=MAX_RESPONSE_BYTES, tls=tls_store,
                                     secrets=ctx.secrets)
        except trio.TooSlowError:
            raise ToolError("WEB_SEARCH_TIMEOUT", f"the search backend did not answer within {TIMEOUT_SECONDS} s") from None
        except ToolError as exc:
            # (arguments in range may ask for more than is held: 50 results of up to 1,048,576
            # characters each is more than MAX_RESPONSE_BYTES; the model can ask for less)
            hint = _too_large_hint(a) if exc.code == "RESPONSE_TOO_LARGE" else ""
            raise ToolError(exc.code, _scrub(f"the search backend: {exc.message}{hint}", key)) from None
        if resp.status != 200:
            # (redacted before it is cut, the search key and the store's, so that a key at the
            # cut is judged whole: a tool's error is scrubbed of whole keys alone)
            excerpt = ctx.secrets.scrub_text(_scrub(resp.body[:4 * ERROR_EXCERPT_CHARS].decode("utf-8", errors="replace"), key))
            excerpt = excerpt[:ERROR_EXCERPT_CHARS].strip()
            raise ToolError("WEB_SEARCH_FAILED", _scrub(
                f"the search backend answered {resp.status} {resp.reason}".rstrip() + (f": {excerpt}" if excerpt else ""),
                key))
        results = _distinct(_results(resp.body))[:a["num_results"]]  # (a backend may send more than asked)
        text, listed = render(a["query"], results, a["context_max_characters"], ctx.secrets)
        return ToolResult.text(text, {"query": a["query"], "results": listed})

    return ToolSpec(
        "web_search",
        f"Search the web. query at most {MAX_QUERY_CHARS} characters; num_results 1-50 (default 8); "
        "type auto|fast|deep; livecrawl fallback|preferred "
        f"(fetch pages afresh); context_max_characters 1-{MAX_CONTEXT_CHARS} bounds the page text returned "
        f"(default {DEFAULT_CONTEXT_CHARS}).",
        {"type": "object", "properties": {
            "query": {"type": "string", "maxLength": MAX_QUERY_CHARS},
            "num_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS, "default": DEFAULT_RESULTS},
            "livecrawl": {"enum": list(LIVECRAWL), "default": "fallback"},
            "type": {"enum": list(TYPES), "default": "auto"},
            "context_max_characters": {"type": "integer", "minimum": 1, "maximum": MAX_CONTEXT_CHARS,
                                       "default": DEFAULT_CONTEXT_CHARS}},
         "required": ["query"], "additionalProperties": False},
        web_search,
        replay_safe=True,
    )


def _scrub(message: str, key: str | None) -> str:
    """``message`` with the key, whole, cut or masked, as ``[redacted]``: the rule a provider's
    errors follow (``redact_key``)."""
    return redact_key(message, key)


def _results(body: bytes) -> list[dict[str, Any]]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise ToolError("WEB_SEARCH_FAILED", "the search backend's answer is not JSON") from None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise ToolError("WEB_SEARCH_FAILED", "the search backend's answer has no 'results' list")
    return [r for r in results if isinstance(r, dict)]


def _field(r: dict[str, Any], name: str) -> str | None:
    value = r.get(name)
    if not isinstance(value, str) or not value.strip():
        return None
    # (JSON may spell a lone surrogate, "\ud800", which the log, being UTF-8, cannot store)
    value = value.strip()
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _one_line(r: dict[str, Any], name: str) -> str | None:
    """``_field`` on one line: each run of whitespace, line breaks included (``\r``, U+2028…), is
    one space. A title, date or author is shown on a line of its own, so a line break in one (a
    page's title is the page's to write) could show a result heading or a URL line the backend
    never sent. (A URL is never rewritten so: see :func:`_bounded`.)"""
    value = _field(r, name)
    return None if value is None else " ".join(value.split())


def _space_inside(url: str) -> str | None:
    """The first white space character inside ``url`` as ``U+XXXX``, or ``None``."""
    return next((f"U+{ord(c):04X}" for c in url if c.isspace()), None)


def _distinct(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``results`` with each URL once (the first): another would spend ``num_results`` and the
    page-text budget on a page already shown. Results without a URL are all kept."""
    seen: set[str] = set()
    out = []
    for r in results:
        url = _field(r, "url")  # (as sent, trimmed: a URL with white space inside is left out later)
        if url is not None:
            if url in seen:
                continue
            seen.add(url)
        out.append(r)
    return out


def _bounded(r: dict[str, Any], name: str, notes: dict[str, str]) -> str | None:
    """``_one_line`` held to :data:`FIELD_LIMITS`: past it a URL is left out, anything else cut
    with ``…``; either is told in ``notes`` (the structured result's name of the field -> a line).
    A URL with white space inside is left out too: rewritten to one line it would name another
    page (``a``, U+00A0, ``b`` is not ``a b``); ``_distinct`` judged it as sent."""
    if name == "url" and (url := _field(r, "url")) is not None and (space := _space_inside(url)):
        notes["url"] = f"[URL left out: it holds white space ({space}) inside]"
        return None
    value = _one_line(r, name)
    limit = FIELD_LIMITS[name]
    if value is None or len(value) <= limit:
        return value
    if name == "url":
        notes["url"] = f"[URL left out: {len(value):,} characters, past {limit:,}]"
        return None
    shown = "published_date" if name == "publishedDate" else name
    notes[shown] = f"[{shown} cut at {limit:,} of {len(value):,} characters]"
    return value[:limit - 1] + "…"


def _score(value: Any) -> int | float | None:
    """A result's ``score`` as the log can hold it: a number, finite (JSON as Python reads it
    has NaN and the infinities), an integer within 64 bits (JSON has no limit); else ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return value if INT64[0] <= value <= INT64[1] else None
    return value if math.isfinite(value) else None


def render(query: str, results: list[dict[str, Any]], budget: int,
           secrets: Secrets | None = None) -> tuple[str, list[dict[str, Any]]]:
    """(text for the model, structured results without page text). Page text in all results
    together is cut to ``budget`` characters, each scrubbed of ``secrets`` before the cut."""
    secrets = secrets or Secrets()
    if not results:
        return f"No results for {json.dumps(query, ensure_ascii=False)}.", []
    blocks, listed = [], []
    for i, r in enumerate(results, 1):
        notes: dict[str, str] = {}
        title, url = _bounded(r, "title", notes), _bounded(r, "url", notes)
        published, author = _bounded(r, "publishedDate", notes), _bounded(r, "author", notes)
        score = _score(r.get("score"))
        listed.append({"title": title, "url": url, "published_date": published, "author": author, "score": score})
        if notes:
            listed[-1]["cut"] = list(notes)
        lines = [f"## {i}. {title or url or '(untitled)'}", *notes.values()]
        if url:
            lines.append(f"URL: {url}")
        if published:
            lines.append(f"Published: {published}")
        if author:
            lines.append(f"Author: {author}")
        text = secrets.scrub_text(_field(r, "text") or "")
        if text and budget > 0:
            cut = text[:budget]
            budget -= len(cut)
            lines += ["", cut + ("…" if len(cut) < len(text) else "")]
        elif text:
            lines += ["", "[text left out: context_max_characters reached]"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks), listed
