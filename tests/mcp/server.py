"""A small MCP server over stdio for the tests (standard library only): newline-delimited
JSON-RPC 2.0 on stdin/stdout, as the MCP stdio transport specifies.

Tools: ``echo {text}``, ``add {a, b}`` (structured content, read-only), ``image`` (a PNG),
``fail`` (``isError``), ``rpc_error`` (a JSON-RPC error), ``crash`` (exits with status 3),
``slow`` (answers only when cancelled: records the cancelled request id in ``--cancel-log``),
``big {bytes}`` (or ``{line}``: a response line of that many bytes), ``grow`` (adds ``extra.tool`` and sends ``notifications/tools/list_changed``),
``garbage`` (writes a line that is not JSON, or with ``{hex}`` the bytes it gives), ``blocks {n, kind}`` (with ``--blocks``: a result of ``n``
content blocks, each a distinct 4-byte ``audio`` binary or a one-character ``text``), ``deaf {until}``
(with ``--deaf``: answers, then reads nothing from stdin until the file ``until`` exists), ``shout {bytes}``
(with ``--shout``: writes that many bytes to stderr, ending in ``END``, then exits with status 5), ``raw {result}``
(with ``--raw``: answers the JSON value ``result`` as the call's result, as it is), ``env {name}`` (a variable of its environment, or ``<unset>``),
``shrink`` (with ``--shrink``: keeps only the first 4 tools and sends ``notifications/tools/list_changed``),
``change_mid_list`` (with ``--stale-cursor``: sends ``notifications/tools/list_changed``, then answers the
next ``tools/list`` with a cursor "invalid cursor" (-32602), adds ``extra.tool`` and announces the change
again, as a server whose list changed between two pages of a listing),
``ping_flood {n}`` (with ``--reply-log PATH``: sends ``n`` pings with the ids ``"f0"`` … while it reads nothing, then
answers), ``odd_requests`` (with ``--reply-log PATH``: sends requests of its own — ``ping`` — whose ids are a lone surrogate, a fraction,
null, an object and ``true``, then one with the id ``"p1"``, then answers; every answer it gets to them is
written to PATH, a JSON line each).

Flags: ``--hang`` (never answers ``initialize``), ``--ignore-term`` (ignores SIGTERM), ``--exit-at-start`` (writes to stderr and exits
with status 7), ``--pidfile PATH`` (its pid, and with ``--child`` also the pid of a child process
it starts in its process group, and with ``--setsid-child`` that of a child it starts in a session of its own,
which sleeps past the end of its parent's stdin, and with ``--double-fork-child`` that of a process
orphaned at once in a session of its own: a double fork), ``--protocol V`` (the version it answers), ``--page-size N``,
``--last-cursor C`` (the last page's ``nextCursor`` is ``C``, not left out; a cursor is the index
of a page's first tool, and an empty one the first page's), ``--last-cursor-json J`` (the same, the
cursor being the JSON value ``J``: a number, or a list of one),
``--dotted`` (adds ``some.tool``), ``--nested`` (adds ``shapes``, whose input schema types integers
inside arrays and objects, and ``models``, whose schema reaches them through ``$defs``, ``anyOf`` with
``null`` and ``allOf``, as Pydantic writes them; both answer the arguments they received as JSON
text: ``5`` and ``5.0`` differ there), ``--long-name`` (adds a tool of a 44-character name), ``--named NAME`` (repeatable: adds a tool of that name answering
``NAME: {text}``), ``--i18n`` (adds tools named and described in Chinese, Russian
and French, and described in Thai, Lao, Khmer and Burmese), ``--many N`` (adds N tools ``t0`` … ``tN-1``),
``--shrink`` (adds ``shrink`` first), ``--hold-restart DIR`` (a start after the first, told by the file
``DIR/started`` the first writes, reads nothing until the file ``DIR/go`` exists: a restart held),
``--no-tools`` (declares no tools capability and answers ``tools/list`` "method not found"),
``--odd-ids`` (answers ``initialize`` and every ``tools/call`` first with ids of other JSON types that
Python takes as equal to the request's — ``true`` for 1, ``1.0``, ``"1"`` — carrying a wrong result, then
with the right id), ``--flood`` (announces ``notifications/tools/list_changed`` after every ``tools/list``; the tool
``listings`` says how many it answered), ``--keyed NAME`` (adds ``keyed``, whose description, title and input schema quote the value of its
variable ``NAME``; the description again 10 characters before its 8192nd; the server's title and a skipped tool's
name with it across their 200th and 128th characters), ``--wide N`` (adds ``wide``, whose input schema is N bytes of compact JSON), ``--deep N`` (adds ``deep``, whose input schema nests N levels of properties), ``--bad-json`` (lone surrogates and an infinite number in its tool list, server info and errors;
a description that is not a string).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zlib



LONG_NAME = "read_the_weather_forecast_for_the_whole_week"  # 44 characters


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")
    ihdr = (1).to_bytes(4, "big") * 2 + bytes([8, 6, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00\xff")) + chunk(b"IEND", b"")


PNG_1X1 = _png()
OBJ = {"type": "object"}
TOOLS = [
    {"name": "echo", "description": "Echo the text back", "inputSchema": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "add", "description": "Add two numbers", "annotations": {"readOnlyHint": True},
     "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
    {"name": "image", "description": "A 1x1 PNG", "inputSchema": OBJ},
    {"name": "fail", "description": "Always fails", "inputSchema": OBJ},
    {"name": "rpc_error", "description": "Answers a JSON-RPC error", "inputSchema": OBJ},
    {"name": "crash", "description": "Exits", "inputSchema": OBJ},
    {"name": "slow", "description": "Waits until cancelled", "inputSchema": OBJ},
    {"name": "big", "description": "Long text", "inputSchema": OBJ},
    {"name": "grow", "description": "Adds a tool", "inputSchema": OBJ},
    {"name": "env", "description": "An environment variable", "inputSchema": OBJ},
    {"name": "garbage", "description": "Writes a line that is not JSON", "inputSchema": OBJ},
    {"name": "bad schema", "description": "Not usable: a space in the name", "inputSchema": OBJ},
    {"name": "no_schema", "description": "Not usable: no inputSchema"},
]

out_lock = threading.Lock()
cancelled: dict[object, threading.Event] = {}
listings: list[object] = []  # the tools/list requests answered
stale: list[bool] = [False]  # (--stale-cursor: the next tools/list with a cursor is refused)
reading = threading.Event()  # (cleared while ping_flood sends: the main loop reads nothing)
reading.set()


DEEP = "__deep__"  # (stands for a schema nested deeper than json.dumps writes: replaced as text)
deep_text = ""


def send(msg: dict) -> None:
    with out_lock:
        sys.stdout.write(json.dumps(msg).replace(json.dumps(DEEP), deep_text) + "\n")
        sys.stdout.flush()


def text(s: str, **extra: object) -> dict:
    return {"content": [{"type": "text", "text": s}], **extra}


def call(rid: object, name: str, args: dict, opts: argparse.Namespace) -> None:
    if name == "echo":
        result = text(f"echo: {args.get('text', '')}")
    elif name == "add":
        total = args.get("a", 0) + args.get("b", 0)
        result = text(str(total), structuredContent={"sum": total})
    elif name == "image":
        result = {"content": [{"type": "text", "text": "a pixel"},
                              {"type": "image", "data": base64.b64encode(PNG_1X1).decode(), "mimeType": "image/png"}]}
    elif name == "fail":
        result = {"content": [{"type": "text", "text": "it failed on purpose"}], "isError": True}
    elif name == "rpc_error":
        message = "no\ud800pe" if opts.bad_json else "nope"
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": "\udfff" if opts.bad_json else -32000, "message": message}})
        return
    elif name == "crash":
        sys.stderr.write("crashing now, on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    elif name == "slow":
        event = cancelled.setdefault(rid, threading.Event())
        event.wait()
        if opts.cancel_log:
            with open(opts.cancel_log, "a") as f:
                f.write(json.dumps(rid) + "\n")
        return  # a cancelled request is not answered
    elif name == "garbage":
        with out_lock:
            sys.stdout.buffer.write(bytes.fromhex(args["hex"]) + b"\n" if "hex" in args else b"this is not JSON-RPC\n")
            sys.stdout.flush()
        return
    elif name == "big" and "line" in args:  # a response line of exactly that many bytes
        empty = json.dumps({"jsonrpc": "2.0", "id": rid, "result": text("")})
        send({"jsonrpc": "2.0", "id": rid, "result": text("x" * (int(args["line"]) - len(empty)))})
        return
    elif name == "big":  # (``then``: a variable whose value follows the x's)
        result = text("x" * int(args.get("bytes", 0)) + os.environ.get(str(args.get("then")), "") * ("then" in args))
    elif name == "grow":
        if not any(t["name"] == "extra.tool" for t in TOOLS):
            TOOLS.append({"name": "extra.tool", "description": "Added at run time", "inputSchema": OBJ})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        result = text("grown")
    elif name == "shrink":
        del TOOLS[4:]
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        result = text("shrunk")
    elif name == "change_mid_list":
        stale[0] = True
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        result = text("changing")
    elif name == "ping_flood":  # (reads nothing meanwhile: its stdin fills with the answers)
        reading.clear()
        try:
            for i in range(int(args.get("n", 0))):
                send({"jsonrpc": "2.0", "id": f"f{i}", "method": "ping"})
        finally:
            reading.set()
        result = text("flooded")
    elif name == "odd_requests":
        for odd in ("\ud800", 1.5, None, {"a": 1}, True, "p1"):
            send({"jsonrpc": "2.0", "id": odd, "method": "ping"})
        result = text("asked")
    elif name == "shout":
        n = int(args.get("bytes", 0))
        for _ in range(n // 65536):
            sys.stderr.write("e" * 65536)
        sys.stderr.write("e" * (n % 65536 - 3) + "END")
        sys.stderr.flush()
        os._exit(5)
    elif name == "blocks":
        n, kind = int(args.get("n", 0)), args.get("kind", "audio")
        result = {"content": [{"type": "audio", "data": base64.b64encode(i.to_bytes(4, "big")).decode(),
                               "mimeType": "audio/wav"} if kind == "audio" else {"type": "text", "text": "b"}
                              for i in range(n)]}
    elif name == "raw":
        result = args.get("result")
    elif name == "extra.tool":
        result = text("extra!")
    elif name in opts.named:
        result = text(f"{name}: {args.get('text', '')}")
    elif name == "some.tool":
        result = text("some.tool ran")
    elif name == LONG_NAME:
        result = text("the long-named tool ran")
    elif name == "listings":
        result = text(str(len(listings)))
    elif name == "env" and args.get("name") == "*argv":  # the arguments it was started with
        result = text(" ".join(sys.argv[1:]))
    elif name == "env" and args.get("name") == "*cwd":  # the working directory it was started in
        result = text(os.getcwd())
    elif name == "env":
        result = text(os.environ.get(str(args.get("name")), "<unset>"))
    elif name in ("shapes", "models"):
        result = text(json.dumps(args, sort_keys=True))
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"unknown tool {name}"}})
        return
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hang", action="store_true")
    ap.add_argument("--exit-at-start", action="store_true")
    ap.add_argument("--pidfile")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--setsid-child", action="store_true")
    ap.add_argument("--double-fork-child", action="store_true")
    ap.add_argument("--protocol", default=None)
    ap.add_argument("--page-size", type=int, default=4)
    ap.add_argument("--cancel-log")
    ap.add_argument("--dotted", action="store_true")
    ap.add_argument("--nested", action="store_true")
    ap.add_argument("--long-name", action="store_true")
    ap.add_argument("--no-tools", action="store_true")
    ap.add_argument("--bad-json", action="store_true")
    ap.add_argument("--i18n", action="store_true")
    ap.add_argument("--many", type=int, default=0)
    ap.add_argument("--shrink", action="store_true")
    ap.add_argument("--deep", type=int, default=0)
    ap.add_argument("--wide", type=int, default=0)
    ap.add_argument("--flood", action="store_true")
    ap.add_argument("--odd-ids", action="store_true")
    ap.add_argument("--keyed")
    ap.add_argument("--stale-cursor", action="store_true")
    ap.add_argument("--last-cursor")
    ap.add_argument("--last-cursor-json")
    ap.add_argument("--reply-log")
    ap.add_argument("--named", action="append", default=[])
    ap.add_argument("--blocks", action="store_true")
    ap.add_argument("--deaf", action="store_true")
    ap.add_argument("--ignore-term", action="store_true")
    ap.add_argument("--shout", action="store_true")
    ap.add_argument("--raw", action="store_true")
    ap.add_argument("--hold-restart")
    opts = ap.parse_known_args()[0]  # (others are kept: `env` of "*argv" shows them)
    if opts.ignore_term:  # (only a SIGKILL ends it)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    keyed = ""
    if opts.keyed:  # a server handed a key (envFrom) that quotes it in its tool's definition
        keyed = value = os.environ.get(opts.keyed, "<unset>")
        TOOLS.insert(0, {"name": "keyed", "title": f"Keyed {value}",
                         # (and again across the 8192nd character, where the daemon cuts a description)
                         "description": (head := f"Calls the service with key {value}; ") + "p" * (8182 - len(head))
                         + value,
                         "inputSchema": {"type": "object", "description": f"uses {value}", "properties": {
                             "token": {"type": "string", "default": value, "description": f"e.g. {value}"},
                             value: {"type": "string"}}}})
        # (a tool left out for its name, the key across its 128th character, where names are cut)
        TOOLS.insert(1, {"name": "bad name " + "n" * (118 - len("bad name ")) + value, "inputSchema": OBJ})
    if opts.reply_log:
        TOOLS.append({"name": "odd_requests", "description": "Sends requests with odd ids", "inputSchema": OBJ})
        TOOLS.append({"name": "ping_flood", "description": "Sends n pings, reading nothing", "inputSchema": OBJ})
    if opts.raw:
        TOOLS.append({"name": "raw", "description": "Answers the result it is given", "inputSchema": OBJ})
    if opts.shout:
        TOOLS.append({"name": "shout", "description": "Floods stderr, then exits", "inputSchema": OBJ})
    if opts.deaf:
        TOOLS.append({"name": "deaf", "description": "Reads nothing until a file exists", "inputSchema": OBJ})
    if opts.blocks:
        TOOLS.append({"name": "blocks", "description": "A result of n content blocks", "inputSchema": OBJ})
    if opts.stale_cursor:
        TOOLS.append({"name": "change_mid_list", "description": "Changes the list between two pages", "inputSchema": OBJ})
    if opts.flood:
        TOOLS.append({"name": "listings", "description": "How many tools/list were answered", "inputSchema": OBJ})
    if opts.wide:  # a tool whose input schema is about --wide bytes of JSON (its text in a description)
        TOOLS.insert(0, {"name": "wide", "description": "A wide schema", "inputSchema": {
            "type": "object", "description": "x" * (opts.wide - len('{"type":"object","description":""}'))}})
    if opts.deep:  # a tool whose input schema nests properties --deep levels down
        global deep_text
        deep_text = '{"type": "object", "properties": {"x": ' * opts.deep + "{}" + "}}" * opts.deep
        TOOLS.insert(0, {"name": "deep", "description": "A deep schema", "inputSchema": {
            "type": "object", "properties": {"x": DEEP}}})
    for named in opts.named:  # (a tool of that name, answering as echo does, with its name)
        TOOLS.append({"name": named, "description": f"Echoes as {named}", "inputSchema": OBJ})
    if opts.long_name:  # with a server name of 20 or more characters, past the 64 a provider takes
        TOOLS.insert(0, {"name": LONG_NAME, "description": "A long name", "inputSchema": OBJ})
    if opts.nested:  # integers inside an array, an object and an array of objects
        TOOLS.insert(0, {"name": "shapes", "description": "Answers its arguments", "inputSchema": {
            "type": "object", "properties": {
                "sizes": {"type": "array", "items": {"type": "integer"}},
                "box": {"type": "object", "properties": {"w": {"type": "integer"}, "ratio": {"type": "number"}}},
                "points": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}}}}}}})
        TOOLS.insert(0, {"name": "models", "description": "Answers its arguments", "inputSchema": {
            "$defs": {"Point": {"type": "object", "title": "Point", "required": ["x"], "properties": {
                "x": {"type": "integer", "title": "X"}, "y": {"anyOf": [{"type": "number"}, {"type": "null"}]}}}},
            "type": "object", "properties": {
                "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
                "at": {"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}]},
                "path": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
                "size": {"allOf": [{"type": "integer"}, {"minimum": 0}]},
                "scale": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}}})
    if opts.dotted:  # a tool name no provider accepts as is
        TOOLS.insert(0, {"name": "some.tool", "description": "A dotted name", "inputSchema": OBJ})
    if opts.shrink:
        TOOLS.insert(0, {"name": "shrink", "description": "Keeps only the first 4 tools", "inputSchema": OBJ})
    if opts.i18n:  # names and descriptions in other scripts than ASCII
        TOOLS[:0] = [{"name": "天气查询", "description": "查询城市的天气预报", "inputSchema": OBJ},
                     {"name": "погода", "description": "Прогноз погоды для города", "inputSchema": OBJ},
                     {"name": "carte", "description": "La carte du Café : plats et crème brûlée", "inputSchema": OBJ},
                     # (written without spaces between words; each: "find the weather forecast of a city")
                     {"name": "th_weather", "description": "ค้นหาพยากรณ์อากาศของเมือง", "inputSchema": OBJ},
                     {"name": "lo_weather", "description": "ຊອກຫາພະຍາກອນອາກາດຂອງເມືອງ", "inputSchema": OBJ},
                     {"name": "km_weather", "description": "ស្វែងរកព្យាករណ៍អាកាសធាតុនៃទីក្រុង", "inputSchema": OBJ},
                     {"name": "my_weather", "description": "မြို့၏မိုးလေဝသခန့်မှန်းချက်ကိုရှာပါ", "inputSchema": OBJ}]
    TOOLS.extend({"name": f"t{i}", "description": f"Generated tool {i}", "inputSchema": OBJ} for i in range(opts.many))
    if opts.bad_json:  # what Python's JSON reader takes and strict JSON writers refuse (written as escapes)
        TOOLS[:0] = [{"name": "odd_text", "description": "text \ud800 here", "inputSchema": OBJ},
                     {"name": "inf_schema", "inputSchema": {"type": "object", "properties": {
                         "n": {"type": "number", "maximum": float("inf")}}}},
                     {"name": "sur_schema", "inputSchema": {"type": "object", "properties": {"\udfff": {}}}},
                     {"name": "bad\ud800name", "inputSchema": OBJ},
                     {"name": "odd_desc", "description": {"not": "a string"}, "title": 5, "inputSchema": OBJ}]
    if opts.exit_at_start:
        sys.stderr.write("cannot start: missing settings\n")
        sys.exit(7)
    pids = [os.getpid()]
    if opts.child:  # a child that would outlive a server stopped by its pid alone
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        pids.append(child.pid)
    if opts.setsid_child:  # one that leaves the server's group (a daemonising helper)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        pids.append(child.pid)
    if opts.double_fork_child:  # one orphaned at once: a child starts it in a session of its own and exits
        middle = subprocess.run([sys.executable, "-c", "import subprocess, sys; print(subprocess.Popen("
                                 "[sys.executable, '-c', 'import time; time.sleep(600)'], stdin=subprocess.DEVNULL, "
                                 "stdout=subprocess.DEVNULL, start_new_session=True).pid)"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, check=True)
        pids.append(int(middle.stdout))
    if opts.pidfile:
        with open(opts.pidfile + ".tmp", "w") as f:
            f.write(" ".join(map(str, pids)))
        os.replace(opts.pidfile + ".tmp", opts.pidfile)
    if opts.hold_restart:
        started = os.path.join(opts.hold_restart, "started")
        if os.path.exists(started):  # (a restart: held until the test lets it go)
            while not os.path.exists(os.path.join(opts.hold_restart, "go")):
                time.sleep(0.01)
        else:
            open(started, "w").close()
    for line in sys.stdin:
        reading.wait()
        if not line.strip():
            continue
        msg = json.loads(line)
        method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if method is None:  # an answer to a request of ours (odd_requests)
            if opts.reply_log:
                with open(opts.reply_log, "a") as f:
                    f.write(json.dumps(msg) + "\n")
            continue
        if opts.hang:
            continue
        if opts.odd_ids and method in ("initialize", "tools/call"):
            for odd in ([True] if rid == 1 else []) + [float(rid), str(rid)]:
                send({"jsonrpc": "2.0", "id": odd, "result": {"protocolVersion": f"answered to id {odd!r}",
                                                               **text(f"answered to id {odd!r}")}})
        if method == "initialize":
            version = opts.protocol or params.get("protocolVersion")
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": version, "capabilities": {} if opts.no_tools else {"tools": {"listChanged": True}},
                "serverInfo": {"name": "lens-test-server" + ("\ud800" if opts.bad_json else ""), "version": "1.0",
                               # (the key across the 200th character, where serverInfo's texts are cut)
                               **({"title": "t" * 190 + keyed} if keyed else {})}}})
        elif method == "tools/list" and opts.no_tools:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
        elif method == "tools/list" and stale[0] and params.get("cursor") is not None:
            stale[0] = False
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "invalid cursor: the tool list changed"}})
            TOOLS.append({"name": "extra.tool", "description": "Added at run time", "inputSchema": OBJ})
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        elif method == "tools/list":
            cursor = params.get("cursor")
            start = int((cursor[0] if isinstance(cursor, list) else cursor) or 0)  # (a list: --last-cursor-json)
            page = TOOLS[start:start + opts.page_size]
            result: dict = {"tools": page}
            if start + opts.page_size < len(TOOLS):
                result["nextCursor"] = str(start + opts.page_size)
            elif opts.last_cursor is not None:
                result["nextCursor"] = opts.last_cursor
            elif opts.last_cursor_json is not None:
                result["nextCursor"] = json.loads(opts.last_cursor_json)
            send({"jsonrpc": "2.0", "id": rid, "result": result})
            listings.append(rid)
            if opts.flood:
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        elif method == "tools/call" and params.get("name") == "deaf":  # (in this loop: it reads nothing meanwhile)
            send({"jsonrpc": "2.0", "id": rid, "result": text("deaf")})
            until = str((params.get("arguments") or {}).get("until"))
            while not os.path.exists(until):
                time.sleep(0.01)
        elif method == "tools/call":
            threading.Thread(target=call, args=(rid, params.get("name"), params.get("arguments") or {}, opts),
                             daemon=True).start()
        elif method == "notifications/cancelled":
            cancelled.setdefault(params.get("requestId"), threading.Event()).set()
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
