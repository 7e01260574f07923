"""The executor's gRPC boundary against a hostile client (F-EXE-1..9, SPEC §5).

One real ``lens executor serve`` process for the module; hypothesis plays a client on the raw
wire that draws calls over every RPC of ``proto/executor.proto`` — with and without the token and
the protocol version, every field at a hostile value (empty, huge, at and one past the tools'
limits, invalid UTF-8 where the proto has ``string``, NULs, out-of-range integers, unknown tools,
arguments that are no JSON or JSON of the wrong shape), bytes that are no protobuf message,
unknown methods, deadlines of 0 and 1 ms, calls cancelled mid-way, streams left unread, several
calls at once. The oracle for every answer:

- the process never dies: ``Hello`` answers afterwards, from the same pid;
- an error is a gRPC status of the contract (never ``UNKNOWN``, which is an exception escaping a
  handler, nor ``INTERNAL``) or a ``ToolReply`` with an UPPER_SNAKE code, and its message is
  bounded and holds no traceback, no object repr and no host path the client did not send;
- nothing outside the workspace changes, and nothing inside it on a refused call;
- after the run the executor's threads and descriptors are back within a bound, and no process
  a command started is left.

Plain examples cover what hypothesis is poor at: a message exactly at the executor's receive
limit and one byte past it, a command stream that is never read, 200 calls at once of which half
are cancelled. The examples are derandomized (the suite's profile); nothing waits for time to
pass except bounded polls of an observable condition.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import sys
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import grpc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from proto import executor_pb2 as pb
from proto import executor_pb2_grpc as pb_grpc
from tests.files.sample_images import png_of_size
from tools.executor import PROTOCOL_VERSION
from tools.executor.commands import MAX_OUTPUT
from tools.executor.server import MAX_RUNNING_COMMANDS, SERVER_THREADS
from tools.files.errors import MAX_IMAGE_BYTES, MAX_TEXT_BYTES, MAX_UNITS

from .conftest import ExecutorProcess, poll_until, processes_marked, start_executor, stop_process

SERVICE = "/lens.executor.v8.Executor"
MAX_RECEIVE = 64 * 1024 * 1024  # grpc.max_receive_message_length of tools/executor/server.py
BOUND_S = 30.0
MARK_ENV = "LENS_GRPC_FUZZ_MARK"  # carried by every process the executor starts (see `fuzz_executor`)
# Codes a hostile client may be answered with; UNKNOWN (an exception out of a handler) and
# INTERNAL (grpc's own failure, or a request it could not read) are never among them.
STATUSES = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.DEADLINE_EXCEEDED,
            grpc.StatusCode.CANCELLED}
CODE = re.compile(r"[A-Z][A-Z0-9_]*")
TOOLS = ["read_file", "edit_file", "patch_file", "view_image", "restore", "browse_list", "browse_read", "resolve"]
PNG = png_of_size(96)


# ---------------------------------------------------------------------------- the process


@dataclass
class Fuzzed:
    ex: ExecutorProcess
    meta: tuple[tuple[str, str], ...]
    outside: Path                     # a tree beside the workspace: never changed
    host_paths: list[str]             # what no message may name unless the request did
    mark: str
    baseline: dict[str, int] = field(default_factory=dict)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    root = tmp_path_factory.mktemp("grpc-fuzz")
    mark = secrets.token_hex(8)
    os.environ[MARK_ENV] = mark  # (start_executor hands the executor this environment)
    try:
        ex = start_executor(root, test_hooks=False)  # (the production surface only)
    finally:
        del os.environ[MARK_ENV]
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside canary\n")
    ws = ex.workspace
    (ws / "a.txt").write_text("alpha\nbeta\ngamma\n")
    (ws / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    (ws / "dir").mkdir()
    (ws / "dir" / "b.txt").write_text("inner\n")
    (ws / "img.png").write_bytes(PNG)
    (ws / "img_at_limit.png").write_bytes(png_of_size(MAX_IMAGE_BYTES))
    (ws / "img_past_limit.png").write_bytes(png_of_size(MAX_IMAGE_BYTES + 1))
    (ws / "big_at_limit.txt").write_bytes(b"x" * (MAX_TEXT_BYTES - 6) + b"\nend\n\n")
    (ws / "big_past_limit.txt").write_bytes(b"x" * (MAX_TEXT_BYTES + 1))
    (ws / "out_link").symlink_to(outside)
    (ws / "secret_link.txt").symlink_to(outside / "secret.txt")
    (ws / ".env").write_text("KEY=value\n")
    repo = str(Path(__file__).resolve().parents[2])
    host = sorted({str(root), str(ws), str(ex.state), str(outside), repo, sys.prefix}, key=len, reverse=True)
    fz = Fuzzed(ex, (("authorization", f"Bearer {ex.token}"), ("lens-protocol", str(PROTOCOL_VERSION))),
                outside, host, mark)
    fz.baseline = {"threads": threads_of(ex.pid), "fds": fds_of(ex.pid)}
    try:
        yield fz
    finally:
        stop_process(ex.proc)


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def fds_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def marked_processes(fz: Fuzzed) -> list[int]:
    """Live processes (other than the executor) whose environment carries the module's mark:
    the commands the executor started, and whatever they started."""
    return processes_marked(MARK_ENV, fz.mark, skip_pid=fz.ex.pid)


def wait_for(condition: Any, timeout: float = BOUND_S) -> bool:
    return poll_until(condition, timeout)


def snapshot(top: Path) -> dict[str, Any]:
    """Every entry below ``top`` by lstat: type, mode, size, mtime, and content or link target."""
    out: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st_ = p.lstat()
            if p.is_symlink():
                what: Any = os.readlink(p)
            elif p.is_file():
                what = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                what = None
            out[str(p.relative_to(top))] = (st_.st_mode, st_.st_size, st_.st_mtime_ns, what)
    return out


# ---------------------------------------------------------------------------- the wire


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # a negative number as protobuf writes it: ten bytes of two's complement
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_bytes(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def field_int(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


@dataclass
class Probe:
    """One call as drawn: what to send, how, and what the client did meanwhile."""

    method: str                    # Hello | Call | Run | Probe | anything else (unknown)
    body: bytes                    # the serialized request, as sent
    meta: tuple[tuple[str, str], ...]
    mode: str = "wait"             # wait | deadline0 | deadline1ms | cancel | first_then_cancel | unread
    may_write: bool = False        # an editing call or a command: may change the workspace when accepted
    shown: str = ""                # the request's text, for the host-path check

    @property
    def streaming(self) -> bool:
        return self.method == "Run"


@dataclass
class Answer:
    status: grpc.StatusCode | None
    details: str = ""
    reply: bytes | None = None       # a unary reply, serialized
    events: list[bytes] | None = None


def send(channel: grpc.Channel, probe: Probe) -> Answer:
    """Send ``probe`` on the raw wire (bytes in, bytes out) and collect its answer."""
    path = f"{SERVICE}/{probe.method}" if "/" not in probe.method else probe.method
    timeout = {"deadline0": 0.0, "deadline1ms": 0.001}.get(probe.mode, BOUND_S)
    try:
        if probe.streaming:
            call = channel.unary_stream(path)(probe.body, metadata=probe.meta, timeout=timeout)
            events: list[bytes] = []
            if probe.mode == "unread":
                call.cancel()
                return Answer(grpc.StatusCode.CANCELLED, events=events)
            for ev in call:
                events.append(ev)
                if probe.mode == "first_then_cancel":
                    call.cancel()
            return Answer(None, events=events)
        fut = channel.unary_unary(path).future(probe.body, metadata=probe.meta, timeout=timeout)
        if probe.mode in ("cancel", "first_then_cancel", "unread"):
            fut.cancel()
        return Answer(None, reply=fut.result(timeout=BOUND_S))
    except grpc.RpcError as exc:
        return Answer(exc.code(), exc.details() or "")  # type: ignore[attr-defined]
    except (futures.CancelledError, grpc.FutureCancelledError):
        return Answer(grpc.StatusCode.CANCELLED)


def check_message(fz: Fuzzed, text: str, probe: Probe) -> None:
    assert len(text) <= 2100, (len(text), text[:200])
    for bad in ("Traceback", "Exception calling application", " object at 0x", "<class ", "File \""):
        assert bad not in text, text
    for host in fz.host_paths:
        if host in text:
            assert host in probe.shown, (host, text)


def check_answer(fz: Fuzzed, probe: Probe, answer: Answer) -> bool:
    """The oracle for one answer; returns whether the call was refused (nothing may have changed)."""
    if answer.status is not None:
        if answer.status == grpc.StatusCode.CANCELLED and probe.mode == "wait":
            raise AssertionError(f"cancelled though the client waited: {answer.details!r}")
        assert answer.status in STATUSES, (answer.status, answer.details, probe.method, probe.body[:200])
        check_message(fz, answer.details, probe)
        if answer.status in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED) \
                and probe.method in ("Run", "Call") and "larger than max" not in answer.details:
            assert CODE.fullmatch(answer.details.split(":", 1)[0]), answer.details  # "CODE: message"
        if answer.status == grpc.StatusCode.FAILED_PRECONDITION:
            assert str(PROTOCOL_VERSION) in answer.details, answer.details
        return answer.status not in (grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED)
    if probe.method == "Call":
        assert answer.reply is not None
        reply = pb.ToolReply.FromString(answer.reply)
        if not reply.ok:
            assert CODE.fullmatch(reply.error_code), reply
            assert reply.error_message, reply
            check_message(fz, reply.error_message, probe)
            return True
        json.loads(reply.result_json)
        return False
    if probe.method == "Run":
        assert answer.events is not None
        parsed = [pb.CommandEvent.FromString(e) for e in answer.events]
        kinds = [e.WhichOneof("event") for e in parsed]
        if probe.mode == "wait":
            assert kinds and kinds[-1] == "exit" and kinds.count("exit") == 1, kinds
            req = pb.CommandRequest.FromString(probe.body)
            cap = min(req.max_output_bytes or 1024 * 1024, MAX_OUTPUT)
            assert sum(len(e.stdout) + len(e.stderr) for e in parsed) <= cap
        return False
    if probe.method == "Hello":
        assert answer.reply is not None
        assert pb.HelloReply.FromString(answer.reply).protocol_version == PROTOCOL_VERSION
        return True
    if probe.method == "Probe":
        assert answer.reply is not None
        pb.ProbeReply.FromString(answer.reply)
        return True
    raise AssertionError(f"an unknown method was answered: {probe.method!r}")


def still_serving(fz: Fuzzed) -> None:
    assert fz.ex.proc.poll() is None, f"the executor died: {fz.ex.output()[-3000:]}"
    with grpc.insecure_channel(fz.ex.address) as channel:
        reply = pb_grpc.ExecutorStub(channel).Hello(pb.HelloRequest(protocol_version=PROTOCOL_VERSION),
                                                    metadata=fz.meta, timeout=BOUND_S)
    assert reply.protocol_version == PROTOCOL_VERSION


# ---------------------------------------------------------------------------- what is drawn

# Hostile values for any field of a tool's arguments.
ints = st.sampled_from([0, 1, -1, 2, 3, MAX_UNITS, MAX_UNITS + 1, 2**31 - 1, 2**31, 2**32, 2**63, -(2**63), 10**30,
                        MAX_TEXT_BYTES, MAX_TEXT_BYTES + 1])
texts = st.one_of(
    st.sampled_from(["", ".", "..", "/", "a.txt", "dir", "dir/", "dir/b.txt", "crlf.txt", "img.png", "nope",
                     "img_at_limit.png", "img_past_limit.png", "big_at_limit.txt", "big_past_limit.txt",
                     "out_link", "out_link/secret.txt", "secret_link.txt", "../outside/secret.txt", ".env",
                     "a.txt\0", "\0", "a\nb", "\u202e", "é", "/etc/passwd", "~", "a" * 255, "a" * 256, "a/" * 3000,
                     "\ud800", "alpha", "beta\n", "\r\n", "0" * 64, "create", "rewrite", "edit"]),
    st.text(max_size=40),
)
good_paths = st.sampled_from(["a.txt", "crlf.txt", "dir", "dir/b.txt", "img.png", "new.txt", "dir/new.txt",
                              "sub/deeper/new.txt", "img_at_limit.png", "big_at_limit.txt", "."])
paths = st.one_of(good_paths, good_paths, texts)
small = st.one_of(st.integers(0, 4), st.integers(0, 4), ints)  # (mostly usable, so the call goes on)
scalars = st.one_of(st.none(), st.booleans(), ints, st.floats(allow_nan=True, allow_infinity=True), texts)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(texts, inner, max_size=3)), max_leaves=6)


def big_text(size: int) -> str:
    return "y" * size


edit_entry = st.one_of(
    st.fixed_dictionaries({"old_string": st.sampled_from(["alpha", "beta", "a", "zzz", ""]),
                           "new_string": st.sampled_from(["ALPHA", "", "\0", "x\r\n"])},
                          optional={"replace_all": st.one_of(st.booleans(), values)}),
    st.dictionaries(st.sampled_from(["old_string", "new_string", "replace_all", "other"]), values, max_size=4),
    values,
)


def hunk(n: int) -> str:
    return "".join(f"@@\n-line{i}\n+LINE{i}\n" for i in range(n))


tool_args: dict[str, Any] = {
    "read_file": st.fixed_dictionaries({"path": paths}, optional={
        "start_line": st.one_of(small, values), "max_lines": st.one_of(small, values),
        "offset": st.one_of(small, values), "follow_symlinks": st.one_of(st.booleans(), values)}),
    "edit_file": st.one_of(
        st.fixed_dictionaries({"path": paths, "mode": st.sampled_from(["create", "rewrite", "edit", "", "x"])},
                              optional={"content": st.one_of(values, st.sampled_from(
                                  [MAX_TEXT_BYTES, MAX_TEXT_BYTES + 1]).map(big_text)),
                                  "edits": st.one_of(values, st.lists(edit_entry, max_size=3),
                                                     st.sampled_from([MAX_UNITS, MAX_UNITS + 1]).map(
                                                         lambda n: [{"old_string": "alpha", "new_string": "alpha"}] * n))}),
        st.fixed_dictionaries({"path": values, "mode": values}, optional={"content": values, "edits": values})),
    "patch_file": st.fixed_dictionaries({"path": paths, "patch": st.one_of(
        values, st.sampled_from(["@@\n-alpha\n+ALPHA\n", "@@ beta\n gamma\n", "*** End of File\n", "@@\n+x\n",
                                 hunk(MAX_UNITS), hunk(MAX_UNITS + 1), "@@\n-" + "z" * MAX_TEXT_BYTES + "\n"]))}),
    "view_image": st.fixed_dictionaries({"path": paths}, optional={"other": values}),
    "restore": st.fixed_dictionaries({"path": paths, "content_hex": st.one_of(values, st.sampled_from(["", "00", "zz", "0"])),
                                      "expect_sha256": st.one_of(values, st.just("0" * 64))}),
    "browse_list": st.fixed_dictionaries({}, optional={
        "path": st.one_of(paths, values), "depth": st.one_of(small, values), "max_entries": st.one_of(small, values),
        "include_ignored": st.one_of(st.booleans(), values)}),
    "browse_read": st.fixed_dictionaries({"path": st.one_of(paths, values)}, optional={
        "offset": st.one_of(small, values), "limit": st.one_of(small, values)}),
    "resolve": st.fixed_dictionaries({"path": st.one_of(paths, values)}),
}


def dumps(value: Any, ascii: bool = True) -> str:
    # (ASCII: a lone surrogate goes as its JSON escape and reaches the tool; otherwise as the
    # invalid UTF-8 it makes, which the protobuf reader refuses)
    return json.dumps(value, ensure_ascii=ascii, allow_nan=True)


def utf8_or_raw(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # (a lone surrogate goes as the invalid UTF-8 it makes)


invalid_utf8 = st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"a\x80b", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf"])


@st.composite
def arguments_json(draw: st.DrawFn, tool: str) -> bytes:
    how = draw(st.sampled_from(["shaped"] * 12 + ["value", "value", "garbage"]))
    ascii = draw(st.sampled_from([True] * 7 + [False]))
    if how == "shaped" and tool in tool_args:
        return utf8_or_raw(dumps(draw(tool_args[tool]), ascii))
    if how == "value":
        return utf8_or_raw(dumps(draw(values), ascii))
    return draw(st.one_of(
        st.sampled_from([b"", b"{", b"{}}", b"[" * 5000, b"{\"path\": 1" + b"0" * 5000 + b"}", b"NaN", b"null",
                         b"{\"path\": \"a.txt\", \"path\": 1}", b"\xef\xbb\xbf{}", b"{\"path\": \"a.txt\"}" + b" " * 100]),
        st.binary(max_size=40), invalid_utf8.map(lambda b: b"{\"path\": \"" + b + b"\"}")))


def tool_request(tool: bytes, call_id: bytes, args: bytes) -> bytes:
    return field_bytes(1, tool) + field_bytes(2, call_id) + field_bytes(3, args)


@st.composite
def call_probe(draw: st.DrawFn) -> tuple[str, bytes, bool]:
    tool = draw(st.one_of(st.sampled_from(TOOLS), st.sampled_from(TOOLS), st.sampled_from(TOOLS), st.sampled_from(
        ["", "READ_FILE", "read_file ", "_test_wait_cancel", "revert_call", "run_command", "x" * 5000]), st.text(max_size=10)))
    call_id = draw(st.one_of(st.just(""), st.just(""), st.text(max_size=20).map(lambda s: "fz-" + s),
                             st.just("fz-" + "c" * 100_000)))
    args = draw(arguments_json(tool))
    tool_b, call_b = utf8_or_raw(tool), utf8_or_raw(call_id)
    # invalid UTF-8 in a `string` field
    which = draw(st.sampled_from([None] * 27 + ["tool", "call_id", "args"]))
    if which == "tool":
        tool_b += draw(invalid_utf8)
    elif which == "call_id":
        call_b += draw(invalid_utf8)
    elif which == "args":
        args += draw(invalid_utf8)
    return tool, tool_request(tool_b, call_b, args), tool in ("edit_file", "patch_file", "restore")


HARMLESS = ["echo hi", "printf %s x", "exit 3", "cat a.txt", "ls -a", "pwd", "echo err >&2", "kill -9 $$",
            "head -c 300000 /dev/zero", "sleep 30 & echo bg", "exec sleep 30", "yes | head -c 200000", "true",
            "", "echo \u00e9\u202e", "echo " + "z" * 20_000, "echo " + "z" * 200_000, ": '" + "\u00e9" * 9000 + "'"]
LONG_RUNNING = {"sleep 30 & echo bg", "exec sleep 30"}


@st.composite
def run_probe(draw: st.DrawFn) -> tuple[bytes, str, int]:
    command = utf8_or_raw(draw(st.sampled_from(HARMLESS)))
    cwd = utf8_or_raw(draw(st.one_of(st.just(""), st.sampled_from(["dir", ".", "dir/", "./dir/.."]), texts)))
    if draw(st.integers(0, 7)) == 0:
        command += draw(st.sampled_from([b"\0", b"\xff"]))
    if draw(st.integers(0, 7)) == 0:
        cwd += draw(st.sampled_from([b"\0", b"\xff"]))
    numbers = st.sampled_from([0, 1, 50, 1000, 2**32 - 1, 2**32, 2**64 - 1, -1, MAX_OUTPUT, MAX_OUTPUT + 1])
    timeout, cap = draw(numbers), draw(numbers)
    if command.decode("utf-8", "replace") in LONG_RUNNING:
        timeout = draw(st.sampled_from([1, 50]))  # (or the draw's mode ends it sooner)
    body = field_bytes(1, command) + field_int(2, timeout) + field_int(3, cap) + field_bytes(4, cwd)
    return body, command.decode("utf-8", "replace") + " " + cwd.decode("utf-8", "replace"), timeout


not_protobuf = st.one_of(
    st.sampled_from([b"\x0a", b"\x0a\x05ab", b"\x0f", b"\x07", b"\x0b\x0c", b"\x80", b"\xff" * 11,
                     b"\x0a\xff\xff\xff\xff\x0f", b"\x08" + b"\xff" * 10 + b"\x01"]),
    invalid_utf8.map(lambda b: field_bytes(1, b)),
    st.binary(min_size=1, max_size=60),
)


def parses_as_command(body: bytes) -> bool:
    try:
        return bool(pb.CommandRequest.FromString(body).command)
    except Exception:
        return False


@st.composite
def probes(draw: st.DrawFn, fz: Fuzzed) -> Probe:
    meta = draw(st.sampled_from(["good"] * 20 + ["no_token", "wrong_token", "no_version", "version7", "version_long",
                                                "bearer_only", "extra"]))
    metadata = {
        "good": fz.meta,
        "no_token": fz.meta[1:],
        "wrong_token": (("authorization", "Bearer " + "x" * 43), fz.meta[1]),
        "no_version": fz.meta[:1],
        "version7": (fz.meta[0], ("lens-protocol", "7")),
        "version_long": (fz.meta[0], ("lens-protocol", "8" * 3000)),
        "bearer_only": (("authorization", "Bearer"), fz.meta[1]),
        "extra": fz.meta + (("lens-protocol", "8"), ("x-other-bin", b"\xff\0")),
    }[meta]
    kind = draw(st.sampled_from(["Call"] * 6 + ["Run"] * 3 + ["Hello", "Probe", "raw", "unknown"]))
    mode = draw(st.sampled_from(["wait"] * 6 + ["deadline0", "deadline1ms", "cancel"]))
    if kind == "Call":
        tool, body, writes = draw(call_probe())
        return Probe("Call", body, metadata, mode, writes, body.decode("utf-8", "replace"))
    if kind == "Run":
        body, shown, timeout = draw(run_probe())
        mode = draw(st.sampled_from(["wait"] * 4 + ["deadline0", "deadline1ms", "first_then_cancel", "unread"]))
        if mode == "wait" and any(c in shown for c in LONG_RUNNING) and not 0 < timeout <= 50:
            mode = "first_then_cancel"
        return Probe("Run", body, metadata, mode, True, shown)
    if kind == "Hello":
        version = draw(st.sampled_from([PROTOCOL_VERSION, 0, 7, 9, 2**32 - 1, 2**32 + 8, -1, 2**64 - 1]))
        return Probe("Hello", field_int(1, version), metadata, mode)
    if kind == "Probe":
        path = utf8_or_raw(draw(texts))
        sha = draw(st.sampled_from(["", "0" * 64, hashlib.sha256(b"alpha\nbeta\ngamma\n").hexdigest(), "é" * 64,
                                    "0" * 5000, "\ud800"]))
        body = field_bytes(1, path) + field_bytes(2, utf8_or_raw(sha))
        if draw(st.booleans()):
            body += field_bytes(draw(st.sampled_from([1, 2])), draw(invalid_utf8))
        return Probe("Probe", body, metadata, mode, False, path.decode("utf-8", "replace"))
    if kind == "raw":
        method = draw(st.sampled_from(["Hello", "Call", "Run", "Probe"]))
        body = draw(not_protobuf)
        if method == "Run" and parses_as_command(body):
            method = "Hello"  # (random bytes that read as a command are not run)
        return Probe(method, body, metadata, mode if method != "Run" else "wait", method != "Hello",
                     body.decode("utf-8", "replace"))
    name = draw(st.sampled_from(["Nope", "hello", "Call/", "Run2", "", "/lens.executor.v7.Executor/Hello",
                                 "/lens.executor.v8.Other/Call", "/x", "/" + "y" * 3000]))
    return Probe(name or "/", draw(st.binary(max_size=20)), metadata, mode)


# ---------------------------------------------------------------------------- the property


def run_examples(fz: Fuzzed, batch: list[Probe], together: bool) -> None:
    ws = fz.ex.workspace
    outside_before = snapshot(fz.outside)
    ws_before = snapshot(ws)
    with grpc.insecure_channel(fz.ex.address, options=[("grpc.max_send_message_length", 2 * MAX_RECEIVE),
                                                       ("grpc.max_receive_message_length", 2 * MAX_RECEIVE)]) as channel:
        if together:
            with futures.ThreadPoolExecutor(len(batch)) as pool:
                answers = list(pool.map(lambda p: send(channel, p), batch))
        else:
            answers = [send(channel, p) for p in batch]
    refused = [check_answer(fz, p, a) for p, a in zip(batch, answers)]
    for p, a in zip(batch, answers):
        event(f"{p.method} {a.status.name if a.status else 'answered'}")
    assert snapshot(fz.outside) == outside_before
    if all(r or not p.may_write for p, r in zip(batch, refused)):
        assert snapshot(ws) == ws_before, [(p.method, p.body[:200]) for p in batch]
    still_serving(fz)


def test_a_hostile_client_finds_the_executor_answering_in_contract(fuzzed: Fuzzed) -> None:
    # (derandomized by the suite's profile; about 20 s)
    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(probes(fuzzed), min_size=1, max_size=4), st.booleans())
    def prop(batch: list[Probe], together: bool) -> None:
        run_examples(fuzzed, batch, together)

    prop()


# ---------------------------------------------------------------------------- plain examples


def call_tool(fz: Fuzzed, channel: grpc.Channel, tool: str, arguments: str, **kw: Any) -> pb.ToolReply:
    return pb_grpc.ExecutorStub(channel).Call(pb.ToolRequest(tool=tool, arguments_json=arguments),
                                              metadata=fz.meta, timeout=BOUND_S, **kw)


@pytest.mark.parametrize("tool, arguments", [
    ("browse_list", '{"path": 1}'), ("browse_list", '{"path": null}'), ("browse_list", '{"path": ["a.txt"]}'),
    ("browse_read", '{"path": {}}'), ("browse_read", '{"path": null}'), ("browse_read", '{"path": 1.5}'),
    ("browse_list", '{"path": ".", "depth": null, "max_entries": null}'),
    ("browse_read", '{"path": "a.txt", "offset": null, "limit": null}'),
])
def test_browsing_arguments_of_another_type_are_refused_or_defaulted_not_a_crash(fuzzed: Fuzzed, tool: str,
                                                                                 arguments: str) -> None:
    # Found by the property: a path that is no string reached `.split` (and a null depth, offset
    # or limit an assertion) before any check, and the call ended UNKNOWN "Exception calling
    # application: 'int' object has no attribute 'split'" with a traceback in the executor's log.
    with grpc.insecure_channel(fuzzed.ex.address) as channel:
        reply = call_tool(fuzzed, channel, tool, arguments)
    if "null" in arguments and "path\": null" not in arguments:
        assert reply.ok, reply  # null is the argument left out
    else:
        assert not reply.ok and reply.error_code == "INVALID_ARGUMENT", reply
        assert reply.error_message == "path must be a string", reply


@pytest.mark.parametrize("method, body", [
    ("Hello", b"\x08"), ("Call", field_bytes(1, b"read_file\xff")), ("Call", b"\x0a\x05ab"),
    ("Probe", field_bytes(2, b"\xc3")), ("Run", field_bytes(1, b"echo \xed\xa0\x80")), ("Run", b"\x0f"),
])
def test_bytes_that_are_no_request_message_are_invalid_argument(fuzzed: Fuzzed, method: str, body: bytes) -> None:
    # Found by the property: grpc's own reading answered INTERNAL "Exception deserializing
    # request!" (the status of a server fault) to a truncated field or invalid UTF-8 in a string.
    with grpc.insecure_channel(fuzzed.ex.address) as channel:
        path = f"{SERVICE}/{method}"
        call = channel.unary_stream(path) if method == "Run" else channel.unary_unary(path)
        with pytest.raises(grpc.RpcError) as info:
            answer = call(body, metadata=fuzzed.meta, timeout=BOUND_S)
            list(answer) if method == "Run" else answer
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value  # type: ignore[attr-defined]
    assert info.value.details() == (  # type: ignore[attr-defined]
        f"INVALID_ARGUMENT: the {method} request is not a valid protobuf message of its type (malformed bytes, "
        f"or a string field that is not UTF-8)")
    assert not (fuzzed.ex.workspace / "echo").exists()
    still_serving(fuzzed)


def test_a_message_at_the_receive_limit_is_read_and_one_byte_more_is_refused(fuzzed: Fuzzed) -> None:
    def request(size: int) -> pb.ToolRequest:
        req = pb.ToolRequest(tool="read_file", arguments_json='{"path": "a.txt"}')
        pad = size - req.ByteSize()
        req.arguments_json += " " * pad  # (JSON allows trailing white space)
        while req.ByteSize() > size:  # (the length prefix grew by a byte or more)
            req.arguments_json = req.arguments_json[:-1]
        assert req.ByteSize() == size
        return req

    options = [("grpc.max_send_message_length", 2 * MAX_RECEIVE)]
    with grpc.insecure_channel(fuzzed.ex.address, options=options) as channel:
        stub = pb_grpc.ExecutorStub(channel)
        reply = stub.Call(request(MAX_RECEIVE), metadata=fuzzed.meta, timeout=120)
        assert reply.ok and json.loads(reply.result_json)["content"] == "alpha\nbeta\ngamma\n", reply.error_message
        with pytest.raises(grpc.RpcError) as info:
            stub.Call(request(MAX_RECEIVE + 1), metadata=fuzzed.meta, timeout=120)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, info.value  # type: ignore[attr-defined]
    assert "larger than max" in info.value.details(), info.value  # type: ignore[attr-defined]
    still_serving(fuzzed)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_command_stream_never_read_holds_at_most_its_output_cap(fuzzed: Fuzzed) -> None:
    # A client that opens a stream of endless output and never reads it: the executor holds no
    # more than the cap (grpc's flow control stops its sends once the client's window is full, and
    # past the cap it sends nothing more), the command ends at its timeout, every other call is
    # answered meanwhile, and the stream, read at last, holds at most the cap and an exit that
    # says how it ended.
    cap = 1024 * 1024
    pid = fuzzed.ex.pid
    before = rss_kib(pid)
    with grpc.insecure_channel(fuzzed.ex.address) as channel:
        stream = channel.unary_stream(f"{SERVICE}/Run")(
            pb.CommandRequest(command="exec yes unread", timeout_ms=3000, max_output_bytes=cap).SerializeToString(),
            metadata=fuzzed.meta, timeout=BOUND_S)
        assert wait_for(lambda: marked_processes(fuzzed))  # the command runs
        still_serving(fuzzed)
        assert wait_for(lambda: not marked_processes(fuzzed))  # ended by its timeout, unread
        grown = rss_kib(pid) - before
        assert grown < (cap + 32 * 1024 * 1024) // 1024, grown
        events = [pb.CommandEvent.FromString(e) for e in stream]
    total = sum(len(e.stdout) + len(e.stderr) for e in events)
    exit_ = events[-1].exit
    # (how much the command wrote before the window filled is grpc's business: at most the cap)
    assert total <= cap and exit_.truncated == (total == cap), (total, exit_)
    assert exit_.timed_out and exit_.exit_code < 0, exit_
    still_serving(fuzzed)


def test_two_hundred_calls_at_once_half_of_them_cancelled(fuzzed: Fuzzed) -> None:
    ws = fuzzed.ex.workspace
    (ws / "many").mkdir(exist_ok=True)
    with grpc.insecure_channel(fuzzed.ex.address) as channel:  # (one connection: 200 streams on it)
        unary = channel.unary_unary(f"{SERVICE}/Call")
        hello = channel.unary_unary(f"{SERVICE}/Hello")
        run = channel.unary_stream(f"{SERVICE}/Run")
        calls: list[tuple[str, int, Any]] = []
        for i in range(200):
            kind = ("read", "create", "hello", "run")[i % 4]
            if kind == "read":
                call = unary.future(pb.ToolRequest(tool="read_file", arguments_json='{"path": "a.txt"}')
                                    .SerializeToString(), metadata=fuzzed.meta, timeout=BOUND_S)
            elif kind == "create":
                args = json.dumps({"path": f"many/f{i}.txt", "mode": "create", "content": f"file {i}\n" * 1000})
                call = unary.future(pb.ToolRequest(tool="edit_file", arguments_json=args).SerializeToString(),
                                    metadata=fuzzed.meta, timeout=BOUND_S)
            elif kind == "hello":
                call = hello.future(pb.HelloRequest(protocol_version=PROTOCOL_VERSION).SerializeToString(),
                                    metadata=fuzzed.meta, timeout=BOUND_S)
            else:
                call = run(pb.CommandRequest(command=f"echo {i}; sleep 0.2", timeout_ms=10_000).SerializeToString(),
                           metadata=fuzzed.meta, timeout=BOUND_S)
            calls.append((kind, i, call))
        cancelled = {i for _, i, _ in calls if i % 8 >= 4}  # half of each kind
        for kind, i, call in calls:
            if i in cancelled:
                call.cancel()
        for kind, i, call in calls:
            if kind == "run":
                try:
                    events = [pb.CommandEvent.FromString(e) for e in call]
                except grpc.RpcError as exc:
                    if i in cancelled and exc.code() == grpc.StatusCode.CANCELLED:  # type: ignore[attr-defined]
                        continue  # (a call cancelled after it ended ends as it would have)
                    # At most MAX_RUNNING_COMMANDS run at once; the rest are refused so.
                    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc  # type: ignore[attr-defined]
                    assert exc.details() == f"TOO_MANY_COMMANDS: at most {MAX_RUNNING_COMMANDS} commands run at " \
                                            f"once on this executor", exc  # type: ignore[attr-defined]
                    continue
                assert events[0].stdout == f"{i}\n".encode() and events[-1].exit.exit_code == 0, events
                continue
            try:
                raw = call.result(timeout=BOUND_S)
            except (grpc.FutureCancelledError, futures.CancelledError):
                assert i in cancelled
                continue
            except grpc.RpcError as exc:
                assert i in cancelled and exc.code() == grpc.StatusCode.CANCELLED, exc  # type: ignore[attr-defined]
                continue
            if kind == "hello":
                assert pb.HelloReply.FromString(raw).protocol_version == PROTOCOL_VERSION
            else:
                assert pb.ToolReply.FromString(raw).ok, pb.ToolReply.FromString(raw)
    for kind, i, _ in calls:
        if kind == "create":
            f = ws / "many" / f"f{i}.txt"
            if i in cancelled and not f.exists():
                continue  # a cancelled create writes nothing, or all of it
            assert f.read_text() == f"file {i}\n" * 1000
    assert sorted(p.name for p in (ws / "many").iterdir() if not p.name.startswith("f")) == []  # no temp left
    assert wait_for(lambda: not marked_processes(fuzzed)), marked_processes(fuzzed)
    assert wait_for(lambda: threads_of(fuzzed.ex.pid) <= fuzzed.baseline["threads"] + SERVER_THREADS)
    still_serving(fuzzed)


def test_after_the_run_threads_descriptors_and_commands_are_back_within_bounds(fuzzed: Fuzzed) -> None:
    # (last in the file: runs after everything above; alone, it checks the fresh process)
    pid = fuzzed.ex.pid
    assert wait_for(lambda: not marked_processes(fuzzed)), marked_processes(fuzzed)
    # grpc keeps the server's pool threads it made (at most SERVER_THREADS); a command's
    # watchdog timer ends with it.
    assert wait_for(lambda: threads_of(pid) <= fuzzed.baseline["threads"] + SERVER_THREADS), threads_of(pid)
    assert wait_for(lambda: fds_of(pid) <= fuzzed.baseline["fds"] + 8), (fds_of(pid), fuzzed.baseline)
    still_serving(fuzzed)
    # No handler failed: grpc logs each exception out of a handler (or out of reading a request)
    # with its traceback.
    assert "Traceback" not in fuzzed.ex.output() and "Exception" not in fuzzed.ex.output(), fuzzed.ex.output()[-3000:]
