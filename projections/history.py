"""The history projection: every agent's Full Context items of every project, in FTS5.

Items get the same ids as in :mod:`projections.session_state` (``c<seq>`` / ``c<seq>.<n>``), and
include what compaction later replaced, subagents' items and every task's. Items the user hid
(``context.edited`` op ``hide``) and sessions that were deleted are flagged and never returned.

A fork's Full Context holds its source's items up to the fork point under their ids; the index
holds each item once, under the session that recorded it (its *owner*), and ``history_lineage``
lists every fork's sources with the seq up to which it holds their items (forks of forks
included). An item is visible while any session holding it is live and has not hidden it
(``history_edits`` keeps every hide and unhide, so a fork's hides are read as of its fork point
and its own after it). A search filtered by a session finds what that session holds, reported
under it; an unfiltered one reports each item under its owner. Either way an item is one result.

Search (:class:`HistoryIndex`) is scoped to one project. Query syntax: words (all must match),
``"exact phrases"``, ``prefix*``, and ``OR``, ``AND`` and ``NOT`` in capitals between two terms
(:data:`OPERATORS`); user text is always quoted into the FTS grammar, so
operators and quotes in it are plain text. Items and queries are tokenized alike
(:mod:`projections.tokens`): Chinese, Japanese and Korean text is found by any run of its
characters, and full-width or other compatibility forms match their plain letters. Order: relevance (:func:`lens_rank`) then recency when
the query matches at most :data:`RANKED_LIMIT` items, recency alone beyond that (ranking every
match of a very common word costs too much); the mode depends only on the query's matches, and
paging continues after a context item id in that total order, so pages never skip or repeat.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import apsw

from events import types as t
from events.errors import quoted
from events.ids import unnamed_input_id
from events.reader import SEQ_MAX, SEQ_MIN, StoredEvent, StoredRow
from events.secrets import Secrets

from .projector import Projection
from .session_state import skill_command, text_of
from .snippets import SCAN_CHARS, Term, snippet
from .snippets import term as snippet_term
from .tokens import index_text

RANKED_LIMIT = 250
MAX_QUERY_BYTES = 4096
MAX_QUERY_TERMS = 32
# Words of all the terms together, as the index sees them: a run of CJK characters (a phrase of
# one word per character) or a quoted phrase is one term of many words, and FTS5's cost grows
# with the words (1,300 CJK characters took 7 s over 30k items; 64 took 0.17 s).
MAX_QUERY_WORDS = 64
MAX_LIMIT = 100
# The most bytes one history read returns (history_read's limit, as the tool and GET
# /history/items/{id} take it).
MAX_READ_BYTES = 1024 * 1024
# The index's tokenizer, as the FTS table is made with it and as queries are checked against it.
TOKENIZER = ("unicode61", ("remove_diacritics", "2"))


# A JSON \u escape not itself escaped (an even run of backslashes before it), with the low half
# of a surrogate pair when one follows.
_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9a-fA-F]{4})(?:\\u([dD][c-fC-F][0-9a-fA-F]{2}))?")


def readable_arguments(arguments: str) -> str:
    """A tool call's arguments as the history indexes them: the JSON as sent, with each ``\\u``
    escape of a character past ASCII written as that character (a model may escape every one:
    ``"caf\\u00e9"`` is found by "café"). ASCII escapes (a quote, a backslash, a control
    character) and a lone surrogate half stay as they are spelt, so the text stays the JSON's."""
    def one(m: re.Match[str]) -> str:
        backslashes, high, low = m.group(1), int(m.group(2), 16), m.group(3)
        if high < 0x80 or 0xDC00 <= high <= 0xDFFF:
            return m.group(0)
        if 0xD800 <= high <= 0xDBFF:
            if low is None:
                return m.group(0)
            return backslashes + chr(0x10000 + ((high - 0xD800) << 10) + (int(low, 16) - 0xDC00))
        tail = "" if low is None else "\\u" + low  # (a low half after no high one: kept as spelt)
        return backslashes + chr(high) + tail

    return _ESCAPE.sub(one, arguments) if "\\u" in arguments else arguments


def _text(parts: Sequence[t.ContentPart]) -> str:
    return text_of(parts)  # (the same text as the session's items: parts joined by a newline)


# Of an item's UTF-8 text read for its snippet: SCAN_CHARS characters of ASCII, fewer of other
# text (reading four times as much, to be sure of SCAN_CHARS characters of any text, doubled
# the search's p50: each hit's prefix is copied out of SQLite).
SCAN_BYTES = SCAN_CHARS


def _snippet_of(prefix: bytes, longer: bool, terms: list[Term], secrets: Secrets) -> str:
    """The snippet of an item whose text begins with the UTF-8 bytes ``prefix`` (``longer``:
    there is more); a character the byte cut split is left out. The text is scrubbed of
    ``secrets`` first (an item indexed before its key was known), and a prefix that ends in what
    could begin one ends before it, so that no window shows a piece of a key."""
    text = prefix.decode("utf-8", "ignore") if longer else prefix.decode("utf-8", "replace")
    if secrets:
        text = secrets.scrub_text(text)
        if longer:
            text = text[:len(text) - secrets.open_end(text)]
    return snippet(text, terms, more=longer)


def _iid(seq: int, n: int = 0) -> str:
    return f"c{seq}" if n == 0 else f"c{seq}.{n}"


class HistoryProjection(Projection):
    """``secrets``: the keys the daemon knows. Each item is indexed and stored scrubbed of them
    (as :meth:`Secrets.scrub_text` gives it), so that no search for a key or a piece of it
    finds the item; the set is recorded as a salted fingerprint, and an index built with
    another set is rebuilt (:class:`projections.projector.Projector`)."""

    name = "history"
    # 3: items indexed through projections.tokens.index_text (contentless FTS)
    # 4: the text parts of an input or tool result joined by a newline (were glued: "helloworld")
    # 5: each item's UTF-8 size and SHA-256 stored (read() hashed the whole text for every page)
    # 6: an input without a request id of its own, and a /skill: command's args, as the Full Context
    #    holds them; Thai, Lao, Khmer and Burmese indexed letter by letter, as Chinese (projections.tokens)
    # 7: forks' sources (history_lineage) and every hide and unhide (history_edits): a fork's
    #    inherited items are found under it, and stay visible while a session holding them is
    # 8: a tool call's \u escapes of characters past ASCII indexed as the characters (readable_arguments)
    version = 8
    needs_body = True
    tables = ("history_items", "history_fts", "history_inputs", "history_sessions", "history_lineage",
              "history_edits")

    def __init__(self, secrets: Secrets | None = None) -> None:
        self.secrets = secrets or Secrets()

    def fingerprint(self, salt: bytes) -> str:
        return self.secrets.fingerprint(salt)

    def _scrubbed(self, text: str) -> str:
        """``text`` scrubbed of the keys this index is built with (again: a no-op on text that
        was, as an input's held in ``history_inputs``)."""
        return self.secrets.scrub_text(text) if self.secrets else text

    def create(self, conn: apsw.Connection) -> None:
        conn.execute(
            "CREATE TABLE history_items(rowid INTEGER PRIMARY KEY, item_id TEXT NOT NULL UNIQUE, "
            "project_id TEXT, session_id TEXT, agent_id TEXT, task_id TEXT, role TEXT NOT NULL, "
            "seq INTEGER NOT NULL, text TEXT NOT NULL, tags TEXT NOT NULL, hidden INTEGER NOT NULL DEFAULT 0, "
            "size INTEGER NOT NULL, digest TEXT NOT NULL)"
        )
        conn.execute("CREATE INDEX history_items_session ON history_items(session_id, seq)")
        conn.execute(
            # Contentless: it indexes index_text() of an item, which differs from the stored text
            # (history_items.text) wherever the item holds unspaced scripts or compatibility forms.
            "CREATE VIRTUAL TABLE history_fts USING fts5(text, tags, content='', "
            f"tokenize='{TOKENIZER[0]} {' '.join(TOKENIZER[1])}')"
        )
        conn.execute(
            "CREATE TABLE history_inputs(session_id TEXT NOT NULL, request_id TEXT NOT NULL, text TEXT NOT NULL, "
            "PRIMARY KEY(session_id, request_id)) WITHOUT ROWID"
        )
        conn.execute(
            "CREATE TABLE history_sessions(session_id TEXT PRIMARY KEY, project_id TEXT, deleted INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID"
        )
        # A fork holds its sources' items up to ``upto`` (one row per source, its source's source
        # too); a session that is no fork has none, so the queries over it cost nothing then.
        conn.execute(
            "CREATE TABLE history_lineage(session_id TEXT NOT NULL, source_id TEXT NOT NULL, upto INTEGER NOT NULL, "
            "PRIMARY KEY(session_id, source_id)) WITHOUT ROWID"
        )
        conn.execute("CREATE INDEX history_lineage_source ON history_lineage(source_id, upto)")
        # Every hide (1) and unhide (0) of an item, by the session that made it: a fork sees its
        # sources' edits up to its fork point and its own after it, the last one winning.
        conn.execute(
            "CREATE TABLE history_edits(item_id TEXT NOT NULL, seq INTEGER NOT NULL, session_id TEXT NOT NULL, "
            "hide INTEGER NOT NULL, PRIMARY KEY(item_id, seq, session_id)) WITHOUT ROWID"
        )

    def drop(self, conn: apsw.Connection) -> None:
        conn.execute("DROP TABLE IF EXISTS history_fts")
        for table in ("history_items", "history_inputs", "history_sessions", "history_lineage", "history_edits"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")

    def dump(self, conn: apsw.Connection) -> list[tuple]:
        out: list[tuple] = [("history_items",)]
        out.extend(conn.execute("SELECT * FROM history_items ORDER BY rowid"))
        out.append(("history_sessions",))
        out.extend(conn.execute("SELECT * FROM history_sessions ORDER BY 1"))
        out.append(("history_inputs",))
        out.extend(conn.execute("SELECT * FROM history_inputs ORDER BY 1, 2"))
        out.append(("history_lineage",))
        out.extend(conn.execute("SELECT * FROM history_lineage ORDER BY 1, 2"))
        out.append(("history_edits",))
        out.extend(conn.execute("SELECT * FROM history_edits ORDER BY 1, 2, 3"))
        return out

    def apply(self, conn: apsw.Connection, rows: Sequence[StoredRow], events: Sequence[StoredEvent] | None) -> None:
        assert events is not None
        items: list[tuple] = []
        for se in events:
            ev = se.event
            sid = se.session_id
            if sid is None and isinstance(ev, _SESSION_KEYED):
                continue  # the writer never stores these without a session: an edited row
            base = (se.project_id, sid, se.agent_id or "main", se.task_id)
            if isinstance(ev, t.SessionCreated):
                conn.execute("INSERT OR REPLACE INTO history_sessions(session_id, project_id) VALUES (?, ?)", (sid, se.project_id))
                source, upto = ev.forked_from_session, ev.forked_from_seq
                if source is not None and upto is not None and source != sid:
                    # The fork holds its source's items up to the fork point, and what the source
                    # held of its own sources then (their items up to the earlier fork points).
                    conn.execute("INSERT OR REPLACE INTO history_lineage(session_id, source_id, upto) "
                                 "SELECT ?, source_id, MIN(upto, ?) FROM history_lineage "
                                 "WHERE session_id = ? AND source_id != ?", (sid, _clamped(upto), source, sid))
                    conn.execute("INSERT OR REPLACE INTO history_lineage(session_id, source_id, upto) VALUES (?, ?, ?)",
                                 (sid, source, _clamped(upto)))
            elif isinstance(ev, t.SessionDeleted):
                # Items of this batch first, or they would be inserted after the update, visible:
                # a rebuild (one long batch) brought a deleted session back into search.
                self._flush(conn, items)
                items = []
                conn.execute("UPDATE history_sessions SET deleted = 1 WHERE session_id = ?", (sid,))
                conn.execute("UPDATE history_items SET hidden = hidden | 2 WHERE session_id = ?", (sid,))
            elif isinstance(ev, t.InputSubmitted):
                # Filed as the session's Full Context files it: under ``seq:<n>`` when it has no
                # request id of its own (a job's report whose id was taken), and, for a
                # ``/skill:`` command, with the text the model sees (the args), not the command.
                command = skill_command(ev.content)
                # (held until placed, scrubbed already: projections.db holds no key it knows)
                conn.execute("INSERT OR REPLACE INTO history_inputs(session_id, request_id, text) VALUES (?, ?, ?)",
                             (sid, se.request_id or unnamed_input_id(se.seq),
                              self._scrubbed(_text(ev.content if command is None else command[1]))))
            elif isinstance(ev, t.InputPlaced):
                found = conn.execute("SELECT text FROM history_inputs WHERE session_id = ? AND request_id = ?",
                                     (sid, ev.input_request_id)).fetchall()
                if found:
                    items.append((_iid(se.seq), *base, "user", se.seq, found[0][0]))
                    conn.execute("DELETE FROM history_inputs WHERE session_id = ? AND request_id = ?", (sid, ev.input_request_id))
            elif isinstance(ev, t.InputWithdrawn):
                conn.execute("DELETE FROM history_inputs WHERE session_id = ? AND request_id = ?", (sid, ev.input_request_id))
            elif isinstance(ev, t.AgentStarted):
                if ev.prompt:
                    items.append((_iid(se.seq), *base, "user", se.seq, ev.prompt))
            elif isinstance(ev, t.ModelResponded):
                n = 0
                if ev.text:
                    items.append((_iid(se.seq), *base, "assistant", se.seq, ev.text))
                    n += 1
                for call in ev.tool_calls:
                    items.append((_iid(se.seq, n), *base, "tool_call", se.seq,
                                  f"{call.name} {readable_arguments(call.arguments)}"))
                    n += 1
            elif isinstance(ev, t.ModelFailed):
                if ev.partial_text:  # (an answer aborted or failed while it streamed: what the user saw of it)
                    items.append((_iid(se.seq), *base, "assistant", se.seq, ev.partial_text))
            elif isinstance(ev, t.ToolFinished):
                items.append((_iid(se.seq), *base, "tool_result", se.seq, _text(ev.content)))
            elif isinstance(ev, t.SkillLoaded):
                items.append((_iid(se.seq), *base, "system", se.seq, ev.instructions))
            elif isinstance(ev, t.InstructionAppended):
                items.append((_iid(se.seq), *base, "system", se.seq, ev.text))
            elif isinstance(ev, t.ContextCompacted):
                items.append((_iid(se.seq), *base, "summary", se.seq, ev.summary))
            elif isinstance(ev, t.ContextEdited) and ev.op in ("hide", "unhide"):
                self._flush(conn, items)
                items = []
                op = "hidden | 1" if ev.op == "hide" else "hidden & ~1"
                conn.executemany(f"UPDATE history_items SET hidden = {op} WHERE item_id = ? AND session_id = ?",
                                 [(i, sid) for i in ev.item_ids])
                # Every one, for the forks: a fork has its source's up to the fork point, and may hide
                # or unhide an item it holds of its source's (the UPDATE above only finds its own).
                conn.executemany("INSERT OR REPLACE INTO history_edits(item_id, seq, session_id, hide) VALUES (?, ?, ?, ?)",
                                 [(i, se.seq, sid, int(ev.op == "hide")) for i in dict.fromkeys(ev.item_ids)])
        self._flush(conn, items)

    def _flush(self, conn: apsw.Connection, items: list[tuple]) -> None:
        if not items:
            return
        for it in items:
            item_id, project_id, session_id, agent_id, task_id, role, seq, text = it
            text = self._scrubbed(text)  # (an event stored before its key was known holds it)
            tags = id_tags(project_id, session_id, agent_id, task_id)
            data = text.encode("utf-8")
            conn.execute(
                "INSERT INTO history_items(item_id, project_id, session_id, agent_id, task_id, role, seq, text, tags, "
                "size, digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (item_id, project_id, session_id, agent_id, task_id, role, seq, text, tags, len(data),
                 hashlib.sha256(data).hexdigest()))
            conn.execute("INSERT INTO history_fts(rowid, text, tags) VALUES (last_insert_rowid(), ?, ?)",
                         (index_text(text), tags))


def _clamped(seq: int) -> int:
    """A fork point as SQLite can hold it (only an edited row holds one outside; see the catalog)."""
    return max(SEQ_MIN, min(seq, SEQ_MAX))


# --------------------------------------------------------------------------- querying


def _hidden_in(holder: str) -> str:
    """SQL: whether the session ``holder`` (an SQL expression) has hidden the item ``i``: the last
    of the hides and unhides its Full Context has seen — its sources' up to its fork points, its
    own after."""
    return ("COALESCE((SELECT e.hide FROM history_edits e WHERE e.item_id = i.item_id "
            f"AND (e.session_id = {holder} OR EXISTS (SELECT 1 FROM history_lineage m WHERE m.session_id = {holder} "
            "AND m.source_id = e.session_id AND m.upto >= e.seq)) ORDER BY e.seq DESC LIMIT 1), 0)")


# An item ``i`` is visible while a session holding it is live and has not hidden it: its owner
# (``hidden`` 0), or a fork of it made at or after the item (looked up only when the owner hid the
# item or was deleted, and then one index probe when no fork holds it).
VISIBLE = ("(i.hidden = 0 OR EXISTS (SELECT 1 FROM history_lineage l JOIN history_sessions s "
           "ON s.session_id = l.session_id WHERE l.source_id = i.session_id AND l.upto >= i.seq "
           f"AND s.deleted = 0 AND NOT {_hidden_in('l.session_id')}))")


def id_tag(kind: str, value: str | None) -> str:
    """One FTS token standing for an id (ids hold separators the tokenizer would split on)."""
    return kind + hashlib.sha256((value or "").encode()).hexdigest()[:20]


# Events this projection files under their session: a row of one without a session id (only an
# edited log holds one) has nothing to be filed under, and is skipped.
_SESSION_KEYED = (t.SessionCreated, t.SessionDeleted, t.InputSubmitted, t.InputPlaced,
                  t.InputWithdrawn, t.ContextEdited)


def id_tags(project_id: str | None, session_id: str | None, agent_id: str | None, task_id: str | None) -> str:
    # Indexed beside the text so filters intersect doclists inside FTS5 instead of scanning matches.
    return " ".join([id_tag("p", project_id), id_tag("s", session_id), id_tag("a", agent_id), id_tag("t", task_id)])


class HistoryError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_TOKEN = re.compile(r'"([^"]*)"|(\S+)')
# Written in capitals between two terms: ``a OR b`` either, ``a AND b`` both (as ``a b``),
# ``a NOT b`` a without b. Elsewhere (first, last, beside another operator, quoted, lower case)
# they are words. Models write these to search tools, and read as words they matched nothing.
OPERATORS = frozenset({"AND", "OR", "NOT"})

QueryTerm = tuple[str, bool]  # (text, prefix)


@dataclass(frozen=True)
class Query:
    """A parsed query: every group of ``groups`` must match (one of its terms), no term of
    ``excluded`` may. ``groups`` is never empty."""

    groups: tuple[tuple[QueryTerm, ...], ...]
    excluded: tuple[QueryTerm, ...] = ()

    def terms(self) -> list[QueryTerm]:
        """The distinct terms, excluded ones included."""
        return list(dict.fromkeys([*(term for group in self.groups for term in group), *self.excluded]))


def _regex_words(text: str) -> int:
    """The words of ``text`` as the index cuts it, by Python's reading of what a letter is (the
    tokenizer's own count, :meth:`HistoryIndex._words`, where a connection is at hand)."""
    return len(_INDEX_WORD.findall(index_text(text)))


def _parse(query: str, count_words: Callable[[str], int] = _regex_words) -> Query:
    """The query's terms: ``"phrases"`` whole, ``word*`` prefixes, grouped by the operators.
    ``count_words``: how many of the index's tokens a term's text holds; a term of none is left
    out (it would be an empty phrase, which no item holds)."""
    if not isinstance(query, str):
        raise HistoryError("INVALID_ARGUMENT", "query must be a string")
    if "\0" in query:
        raise HistoryError("INVALID_ARGUMENT", "query must not contain NUL characters")
    if len(query.encode()) > MAX_QUERY_BYTES:
        raise HistoryError("QUERY_TOO_LONG", f"query is over {MAX_QUERY_BYTES} bytes")
    items: list[tuple[str, Any]] = []  # ("op", "OR") or ("term", (text, prefix)), in the query's order
    for m in _TOKEN.finditer(query):
        phrase, word = m.group(1), m.group(2)
        if phrase is not None:
            words = phrase.split()
            if words and count_words(phrase):  # ("!!!" holds no word: it would match nothing)
                items.append(("term", (" ".join(words), False)))
            continue
        if word in OPERATORS:
            items.append(("op", word))
            continue
        prefix = word.endswith("*") and len(word.rstrip("*")) > 0
        core = word.rstrip("*") if prefix else word
        core = core.replace('"', "")
        if not count_words(core):
            continue
        items.append(("term", (core, prefix)))
    for i, (kind, value) in enumerate(items):  # an operator needs a term on both sides
        if kind == "op" and not (0 < i < len(items) - 1 and items[i - 1][0] == "term" and items[i + 1][0] == "term"):
            items[i] = ("term", (value, False))
    groups: list[list[QueryTerm]] = []
    negated: list[bool] = []
    op = None
    for kind, value in items:
        if kind == "op":
            op = value
            continue
        if op == "OR":
            groups[-1].append(value)
        else:
            groups.append([value])
            negated.append(op == "NOT")
        op = None
    if not groups:
        raise HistoryError("INVALID_ARGUMENT", "query has no searchable words")
    # (a repeated term or group narrows nothing)
    alternatives = [tuple(dict.fromkeys(g)) for g in groups]
    parsed = Query(tuple(dict.fromkeys(g for g, no in zip(alternatives, negated) if not no)),
                   tuple(dict.fromkeys(t for g, no in zip(alternatives, negated) if no for t in g)))
    terms = parsed.terms()
    if len(terms) > MAX_QUERY_TERMS:
        raise HistoryError("QUERY_TOO_LONG", f"query has {len(terms)} distinct terms; at most {MAX_QUERY_TERMS}")
    words = sum(count_words(text) for text, _prefix in terms)
    if words > MAX_QUERY_WORDS:
        raise HistoryError("QUERY_TOO_LONG", f"query has {words} words; at most {MAX_QUERY_WORDS} (a character of "
                                             "Chinese, Japanese, Korean, Thai, Lao, Khmer or Burmese text is a word)")
    return parsed


# A word as the index's tokenizer (unicode61) cuts text that went through index_text: a run of
# letters and digits (with their combining marks).
_INDEX_WORD = re.compile(r"[^\W_]+")


def fts_query(query: str) -> str:
    """User text -> a safe FTS5 expression: every term quoted; ``"phrases"``; ``word*`` prefixes;
    the operators as FTS5 writes them."""
    return _fts_expression(_parse(query))


def _fts_term(term: QueryTerm) -> str:
    # Each term as the index saw its text (projections.tokens): a word of an unspaced script is
    # then the phrase of its characters.
    text, prefix = term
    return '"' + index_text(text).replace('"', '""') + '"' + ("*" if prefix else "")


def _fts_expression(parsed: Query) -> str:
    expr = " AND ".join(_fts_term(g[0]) if len(g) == 1 else "(" + " OR ".join(map(_fts_term, g)) + ")"
                        for g in parsed.groups)
    if parsed.excluded:
        expr = f"({expr}) NOT ({' OR '.join(map(_fts_term, parsed.excluded))})"
    return expr


def snippet_terms(query: str) -> list[Term]:
    """The query's terms as :func:`projections.snippets.snippet` matches them (an excluded term
    is not shown: no result holds it)."""
    return _snippet_terms(_parse(query))


def _snippet_terms(parsed: Query) -> list[Term]:
    shown = dict.fromkeys(term for group in parsed.groups for term in group)
    return [t for t in (snippet_term(text, prefix) for text, prefix in shown) if t is not None]


def _shown(value: str | None) -> str:
    """A client's value as an error message echoes it: quoted, at most 80 characters of it."""
    return quoted(value or "")


@dataclass(frozen=True)
class Hit:
    context_item_id: str
    project_id: str | None
    session_id: str | None
    agent_id: str | None
    task_id: str | None
    role: str
    seq: int
    snippet: str

    def to_json(self) -> dict[str, Any]:
        return {"contextItemId": self.context_item_id, "sessionId": self.session_id, "agentId": self.agent_id,
                "taskId": self.task_id, "role": self.role, "seq": self.seq, "snippet": self.snippet}


def lens_rank(api: apsw.FTS5ExtensionApi) -> float:
    """Relevance of one match: occurrences of the query's phrases in the item, length-normalised
    (BM25's term-frequency part). Lower is better, like ``bm25()``. Unlike ``bm25()`` it needs no
    corpus-wide document counts, which cost a scan of every common term's whole doclist."""
    hits = api.inst_count
    size = api.column_size(0) or 1
    return -(hits / (hits + 1.2 * (0.25 + 0.75 * size / 40.0)))


class HistoryIndex:
    """Read-side queries over the history projection (synchronous; one connection)."""

    def __init__(self, conn: apsw.Connection, secrets: Secrets | None = None) -> None:
        self.conn = conn
        # Keys the daemon knows: snippets and pages are scrubbed of them again. The index holds
        # each item's text scrubbed of the keys it was built with (HistoryProjection), the same
        # set as a rule; another set only until the daemon's next fold rebuilds it (a
        # `lens log rebuild` run with other keys in its environment).
        self.secrets = secrets or Secrets()
        conn.register_fts5_function("lens_rank", lens_rank)
        # Python takes some characters for letters that the tokenizer (an older Unicode table)
        # finds no token in once NFKC has been applied (U+FF9E, U+037A, U+FE70…): it decides.
        self._tokenizer = conn.fts5_tokenizer(TOKENIZER[0], list(TOKENIZER[1]))

    def _words(self, text: str) -> int:
        return len(self._tokenizer(index_text(text).encode(), apsw.FTS5_TOKENIZE_QUERY, None))

    def search(self, project_id: str, query: str, *, session_id: str | None = None, agent_id: str | None = None,
               task_id: str | None = None, after_item_id: str | None = None, limit: int = 20,
               cursor_name: str = "after_context_item_id",
               leave_out: str | None = None) -> tuple[list[Hit], str | None]:
        """``cursor_name``: how errors name ``after_item_id`` (the tool's argument, or the API's
        JSON field). ``leave_out``: an item id that is no match (the ``history_search`` call making
        the search): left out with the other conditions, so pages stay full and the ranked or
        recency mode counts the matches without it."""
        if not 1 <= limit <= MAX_LIMIT:
            raise HistoryError("INVALID_ARGUMENT", f"limit must be from 1 to {MAX_LIMIT}")
        parsed = _parse(query, self._words)
        terms, matcher = _fts_expression(parsed), _snippet_terms(parsed)
        # A fork's sources, whose items up to the fork points its Full Context holds too.
        sources: list[tuple[str, int]] = []
        if session_id is not None:
            sources = list(self.conn.execute("SELECT source_id, upto FROM history_lineage WHERE session_id = ?",
                                             (session_id,)))
        # Selective filters (session, agent, task) intersect inside FTS5 as tag tokens; the project,
        # which most rows share, is checked on the joined row (a huge tag doclist only slows AND).
        tags = [" OR ".join(chr(34) + id_tag(kind, v) + chr(34) for v in [val, *(s for s, _u in sources)])
                if kind == "s" else chr(34) + id_tag(kind, val) + chr(34)
                for kind, val in (("s", session_id), ("a", agent_id), ("t", task_id)) if val is not None]
        expr = f"text : ({terms})"
        if tags:
            expr += f" AND tags : ({' AND '.join('(' + x + ')' for x in tags)})"
        where = ["i.project_id = ?"]
        args: list[Any] = [project_id]
        if session_id is None:
            where.append(VISIBLE)
        elif not sources:
            where += ["i.session_id = ?", "i.hidden = 0"]
            args.append(session_id)
        else:
            # Its own items as its own; a source's up to the fork point, unless the fork (or its
            # sources before it) hid them or the fork was deleted.
            # (One lookup in history_lineage, not a condition per source: the statement's size
            # does not grow with a chain of forks, which past ~1,000 links passed SQLite's limit
            # on the depth of an expression.)
            held = ("EXISTS (SELECT 1 FROM history_lineage h WHERE h.session_id = ? AND h.source_id = i.session_id "
                    "AND h.upto >= i.seq)")
            where.append(f"((i.session_id = ? AND i.hidden = 0) OR ({held} AND NOT {_hidden_in('?')} "
                         "AND NOT EXISTS (SELECT 1 FROM history_sessions d WHERE d.session_id = ? AND d.deleted)))")
            args += [session_id] * 5
        for col, val in (("agent_id", agent_id), ("task_id", task_id)):
            if val is not None:
                where.append(f"i.{col} = ?")
                args.append(val)
        if leave_out is not None:
            where.append("i.item_id != ?")
            args.append(leave_out)
        cond = " AND ".join(where)
        # The text's scanned prefix, not FTS5's snippet(): see projections.snippets.
        # (as bytes: SQLite's substr() and length() of text stop at a NUL, which tool output holds)
        cols = ("i.rowid, i.item_id, i.project_id, i.session_id, i.agent_id, i.task_id, i.role, i.seq, "
                f"substr(CAST(i.text AS BLOB), 1, {SCAN_BYTES}), length(CAST(i.text AS BLOB)) > {SCAN_BYTES}")
        cursor_rowid = None
        if after_item_id is not None:
            found = self.conn.execute("SELECT rowid FROM history_items WHERE item_id = ? AND project_id = ?",
                                      (after_item_id, project_id)).fetchall()
            if not found:
                raise HistoryError("INVALID_ARGUMENT", f"{cursor_name} {_shown(after_item_id)} is not an item of this project")
            cursor_rowid = found[0][0]
        # One pass, newest first, up to RANKED_LIMIT + 1 matches with their relevance. CROSS JOIN keeps
        # FTS5 as the outer loop, so matches stream in rowid order and LIMIT stops early.
        head = list(self.conn.execute(
            "SELECT i.rowid, lens_rank(history_fts) FROM history_fts CROSS JOIN history_items i "
            f"ON i.rowid = history_fts.rowid WHERE history_fts MATCH ? AND {cond} "
            "ORDER BY history_fts.rowid DESC LIMIT ?", (expr, *args, RANKED_LIMIT + 1)))
        if len(head) <= RANKED_LIMIT:
            # Few matches: relevance first, then newest. The order depends only on the matches.
            ordered = [r[0] for r in sorted(head, key=lambda r: (r[1], -r[0]))]
            start = 0
            if cursor_rowid is not None:
                try:
                    start = ordered.index(cursor_rowid) + 1
                except ValueError:
                    raise HistoryError("INVALID_ARGUMENT",
                                       f"{cursor_name} {_shown(after_item_id)} is not a result of this query") from None
            wanted = ordered[start:start + limit + 1]
        elif cursor_rowid is None:
            wanted = [r[0] for r in head[:limit + 1]]  # many matches: newest first
        else:
            # The cursor must be a result of this query here too (it was refused only in the
            # ranked order; here any item of the project silently paged from its place).
            if not self.conn.execute(
                    "SELECT 1 FROM history_fts CROSS JOIN history_items i ON i.rowid = history_fts.rowid "
                    f"WHERE history_fts MATCH ? AND {cond} AND history_fts.rowid = ?",
                    (expr, *args, cursor_rowid)).fetchall():
                raise HistoryError("INVALID_ARGUMENT",
                                   f"{cursor_name} {_shown(after_item_id)} is not a result of this query")
            wanted = [r[0] for r in self.conn.execute(
                "SELECT i.rowid FROM history_fts CROSS JOIN history_items i ON i.rowid = history_fts.rowid "
                f"WHERE history_fts MATCH ? AND {cond} AND history_fts.rowid < ? "
                "ORDER BY history_fts.rowid DESC LIMIT ?", (expr, *args, cursor_rowid, limit + 1))]
        # The page's rows (the matching is done): their snippets are made in Python below.
        by_rowid: dict[int, tuple] = {}
        if wanted:
            marks = ", ".join("?" * len(wanted))
            for r in self.conn.execute(f"SELECT {cols} FROM history_items i WHERE i.rowid IN ({marks})", wanted):
                by_rowid[r[0]] = r
        page = [by_rowid[r] for r in wanted if r in by_rowid]
        more = len(page) > limit
        page = page[:limit]
        # Found through a filter, an item is reported under the filter's session (a fork's inherited
        # items are its own there); else under the session that recorded it.
        hits = [Hit(r[1], r[2], session_id or r[3], r[4], r[5], r[6], r[7],
                    _snippet_of(r[8], bool(r[9]), matcher, self.secrets)) for r in page]
        return hits, (hits[-1].context_item_id if more and hits else None)

    def read(self, item_id: str, *, project_id: str | None = None, offset: int = 0, limit: int = 16384) -> dict[str, Any]:
        rows = self.conn.execute(
            "SELECT item_id, project_id, session_id, agent_id, task_id, role, seq, size, digest, "
            f"NOT {VISIBLE}, rowid FROM history_items i WHERE item_id = ?", (item_id,)).fetchall()
        if not rows or rows[0][9] or (project_id is not None and rows[0][1] != project_id):
            raise HistoryError("HISTORY_ITEM_NOT_FOUND", f"no visible history item {_shown(item_id)}")
        _iid_, pid, sid, aid, tid, role, seq, size, digest, _h, rowid = rows[0]
        if offset < 0 or offset > size:
            # (the value quoted, as the tools' integer refusals quote theirs: one past the size is a
            # page counted wrongly, and the reader sees by how much)
            raise HistoryError("INVALID_ARGUMENT", f"offset must be from 0 to {size} (the item's size in bytes), "
                                                   f"got {offset}")
        if limit < 1 or limit > MAX_READ_BYTES:
            raise HistoryError("INVALID_ARGUMENT", f"limit must be from 1 to {MAX_READ_BYTES} bytes")
        # Only the page's bytes (and up to 4 more, to end on a whole character) are read, through
        # SQLite's incremental I/O on the stored UTF-8 text; its size and digest were stored with it.
        with self.conn.blob_open("main", "history_items", "text", rowid, False) as blob:
            blob.seek(offset)
            window = blob.read(min(size - offset, limit + 4))
        if offset < size and (window[0] & 0xC0) == 0x80:
            raise HistoryError("INVALID_ARGUMENT", f"offset {offset} falls inside a UTF-8 character")
        end = min(size, offset + limit)
        while end < size and (window[end - offset] & 0xC0) == 0x80:
            end -= 1
        if end == offset and offset < size:  # limit smaller than one character: return one whole
            end = offset + 1
            while end < size and (window[end - offset] & 0xC0) == 0x80:
                end += 1
        # Offsets, size and digest are those of the text the index holds (scrubbed of the keys it
        # was built with: see HistoryProjection). The page is scrubbed again, and one that ends in
        # what could begin a key ends before it (Secrets.scrub_page): no-ops for an index built
        # with this daemon's keys, a guard for one built with others.
        text, end, eof = self.secrets.scrub_page(window[:end - offset].decode("utf-8"), end, end >= size)
        return {
            "contextItemId": item_id, "sessionId": sid, "agentId": aid, "taskId": tid, "role": role, "seq": seq,
            "text": text, "offset": offset, "nextOffset": end, "eof": eof, "size": size, "digest": digest,
        }
