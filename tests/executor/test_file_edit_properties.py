"""``patch_file`` and ``edit_file``'s ``edit`` mode against reference models of SPEC F-EXE-3..5.

The models below are written from the spec's words, not from ``tools.files``: a patch is hunks
(``@@`` or ``@@ <exact anchor line>``) of body lines prefixed space / ``+`` / ``-``; every hunk is
matched against the same original, uniquely and without overlap; ``*** End of File`` pins a hunk
to the end; a pure-add hunk is allowed only for an empty file and alone; untouched bytes are
preserved and added lines take the nearby line ending. Edits apply in order in memory, each an
exact match that must be unique unless ``replace_all``. Both return ``{path, changed,
units_applied, bytes_written}`` with ``bytes_written`` 0 when nothing changed.

Where the spec is silent the models take the choices docs/decisions.md records ("File edits by
property testing"): the anchor is one whole line that must occur once and the hunk matches after
it; "nearby" is the ending of the hunk's last original line before the added one, else the next
one, else the file's dominant ending; an unterminated last line stays unterminated when an added
line ends the file; a patch written with CRLF newlines reads as one written with LF (so no
generated line text ends with "\r"). When a call is refused for more than one reason the spec does not say which
is reported, so any of them is accepted (and the file must be unchanged).

Hypothesis drives the real executor process over gRPC: each test runs its examples in a worker
thread that calls the executor through ``trio.from_thread``. The limits (128 hunks or edits,
8 MiB of input, original and result) are also tested at their edges through the executor.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.executor_client import ExecutorClient, ExecutorToolError

from .test_tools import fails, sub  # noqa: F401  (sub is a fixture)

LF, CRLF = b"\n", b"\r\n"
MiB = 1024 * 1024
MAX_TEXT = 8 * MiB     # SPEC F-EXE-3: input, original and result each at most 8 MiB
MAX_UNITS = 128        # SPEC F-EXE-3/4: at most 128 edits / hunks


class Refused(Exception):
    """The model refuses the call; any of ``codes`` is a right answer."""

    def __init__(self, *codes: str) -> None:
        super().__init__(", ".join(sorted(codes)))
        self.codes = set(codes)


def structured(path: str, original: bytes, result: bytes, units: int) -> dict[str, Any]:
    """SPEC F-EXE-5."""
    changed = result != original
    return {"path": path, "changed": changed, "units_applied": units,
            "bytes_written": len(result) if changed else 0}


# ---------------------------------------------------------------------------- the patch model


@dataclass(frozen=True)
class RefHunk:
    anchor: str | None
    body: tuple[tuple[str, str], ...]   # (" " | "-" | "+", the line's text)
    pinned: bool

    @property
    def old(self) -> list[str]:
        return [text for op, text in self.body if op != "+"]


def lines_of(data: bytes) -> list[tuple[str, bytes]]:
    """The file's lines as (text, ending); the ending is b"\\r\\n", b"\\n" or, last, b""."""
    out: list[tuple[str, bytes]] = []
    *terminated, last = data.split(b"\n")
    for piece in terminated:
        crlf = piece.endswith(b"\r")
        out.append(((piece[:-1] if crlf else piece).decode(), CRLF if crlf else LF))
    if last:
        out.append((last.decode(), b""))
    return out


def patch_text(hunks: list[RefHunk], newline: str, final_newline: bool) -> str:
    rows: list[str] = []
    for h in hunks:
        rows.append("@@" if h.anchor is None else "@@ " + h.anchor)
        rows.extend(op + text for op, text in h.body)
        if h.pinned:
            rows.append("*** End of File")
    return newline.join(rows) + (newline if final_newline else "")


def ref_patch(original: bytes, hunks: list[RefHunk]) -> bytes:
    if len(hunks) > MAX_UNITS:
        raise Refused("TOO_MANY_UNITS")
    if any(not h.old for h in hunks) and (original != b"" or len(hunks) != 1):
        raise Refused("INVALID_PATCH")
    lines = lines_of(original)
    texts = [text for text, _ in lines]
    n = len(lines)
    failures: set[str] = set()
    runs: list[tuple[int, int, RefHunk]] = []
    for h in hunks:
        first = 0
        if h.anchor is not None:
            at = [i for i, text in enumerate(texts) if text == h.anchor]
            if len(at) != 1:
                failures.add("NO_MATCH" if not at else "NOT_UNIQUE")
                continue
            first = at[0] + 1
        m = len(h.old)
        places = [i for i in range(first, n - m + 1) if texts[i:i + m] == h.old]
        if h.pinned:
            places = [i for i in places if i + m == n]
        if len(places) != 1:
            failures.add("NO_MATCH" if not places else "NOT_UNIQUE")
            continue
        runs.append((places[0], places[0] + m, h))
    if failures:
        raise Refused(*failures)
    runs.sort(key=lambda r: r[:2])
    if any(b[0] < a[1] for a, b in zip(runs, runs[1:])):
        raise Refused("OVERLAP")
    crlf = sum(1 for _, e in lines if e == CRLF)
    dominant = CRLF if crlf > sum(1 for _, e in lines if e == LF) else LF
    out: list[tuple[str, bytes]] = []
    at = 0
    for start, end, h in runs:
        out.extend(lines[at:start])
        out.extend(render_hunk(lines[start:end], h, dominant, ends_file=end == n))
        at = end
    out.extend(lines[at:])
    result = b"".join(text.encode() + ending for text, ending in out)
    if len(result) > MAX_TEXT:
        raise Refused("TOO_LARGE")
    return result


def render_hunk(run: list[tuple[str, bytes]], h: RefHunk, dominant: bytes, *,
                ends_file: bool) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes, bool]] = []   # (text, ending, added)
    k = 0
    for op, text in h.body:
        if op == "+":
            before = run[k - 1][1] if k > 0 else b""
            after = run[k][1] if k < len(run) else b""
            out.append((text, before or after or dominant, True))
            continue
        if op == " ":
            out.append((run[k][0], run[k][1], False))
        k += 1
    if ends_file and run and run[-1][1] == b"" and out:
        # the file had no final newline: an added line that now ends it has none either; the old
        # last line, kept and followed by added lines, needs one (the file's dominant ending)
        out = [(t, e or dominant, a) for t, e, a in out[:-1]] + [out[-1]]
        if out[-1][2]:
            out[-1] = (out[-1][0], b"", True)
    return [(t, e) for t, e, _ in out]


# ---------------------------------------------------------------------------- the edit model


def occurrences(text: str, needle: str) -> list[int]:
    return [i for i in range(len(text) - len(needle) + 1) if text.startswith(needle, i)]


def ref_edit(original: bytes, edits: list[dict[str, Any]]) -> bytes:
    if not edits:
        raise Refused("INVALID_ARGUMENT")
    if len(edits) > MAX_UNITS:
        raise Refused("TOO_MANY_UNITS")
    if any(e["old_string"] == "" for e in edits):
        raise Refused("INVALID_ARGUMENT")
    if sum(len(e["old_string"].encode()) + len(e["new_string"].encode()) for e in edits) > MAX_TEXT:
        raise Refused("TOO_LARGE")
    text = original.decode()
    for e in edits:
        old, new = e["old_string"], e["new_string"]
        places = occurrences(text, old)
        if not places:
            raise Refused("NO_MATCH")
        if len(places) > 1 and not e.get("replace_all", False):
            raise Refused("NOT_UNIQUE")
        pieces, at = [], 0
        for p in places:
            if p < at:   # overlaps the occurrence just replaced
                continue
            pieces += [text[at:p], new]
            at = p + len(old)
            if not e.get("replace_all", False):
                break
        text = "".join(pieces) + text[at:]
        if len(text.encode()) > MAX_TEXT:
            raise Refused("TOO_LARGE")
    return text.encode()


# ---------------------------------------------------------------------------- generated cases

TEXTS = ["a", "b", "", " ", "x = 1", "é😀", "@@ x", "*** End of File", "-", "+", "a\rb", "\t}", "\x00\x0c\u2028\x85"]
ENDINGS = st.sampled_from(["lf", "crlf", "mixed"])


def one_in(k: int) -> st.SearchStrategy[bool]:
    """True about once in ``k`` draws (and False when shrinking)."""
    return st.sampled_from([False] * (k - 1) + [True])


@st.composite
def files(draw: st.DrawFn) -> bytes:
    if draw(one_in(16)):
        return b""
    texts = draw(st.lists(st.sampled_from(TEXTS), min_size=1, max_size=12))
    style = draw(ENDINGS)
    endings = [draw(st.sampled_from([LF, CRLF])) if style == "mixed" else (CRLF if style == "crlf" else LF)
               for _ in texts]
    if texts and draw(st.booleans()):
        endings[-1] = b""   # no final newline
    if texts and endings[-1] == b"" and texts[-1] == "":
        texts[-1] = "a"     # an unterminated empty last line is no line
    return b"".join(t.encode() + e for t, e in zip(texts, endings))


@st.composite
def hunks_for(draw: st.DrawFn, original: bytes) -> list[RefHunk]:
    texts = [t for t, _ in lines_of(original)]
    n = len(texts)
    out = []
    for _ in range(draw(st.sampled_from([1, 1, 2, 2, 3, 4]))):
        start = draw(st.integers(0, max(n - 1, 0)))
        size = min(draw(st.integers(1, 4)), n - start)
        if draw(one_in(16)):
            size = 0        # now and then a pure-add hunk
        elif draw(one_in(3)):
            start = n - size    # often at the end: where "no newline at end of file" matters
        body: list[tuple[str, str]] = [(draw(st.sampled_from(" -")), t) for t in texts[start:start + size]]
        if body and draw(one_in(8)):   # sometimes a line that is not there
            i = draw(st.integers(0, len(body) - 1))
            body[i] = (body[i][0], draw(st.sampled_from(TEXTS)))
        for _ in range(draw(st.integers(0 if body else 1, 3))):
            body.insert(draw(st.integers(0, len(body))), ("+", draw(st.sampled_from(TEXTS + ["new", "@@", "+x"]))))
        anchor = None
        if draw(one_in(5)):
            candidates = [t for t in (texts[:start] if draw(st.booleans()) else texts) if t != ""] or ["nowhere"]
            anchor = draw(st.sampled_from(candidates))
        pinned = draw(one_in(8)) or (start + size == n and draw(st.booleans()))
        out.append(RefHunk(anchor, tuple(body), pinned))
    return out


@st.composite
def edits_for(draw: st.DrawFn, original: bytes) -> list[dict[str, Any]]:
    text = original.decode()
    out: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 4))):
        if text and not draw(one_in(4)):   # mostly a piece of the original
            i = draw(st.integers(0, len(text) - 1))
            old = text[i:i + draw(st.integers(1, 6))]
        else:
            old = draw(st.text(st.sampled_from("ab\r\né"), min_size=1, max_size=3))
        edit: dict[str, Any] = {"old_string": old, "new_string": draw(st.text(st.sampled_from("ab\r\né"), max_size=4))}
        if draw(st.booleans()):
            edit["replace_all"] = draw(st.booleans())
        out.append(edit)
    return out



async def check_against(model: Callable[[bytes], bytes], call: Callable[[], Any], f: Path, original: bytes,
                        path: str, units: int) -> None:
    f.write_bytes(original)
    try:
        want: bytes | Refused = model(original)
    except Refused as refused:
        want = refused
    try:
        got = await call()
    except ExecutorToolError as exc:
        assert isinstance(want, Refused), f"the tool refused ({exc.code}: {exc}); the model gives {want!r}"
        assert exc.code in want.codes, f"the tool says {exc.code}: {exc}; the model {sorted(want.codes)}"
        assert f.read_bytes() == original, "a refused call changed the file"
        return
    assert not isinstance(want, Refused), f"the tool applied it ({f.read_bytes()!r}); the model refuses: {want}"
    assert f.read_bytes() == want
    assert got.result == structured(path, original, want, units)


def run_property(test: Callable[..., None], strategy: st.SearchStrategy[Any], examples: int) -> Any:
    """Run ``test(case)`` over ``examples`` generated cases in a worker thread (hypothesis is
    synchronous); ``test`` reaches the executor with ``trio.from_thread.run``."""

    @settings(max_examples=examples, deadline=None)
    @given(case=strategy)
    def prop(case: Any) -> None:
        test(case)

    return trio.to_thread.run_sync(prop)


PATCH_CASES = files().flatmap(lambda original: st.tuples(
    st.just(original), hunks_for(original), st.sampled_from(["\n", "\r\n"]), st.booleans()))


async def test_patch_file_agrees_with_the_spec_model(client: ExecutorClient, workspace: Path, sub: str) -> None:
    path = f"{sub}/p.txt"

    def test(case: tuple[bytes, list[RefHunk], str, bool]) -> None:
        original, hunks, newline, final = case
        args = {"path": path, "patch": patch_text(hunks, newline, final)}
        trio.from_thread.run(check_against, lambda o: ref_patch(o, hunks),
                             lambda: client.call("patch_file", args), workspace / path, original, path, len(hunks))

    await run_property(test, PATCH_CASES, 400)


EDIT_CASES = files().flatmap(lambda original: st.tuples(st.just(original), edits_for(original)))


async def test_edit_file_edit_mode_agrees_with_the_spec_model(client: ExecutorClient, workspace: Path,
                                                              sub: str) -> None:
    path = f"{sub}/e.txt"

    def test(case: tuple[bytes, list[dict[str, Any]]]) -> None:
        original, edits = case
        args = {"path": path, "mode": "edit", "edits": edits}
        trio.from_thread.run(check_against, lambda o: ref_edit(o, edits),
                             lambda: client.call("edit_file", args), workspace / path, original, path, len(edits))

    await run_property(test, EDIT_CASES, 300)


# ---------------------------------------------------------------------------- limits at their edges
# (the same edges are pinned in-process in tests/files; these cross the executor's gRPC call, where
# the arguments travel as ASCII JSON: a control character is six bytes there, so 8 MiB of them is
# 48 MiB on the wire, still under the 64 MiB a message may hold)


@pytest.mark.parametrize("count", [MAX_UNITS, MAX_UNITS + 1])
async def test_hunk_and_edit_counts_at_the_limit(client: ExecutorClient, workspace: Path, sub: str,
                                                 count: int) -> None:
    original = "".join(f"<{i}>\n" for i in range(count)).encode()
    (workspace / sub / "p.txt").write_bytes(original)
    (workspace / sub / "e.txt").write_bytes(original)
    patch = {"path": f"{sub}/p.txt", "patch": "".join(f"@@\n-<{i}>\n+[{i}]\n" for i in range(count))}
    edits = {"path": f"{sub}/e.txt", "mode": "edit",
             "edits": [{"old_string": f"<{i}>", "new_string": f"[{i}]"} for i in range(count)]}
    if count > MAX_UNITS:
        await fails("TOO_MANY_UNITS", client.call("patch_file", patch))
        await fails("TOO_MANY_UNITS", client.call("edit_file", edits))
        assert (workspace / sub / "p.txt").read_bytes() == (workspace / sub / "e.txt").read_bytes() == original
        return
    want = "".join(f"[{i}]\n" for i in range(count)).encode()
    for tool, args, name in (("patch_file", patch, "p.txt"), ("edit_file", edits, "e.txt")):
        out = await client.call(tool, args)
        assert out.result == {"path": f"{sub}/{name}", "changed": True, "units_applied": MAX_UNITS,
                              "bytes_written": len(want)}
        assert (workspace / sub / name).read_bytes() == want


@pytest.mark.parametrize("extra", [0, 1])
async def test_input_of_8_mib_of_control_characters(client: ExecutorClient, workspace: Path, sub: str,
                                                    extra: int) -> None:
    (workspace / sub / "p.txt").write_bytes(b"x\n")
    (workspace / sub / "e.txt").write_bytes(b"x")
    head = "@@\n-x\n+"
    patch = head + "\x01" * (MAX_TEXT - len(head) - 1 + extra) + "\n"          # MAX_TEXT (+1) bytes
    edits = [{"old_string": "x", "new_string": "\x01" * (MAX_TEXT - 1 + extra)}]  # old + new: the same
    calls = [("patch_file", {"path": f"{sub}/p.txt", "patch": patch}, MAX_TEXT - len(head)),
             ("edit_file", {"path": f"{sub}/e.txt", "mode": "edit", "edits": edits}, MAX_TEXT - 1),
             ("edit_file", {"path": f"{sub}/c.txt", "mode": "create", "content": "\x01" * (MAX_TEXT + extra)},
              MAX_TEXT)]
    for tool, args, size in calls:
        if extra:
            await fails("TOO_LARGE", client.call(tool, args))
        else:
            assert (await client.call(tool, args)).result["bytes_written"] == size
    if extra:
        assert (workspace / sub / "p.txt").read_bytes() == b"x\n" and (workspace / sub / "e.txt").read_bytes() == b"x"
        assert not (workspace / sub / "c.txt").exists()


@pytest.mark.parametrize("tool", ["patch_file", "edit_file"])
@pytest.mark.parametrize("over", [None, "original", "result"])
async def test_an_original_and_a_result_of_8_mib_each(client: ExecutorClient, workspace: Path, sub: str,
                                                      tool: str, over: str | None) -> None:
    # both edges in one call (the reply then carries 16 MiB of before and after), or one byte past either
    original = b"a" * (MAX_TEXT - 2 + (over == "original")) + b"\nZ"
    f = workspace / sub / "f.txt"
    f.write_bytes(original)
    new = "Y" + "y" * (over == "result") + "y" * (over == "original")
    args = ({"path": f"{sub}/f.txt", "patch": f"@@\n-Z\n+{new}\n"} if tool == "patch_file" else
            {"path": f"{sub}/f.txt", "mode": "edit", "edits": [{"old_string": "Z", "new_string": new}]})
    if over:
        await fails("TOO_LARGE", client.call(tool, args))
        assert f.read_bytes() == original
        return
    out = await client.call(tool, args)
    assert out.result["bytes_written"] == MAX_TEXT == f.stat().st_size
    assert out.before == original and out.after == f.read_bytes()
