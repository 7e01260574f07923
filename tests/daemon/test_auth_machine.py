"""F-API-2, F-API-3: pairing, credentials and trust driven in any order against one real daemon.

A Hypothesis ``RuleBasedStateMachine`` over the daemon of this suite's ``daemon_factory`` (in
process, on a loopback port 0) and its pair file. Its rules: a pairing request (``POST
/pair/requests``) from a new or a known client id, with ids and names valid and invalid; approve
with or without ``--strong-trust`` (a re-approve re-issues); revoke; an outside edit of the pair
file, each an atomic replace (a record copied under another id, another record's fields copied into
one, ``isVerified`` and device fields added, a trust level edited by hand, a record removed, a
record duplicated — an invalid file — and its repair, the file rewritten as it was); a client
revoked or removed that asks again at once, before any other request; a read route (``GET
/projects``), a write route (``POST /projects``) and the SSE stream with every credential issued in
the example (current, re-issued away, revoked, read-only, strong, tampered with) and malformed and
missing ones. Approve and revoke run the real ``lens pair`` command (another process) or
:class:`~runtime.pairing.PairStore`, which that command calls, as drawn; ``lens pair list`` runs as
a process at the end of every third example, and its own function in this process after every rule.

The machine keeps its own model of the file (each record's status, trust, and which credential its
hash was issued for, if any) and of who holds which right: a credential is good while its client's
record is approved, with the trust it was issued with and the hash issued with it, in a valid file.
After every rule: each credential's answer on the read route (``/whoami``: who it is, and its
trust) is the model's, status and error code; every stream held open by a credential the model says
is no longer good has ended with ``stream.end`` and the reason (revoked, or the pair file invalid),
waited for by a bounded poll; the pair file and everything beside it hold no credential or piece of
one, only hashes; what ``lens pair list`` prints is the model's records; no answer and no log line
of the daemon holds a credential or a piece of one. A write with a strong credential is read back
on every stream still open.

The draws never depend on the state (an index, taken modulo what the state offers), so Hypothesis
can replay them. Three rules (pairing, an outside edit, requests), each drawing what it does, so
that each takes about a third of the steps. See docs/decisions.md, "A state machine over pairing,
credentials and trust".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any

import httpx2
import trio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from runtime.pairing import PairFileInvalid, PairStore
from runtime.servecli import cmd_pair_list

from .conftest import API, LIMIT, Daemon, DaemonFactory, SseMessage, SseStream, run_lens, wait_until

MAX_EXAMPLES = int(os.environ.get("LENS_MACHINE_EXAMPLES", 20))
STEPS = int(os.environ.get("LENS_MACHINE_STEPS", 16))
PICKUP = 3.0  # seconds: the bound on the daemon (its streams) taking a change of the file (spec: 1 s)
PIECE = 12  # a leak is a credential whole or any piece of it this long

CLIENTS = ["phone", "laptop", "ci.runner-1", "tab_2"]
BAD_IDS: list[Any] = ["", "a b", "x" * 65, "naïve", "../pair", 7, None]
BAD_NAMES: list[Any] = ["\x1b[31mred", "n" * 201, 3, "line\nbreak"]
DEVICE_FIELDS = {"isVerified": True, "verified": True, "deviceId": "c0ffee-device", "trusted": True,
                 "platform": "ios"}
MALFORMED = ["truncated", "one more", "flipped", "no prefix", "fresh", "basic", "empty bearer", "missing"]


# --------------------------------------------------------------------------- the model


@dataclass
class Token:
    value: str
    client: str
    trust: str  # as issued: "read" | "strong"
    number: int  # the order of issue in the example


@dataclass
class Rec:
    """A record of the pair file as the model has it: ``issued`` is the token its hash was made
    for (``None``: no hash), which may be another client's (a hash copied from its record)."""

    status: str = "pending"
    trust: str = "read"
    issued: Any = None
    name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Held:
    """An SSE stream held open by a background task."""

    token: Token
    messages: list[SseMessage] = field(default_factory=list)
    ended: bool = False
    cancel: trio.CancelScope = field(default_factory=trio.CancelScope)
    expect_end: str | None = None  # the reason it must end with, once the model says so


class Host:
    """The trio side: the daemon, the test's nursery, and the log lines the daemon wrote."""

    def __init__(self, d: Daemon, nursery: trio.Nursery, token: trio.lowlevel.TrioToken) -> None:
        self.d, self.nursery, self.token = d, nursery, token
        self.log: list[str] = []
        self.answers: list[str] = []
        self.examples = 0
        self.workspace = d.root / "workspaces" / "w"
        self.workspace.mkdir(parents=True, exist_ok=True)

    def run(self, fn: Any, *args: Any) -> Any:
        return trio.from_thread.run(fn, *args, trio_token=self.token)

    async def request(self, method: str, path: str, header: str | None, body: Any = None) -> httpx2.Response:
        headers = {} if header is None else {"Authorization": header}
        kw: dict[str, Any] = {}
        if body is not None:
            kw["content"] = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        r = await self.d.client.request(method, API + path, headers=headers, **kw)
        self.answers.append(r.text)
        return r

    async def hold(self, held: Held, header: str, opened: trio.Event, first: list[Any]) -> None:
        try:
            with held.cancel:
                async with self.d.client.stream("GET", API + "/events/stream", headers={"Authorization": header},
                                                timeout=httpx2.Timeout(LIMIT, read=None)) as resp:
                    if resp.status_code != 200:
                        first.append((resp.status_code, (await resp.aread()).decode()))
                        return
                    first.append((200, ""))
                    stream = SseStream(resp.aiter_raw())
                    opened.set()
                    while (msg := await stream.next(timeout=math.inf)) is not None:
                        held.messages.append(msg)
        finally:
            held.ended = True
            opened.set()


class LogLines(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage() + (record.exc_text or ""))


def pieces(value: str) -> set[str]:
    return {value[i:i + PIECE] for i in range(len(value) - PIECE + 1)}


def pick(seq: list[Any], i: int) -> Any:
    return seq[i % len(seq)]


class AuthMachine(RuleBasedStateMachine):
    host: Host

    @initialize(strong=st.booleans(), cli=st.booleans())
    def start(self, strong: bool, cli: bool) -> None:
        """An empty pair file, then clients paired: one strong, one read-only (the first through
        the real command, or not, as drawn), one pending."""
        self.d = self.host.d
        self.pair_path = self.d.pair_path
        self.records: dict[str, Rec] = {}  # in the file's order
        self.valid = True
        self.tokens: list[Token] = []
        self.held: list[Held] = []
        self.copies = 0
        self.projects = 0
        self._write_file({"version": 1, "clients": []})
        for cid, name in (("phone", "Phone"), ("laptop", "Laptop"), ("tab_2", "Tablet")):
            r = self.host.run(self.host.request, "POST", "/pair/requests", None, {"clientId": cid, "name": name})
            assert r.status_code == 202, r.text
            self.records[cid] = Rec(name=name)
        self.approve(0, strong, cli, False)
        self.approve(1, not strong, False, False)

    def teardown(self) -> None:
        if not hasattr(self, "d"):
            return

        async def close() -> None:
            for h in self.held:
                h.cancel.cancel()
            await wait_until(self._all_ended, LIMIT, "the held streams to close")
            self.host.examples += 1
            if self.host.examples % 3 == 1:  # (the real `lens pair list`, another process: ~0.5 s)
                out = await run_lens(self.d.root, "pair", "list", check=False)
                if not self.valid:
                    assert out.returncode == 2 and "PAIR_FILE_INVALID" in out.stderr, out
                else:
                    assert out.returncode == 0, out
                    self._check_list_output(out.stdout)

        self.host.run(close)

    async def _all_ended(self) -> bool:
        return all(h.ended for h in self.held)

    # ------------------------------------------------------------------ the model's answers

    def good(self, tok: Token) -> bool:
        rec = self.records.get(tok.client)
        return (self.valid and rec is not None and rec.status == "approved" and rec.trust == tok.trust
                and rec.issued is tok)

    def credentials(self) -> list[tuple[str, str | None, Token | None]]:
        """(label, Authorization header or None, the token it is, if any): every token issued in
        the example, and the malformed and missing ones."""
        out: list[tuple[str, str | None, Token | None]] = [
            (f"token {t.number} of {t.client} ({t.trust})", f"Bearer {t.value}", t) for t in self.tokens]
        base = self.tokens[-1].value if self.tokens else "lens_" + "A" * 43
        for kind in MALFORMED:
            out.append((kind, malformed(kind, base), None))
        return out

    def expected(self, header: str | None, tok: Token | None) -> tuple[int, str | None]:
        if header is None or not header.startswith("Bearer ") or not header[7:].strip():
            return 401, "AUTH_REQUIRED"
        if not self.valid:
            return 503, "PAIR_FILE_INVALID"
        if tok is None or not self.good(tok):
            return 401, "AUTH_INVALID"
        return 200, None

    # ------------------------------------------------------------------ the pair file

    def _read_file(self) -> dict[str, Any]:
        return json.loads(self.pair_path.read_bytes())

    def _write_file(self, data: dict[str, Any]) -> None:
        """As an editor saves: a new file beside it, renamed over it."""
        tmp = self.pair_path.with_name("pair.json.edit~")
        tmp.write_bytes(json.dumps(data, indent=2).encode())
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.pair_path)

    def _edit(self, change: Any) -> None:
        data = self._read_file()
        change(data["clients"])
        self._write_file(data)

    def _record_of(self, clients: list[dict[str, Any]], cid: str) -> dict[str, Any]:
        return next(c for c in clients if c["clientId"] == cid)

    # ------------------------------------------------------------------ rules: pairing

    def pairing_request(self, i: int, new: bool, bad_id: int, bad_name: int, extra: bool) -> None:
        known = list(self.records)
        cid: Any = pick(CLIENTS, i) if new or not known else pick(known, i)
        name: Any = f"device {i}"
        if bad_id >= 0:
            cid = BAD_IDS[bad_id]
        if bad_name >= 0:
            name = BAD_NAMES[bad_name]
        body = {"clientId": cid, "name": name} | (DEVICE_FIELDS | {"trust": "strong", "status": "approved"}
                                                  if extra else {})
        r = self.host.run(self.host.request, "POST", "/pair/requests", None, body)
        if not isinstance(cid, str) or not isinstance(name, str):  # (a field of the wrong type: the body's shape)
            assert answer_of(r) == (422, "VALIDATION_FAILED"), (body, r.text)
            return
        if bad_id >= 0 or bad_name >= 0:
            assert answer_of(r) == (400, "PAIRING_INVALID"), (body, r.text)
            return
        if not self.valid:
            assert r.status_code == 503 and error_code(r) == "PAIR_FILE_INVALID", r.text
            return
        assert r.status_code == 202 and r.json() == {"clientId": cid, "status": "pending"}, r.text
        rec = self.records.get(cid)
        if rec is None:
            self.records[cid] = Rec(name=name)
        elif rec.status == "revoked":
            rec.status, rec.name, rec.issued, rec.extra = "pending", name, None, {}

    def _client(self, i: int, unknown: bool) -> str:
        """A client id the file holds, or (``unknown``, or none held) one it does not."""
        known = list(self.records)
        if unknown or not known:
            return pick([c for c in CLIENTS + ["stranger"] if c not in known] or ["stranger"], i)
        return pick(known, i)

    def _refused(self, cid: str, ok: bool, stderr: str) -> bool:
        """Whether an approve or revoke of ``cid`` had to be refused: an invalid file is named
        (PAIR_FILE_INVALID) before a client the file does not hold (CLIENT_NOT_FOUND)."""
        if not self.valid:
            assert not ok and "PAIR_FILE_INVALID" in stderr, stderr
            return True
        if cid not in self.records:
            assert not ok and "CLIENT_NOT_FOUND" in stderr, stderr
            return True
        return False

    def approve(self, i: int, strong: bool, cli: bool, unknown: bool) -> None:
        cid = self._client(i, unknown)
        if cli:
            args = ["pair", "approve", "--client", cid] + (["--strong-trust"] if strong else [])
            out = self.host.run(lambda: run_lens(self.d.root, *args, check=False))
            ok, stderr, value = out.returncode == 0, out.stderr, out.stdout.strip().splitlines()[-1:]
            self.host.answers.append(out.stderr)  # (what the command says on stderr holds no credential either)
        else:
            try:
                value, ok, stderr = [PairStore(self.pair_path).approve(cid, strong=strong)], True, ""
            except Exception as exc:  # noqa: BLE001 - the code is checked below
                ok, stderr, value = False, f"{getattr(exc, 'code', type(exc).__name__)}: {exc}", []
        if self._refused(cid, ok, stderr):
            return
        assert ok and value and value[0].startswith("lens_"), stderr
        tok = Token(value[0], cid, "strong" if strong else "read", len(self.tokens))
        assert all(t.value != tok.value for t in self.tokens)
        self.tokens.append(tok)
        rec = self.records[cid]
        rec.status, rec.trust, rec.issued, rec.extra = "approved", tok.trust, tok, {}
        self._drop_extra()

    def revoke(self, i: int, cli: bool, unknown: bool) -> None:
        cid = self._client(i, unknown)
        if cli:
            out = self.host.run(lambda: run_lens(self.d.root, "pair", "revoke", "--client", cid, check=False))
            ok, stderr = out.returncode == 0, out.stderr
            self.host.answers += [out.stdout, out.stderr]
        else:
            try:
                PairStore(self.pair_path).revoke(cid)
                ok, stderr = True, ""
            except Exception as exc:  # noqa: BLE001 - the code is checked below
                ok, stderr = False, f"{getattr(exc, 'code', type(exc).__name__)}: {exc}"
        if self._refused(cid, ok, stderr):
            return
        assert ok, stderr
        rec = self.records[cid]
        if rec.status == "revoked":  # (revoked already: nothing changes, the file is not written)
            return
        rec.status, rec.issued, rec.extra = "revoked", None, {}
        self._drop_extra()

    def _drop_extra(self) -> None:
        """A write of the file (approve, revoke, a pairing request) drops the fields no record has."""
        for rec in self.records.values():
            rec.extra = {}

    # ------------------------------------------------------------------ rules: edits from outside

    # Three rules, each drawing what it does: Hypothesis draws rules evenly (but for those it
    # leaves out of an example), so pairing, edits and requests each take about a third of the steps.

    @rule(kind=st.sampled_from(["request", "approve", "revoke", "again"]), i=st.integers(0, 100), new=st.booleans(),
          bad_id=st.integers(-3, len(BAD_IDS) - 1), bad_name=st.integers(-4, len(BAD_NAMES) - 1),
          extra=st.booleans(), strong=st.booleans(), cli=st.sampled_from([False, False, False, True]))
    def pairing(self, kind: str, i: int, new: bool, bad_id: int, bad_name: int, extra: bool, strong: bool,
                cli: bool) -> None:
        """A pairing request; approve or revoke (``new``: a client id the file does not have); a
        client revoked or removed asking again at once."""
        if kind == "request":
            self.pairing_request(i, new, bad_id, bad_name, extra)
        elif kind == "approve":
            self.approve(i, strong, cli, new)
        elif kind == "revoke":
            self.revoke(i, cli, new)
        elif self.valid and self.records:
            self.asks_again_at_once(i, extra)

    @rule(route=st.sampled_from(["read", "write", "stream"]))
    def requests(self, route: str) -> None:
        {"read": self.read_route, "write": self.write_route, "stream": self.open_streams}[route]()

    @rule(kind=st.sampled_from(["copy", "copy fields", "verified", "trust", "remove", "duplicate", "rewrite"]),
          i=st.integers(0, 100), j=st.integers(1, 100), approved=st.booleans())
    def outside_edit(self, kind: str, i: int, j: int, approved: bool) -> None:
        """An edit of the pair file by hand (an atomic replace); while the file is invalid, its repair."""
        if not self.valid:
            self.repair()
        elif not self.records or kind == "rewrite" or (kind == "copy fields" and len(self.records) < 2):
            self.rewrite_as_it_was()
        else:
            {"copy": lambda: self.copy_record_under_a_new_id(i),
             "copy fields": lambda: self.copy_fields_into_another_record(i, j),
             "verified": lambda: self.mark_verified(i, approved), "trust": lambda: self.edit_trust_by_hand(i),
             "remove": lambda: self.remove_record(i), "duplicate": lambda: self.duplicate_record(i)}[kind]()

    def copy_record_under_a_new_id(self, i: int) -> None:
        src = pick(list(self.records), i)
        self.copies += 1
        new = f"copy-{self.copies}"

        def change(clients: list[dict[str, Any]]) -> None:
            rec = dict(self._record_of(clients, src), clientId=new)
            clients.append(rec | DEVICE_FIELDS)

        self._edit(change)
        s = self.records[src]
        self.records[new] = Rec(s.status, s.trust, s.issued, s.name, dict(DEVICE_FIELDS))

    def copy_fields_into_another_record(self, i: int, j: int) -> None:
        names = list(self.records)
        src = pick(names, i)
        dst = pick([n for n in names if n != src], j)

        def change(clients: list[dict[str, Any]]) -> None:
            s, d = self._record_of(clients, src), self._record_of(clients, dst)
            for key in ("status", "trust", "credentialHash", "approvedAt"):
                d.pop(key, None)
                if key in s:
                    d[key] = s[key]
            d.update(DEVICE_FIELDS)

        self._edit(change)
        s, d = self.records[src], self.records[dst]
        d.status, d.trust, d.issued = s.status, s.trust, s.issued
        d.extra = dict(DEVICE_FIELDS)

    def mark_verified(self, i: int, approved: bool) -> None:
        """``isVerified: true`` and device fields added to a record (a pending one marked approved too)."""
        cid = pick(list(self.records), i)
        rec = self.records[cid]
        promote = approved and rec.status == "pending"

        def change(clients: list[dict[str, Any]]) -> None:
            c = self._record_of(clients, cid)
            c.update(DEVICE_FIELDS)
            if promote:
                c.update(status="approved", trust="strong")

        self._edit(change)
        rec.extra = dict(DEVICE_FIELDS)
        if promote:
            rec.status, rec.trust = "approved", "strong"

    def edit_trust_by_hand(self, i: int) -> None:
        cid = pick(list(self.records), i)
        rec = self.records[cid]
        other = "read" if rec.trust == "strong" else "strong"

        def change(clients: list[dict[str, Any]]) -> None:
            self._record_of(clients, cid)["trust"] = other

        self._edit(change)
        rec.trust = other

    def remove_record(self, i: int) -> None:
        cid = pick(list(self.records), i)
        self._edit(lambda clients: clients.remove(self._record_of(clients, cid)))
        del self.records[cid]

    def duplicate_record(self, i: int) -> None:
        """The same client twice (a copied device entry): the file is invalid, every credential refused."""
        cid = pick(list(self.records), i)
        self._edit(lambda clients: clients.append(dict(self._record_of(clients, cid))))
        self.valid = False
        self.duplicate = cid

    def repair(self) -> None:
        def change(clients: list[dict[str, Any]]) -> None:
            last = max(n for n, c in enumerate(clients) if c["clientId"] == self.duplicate)
            del clients[last]

        self._edit(change)
        self.valid = True

    def rewrite_as_it_was(self) -> None:
        self._write_file(self._read_file())

    def asks_again_at_once(self, i: int, remove: bool) -> None:
        """A client revoked (``lens pair revoke``'s function) or removed by hand asks to pair again
        at once, before any other request: it is recorded as pending."""
        cid = pick(list(self.records), i)
        if remove:
            self._edit(lambda clients: clients.remove(self._record_of(clients, cid)))
        else:
            PairStore(self.pair_path).revoke(cid)
        r = self.host.run(self.host.request, "POST", "/pair/requests", None, {"clientId": cid, "name": "again"})
        assert r.status_code == 202, r.text
        if remove:  # (a new record, at the end; a revoked one keeps its place)
            del self.records[cid]
        self.records[cid] = Rec(name="again")
        self._drop_extra()

    # ------------------------------------------------------------------ rules: requests

    def read_route(self) -> None:
        for label, header, tok in self.credentials():
            r = self.host.run(self.host.request, "GET", "/projects", header)
            self._check_answer(r, self.expected(header, tok), label)

    def write_route(self) -> None:
        """Every credential tries a write; what a strong one wrote, every stream still open reads."""
        for label, header, tok in self.credentials():
            self.projects += 1
            body = {"name": f"m{self.projects}", "workspace": str(self.host.workspace)}
            r = self.host.run(self.host.request, "POST", "/projects", header, body)
            status, code = self.expected(header, tok)
            if status == 200:
                assert tok is not None
                status, code = (201, None) if tok.trust == "strong" else (403, "FORBIDDEN")
            self._check_answer(r, (status, code), label)
            if r.status_code == 201:
                seq = r.json()["seq"]

                async def read_back() -> None:
                    for h in self.held:
                        if not h.ended and h.expect_end is None:
                            await wait_until(lambda h=h: _seen(h, seq), LIMIT,
                                             f"a stream of {h.token.client} reading {seq}")

                self.host.run(read_back)

    def open_streams(self) -> None:
        """A stream for every credential: held open for a good one without one open (four at most),
        refused as the other routes refuse for the rest."""
        for label, header, tok in self.credentials():
            status, code = self.expected(header, tok)
            if status != 200:
                r = self.host.run(self.host.request, "GET", "/events/stream", header)
                self._check_answer(r, (status, code), f"stream of {label}")
                continue
            assert tok is not None and header is not None
            if any(h.token is tok and not h.ended for h in self.held) or sum(not h.ended for h in self.held) >= 4:
                continue
            held, opened, first = Held(tok), trio.Event(), []

            async def start(held: Held = held, header: str = header, opened: trio.Event = opened,
                            first: list[Any] = first) -> None:
                self.host.nursery.start_soon(self.host.hold, held, header, opened, first)
                with trio.fail_after(LIMIT):
                    await opened.wait()

            self.host.run(start)
            assert first and first[0][0] == 200, (label, first)
            self.held.append(held)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def answers_are_the_models(self) -> None:
        if not hasattr(self, "d"):
            return

        async def check() -> None:
            for label, header, tok in self.credentials():
                want = self.expected(header, tok)

                async def matches(header: str | None = header, tok: Token | None = tok) -> bool:
                    r = await self.host.request("GET", "/whoami", header)
                    return answer_of(r) == want and (want[0] != 200 or tok is None or r.json()["clientId"] == tok.client
                                                     and r.json()["trust"] == tok.trust)

                try:
                    await wait_until(matches, PICKUP, label)
                except AssertionError:
                    r = await self.host.request("GET", "/whoami", header)
                    raise AssertionError(f"{label}: {answer_of(r)} ({r.text}), the model says {want}") from None

        self.host.run(check)

    @invariant()
    def streams_end_when_their_credential_goes(self) -> None:
        if not hasattr(self, "d"):
            return
        for h in self.held:
            if h.expect_end is None and not self.good(h.token):
                h.expect_end = "pair file invalid" if not self.valid else "credential revoked"

        async def ended() -> bool:
            return all(h.ended for h in self.held if h.expect_end is not None)

        self.host.run(lambda: wait_until(ended, PICKUP, "the streams of credentials gone to end"))
        for h in self.held:
            if h.expect_end is not None:
                ends = [m for m in h.messages if m.event == "stream.end"]
                assert len(ends) == 1 and ends[0].json()["reason"] == h.expect_end, (h.token, h.messages[-3:])
            else:
                assert not h.ended, f"the stream of {h.token} ended: {h.messages[-3:]}"

    @invariant()
    def the_file_holds_no_credential(self) -> None:
        if not hasattr(self, "d"):
            return
        secrets = set().union(*(pieces(t.value) for t in self.tokens))
        for path in self.pair_path.parent.iterdir():
            if path.is_file():
                text = path.read_bytes().decode("utf-8", "replace")
                assert not any(p in text for p in secrets), f"{path.name} holds a piece of a credential"
        if self.valid:
            for c in self._read_file()["clients"]:
                h = c.get("credentialHash")
                assert h is None or (len(h) == 64 and set(h) <= set("0123456789abcdef")), c

    @invariant()
    def the_list_is_the_models(self) -> None:
        """What ``lens pair list`` prints (its own function, in this process) is the model's."""
        if not hasattr(self, "d"):
            return
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                cmd_pair_list(argparse.Namespace(config=self.d.config_path))
        except PairFileInvalid as exc:
            assert not self.valid, exc
            return
        assert self.valid, out.getvalue()
        self._check_list_output(out.getvalue())

    @invariant()
    def nothing_says_a_credential(self) -> None:
        if not hasattr(self, "d"):
            return
        secrets = set().union(*(pieces(t.value) for t in self.tokens))
        said = self.host.answers + self.host.log + self.d.lines
        for h in self.held:
            said += [m.data for m in h.messages]
        for text in said:
            assert not any(p in text for p in secrets), f"a piece of a credential in {text[:300]!r}"
        self.host.answers.clear()
        self.host.log.clear()

    # ------------------------------------------------------------------ helpers

    def listed(self) -> list[tuple[str, str, str]]:
        return [(cid, r.status, r.trust if r.status == "approved" else "-") for cid, r in self.records.items()]

    def _check_list_output(self, stdout: str) -> None:
        if not self.records:
            assert stdout.startswith("no clients in"), stdout
            return
        rows = [line.split()[:3] for line in stdout.splitlines()[1:]]
        assert [tuple(r) for r in rows] == self.listed(), (stdout, self.listed())

    def _check_answer(self, r: httpx2.Response, want: tuple[int, str | None], label: str) -> None:
        got = answer_of(r)
        if want[0] == 200 and r.status_code in (200, 201):
            return
        assert got == want, f"{label}: {got} ({r.text}), the model says {want}"


def _seen(h: Held, seq: int) -> Any:
    async def check() -> bool:
        return h.ended or any(m.id == seq for m in h.messages)

    return check()


def malformed(kind: str, base: str) -> str | None:
    token = {"truncated": base[:-1], "one more": base + "x",
             "flipped": base[:-1] + ("B" if base[-1] != "B" else "C"), "no prefix": base[len("lens_"):],
             "fresh": "lens_" + "Zq" * 21 + "w"}.get(kind)
    if token is not None:
        return f"Bearer {token}"
    return {"basic": "Basic dXNlcjpwYXNz", "empty bearer": "Bearer", "missing": None}[kind]


def error_code(r: httpx2.Response) -> str | None:
    try:
        return r.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def answer_of(r: httpx2.Response) -> tuple[int, str | None]:
    return r.status_code, (error_code(r) if r.status_code >= 400 else None)


async def test_pairing_credentials_and_trust_in_any_order(daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={"server": {"heartbeatSeconds": 2}})  # (a config file: `lens pair` reads it)
    async with trio.open_nursery() as nursery:
        host = Host(d, nursery, trio.lowlevel.current_trio_token())
        handler = LogLines(host.log)
        lens = logging.getLogger("lens")
        lens.addHandler(handler)
        level = lens.level
        lens.setLevel(logging.DEBUG)
        try:
            machine = type("Machine", (AuthMachine,), {"host": host})
            await trio.to_thread.run_sync(lambda: run_state_machine_as_test(
                machine, settings=settings(max_examples=MAX_EXAMPLES, stateful_step_count=STEPS)))
        finally:
            lens.removeHandler(handler)
            lens.setLevel(level)
            nursery.cancel_scope.cancel()
