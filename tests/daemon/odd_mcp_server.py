"""A small stdio MCP server (standard library only) for the edges of
``test_catalog_mcp_third_pass.py``: newline-delimited JSON-RPC 2.0, as the MCP stdio transport
specifies.

Flags: ``--banner TEXT`` (writes TEXT as a line on stdout before it reads anything, as a server
that logs to stdout does), ``--loose`` (adds tools whose input schemas are objects JSON Schema does not
allow: ``properties`` a list, ``required`` a string, a property's schema a number, a ``type``
naming no JSON type, an array's ``items`` a string below ``$defs``, an empty ``anyOf``; and
``fine``, whose valid schema uses boolean schemas, a type list, ``prefixItems`` and properties
named as keywords), ``--latin1`` (adds ``latin1``, whose result's text holds ``caf\\xe9``: a byte
of Latin-1, not UTF-8, written as it is), ``--batch`` (answers ``initialize`` with the version
``2025-03-26``, whose clients receive JSON-RPC batches, and ``tools/list`` and ``tools/call`` each
as a batch: a ``notifications/message`` first, then the answer), ``--structured`` (adds ``data``, a
result of ``structuredContent`` and an empty content list, and ``data_error``, the same with
``isError: true``), ``--no-version`` (answers ``initialize`` without a ``protocolVersion``),
``--number-version`` (answers it with the number ``20250326``), ``--odd-names`` (adds tools whose
``name`` is missing, null, an array and empty), ``--batch-odd KIND`` (writes its ``tools/list``
answer as a batch of another shape: ``empty`` ``[]``, ``nested`` ``[[answer]]``, ``mixed``
``[answer, 5]``, ``ping`` ``[a ping request of its own, answer]``; with ``ping`` it adds ``pongs``,
whose result's text is the JSON list of the answers it got to its requests).

Tools: ``mixed`` (``isError: true`` with text, an image and ``structuredContent``), ``ok`` (a
result of text, an image and ``structuredContent``).
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "mcp"))
from server import PNG_1X1  # noqa: E402  (the 1x1 PNG of the other test server)

PNG = base64.b64encode(PNG_1X1).decode()
OBJ = {"type": "object"}
TOOLS = [
    {"name": "mixed", "description": "An error result with an image and structured content", "inputSchema": OBJ},
    {"name": "ok", "description": "A result with an image and structured content", "inputSchema": OBJ},
]
LOOSE = [
    {"name": "props_list", "description": "properties is a list", "inputSchema": {"type": "object", "properties": []}},
    {"name": "required_text", "description": "required is a string",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": "text"}},
    {"name": "prop_number", "description": "a property's schema is a number",
     "inputSchema": {"type": "object", "properties": {"n": 5}}},
    {"name": "type_word", "description": "a type no JSON type is named",
     "inputSchema": {"type": "object", "properties": {"when": {"type": "date"}}}},
    {"name": "deep_items", "description": "an array's items is a string, down a $defs path",
     "inputSchema": {"type": "object", "$defs": {"a/b": {"type": "array", "items": "string"}},
                     "properties": {"x": {"$ref": "#/$defs/a~1b"}}}},
    {"name": "empty_any", "description": "anyOf is empty", "inputSchema": {"type": "object", "properties": {
        "v": {"anyOf": []}}}},
    # (valid, if unusual: boolean schemas, a type list, properties named as keywords)
    {"name": "fine", "description": "valid", "inputSchema": {"type": "object", "additionalProperties": False,
     "properties": {"type": {"type": ["string", "null"]}, "required": True, "pair": {
         "type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
         "properties": {"enum": [1, 2]}},
     "required": ["type"]}},
]
BATCH = "--batch" in sys.argv[1:]
STRUCTURED = [{"name": "data", "description": "Structured content alone", "inputSchema": OBJ},
              {"name": "data_error", "description": "An error of structured content alone", "inputSchema": OBJ}]
ODD_NAMES = [{"description": "No name", "inputSchema": OBJ}, {"name": None, "inputSchema": OBJ},
             {"name": ["a"], "inputSchema": OBJ}, {"name": "", "inputSchema": OBJ}]
PONGS = [{"name": "pongs", "description": "The answers the server got to its requests", "inputSchema": OBJ}]
LATIN1 = [{"name": "latin1", "description": "A result holding a byte of Latin-1", "inputSchema": OBJ}]


def send(msg: dict | list) -> None:
    if BATCH and isinstance(msg, dict) and "result" in msg and "protocolVersion" not in msg["result"]:
        msg = [{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "batched"}}, msg]
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def main() -> None:
    args = sys.argv[1:]
    if "--banner" in args:
        sys.stdout.write(args[args.index("--banner") + 1] + "\n")
        sys.stdout.flush()
    tools = TOOLS + (LOOSE if "--loose" in args else []) + (LATIN1 if "--latin1" in args else []) + (
        STRUCTURED if "--structured" in args else []) + (ODD_NAMES if "--odd-names" in args else [])
    odd = args[args.index("--batch-odd") + 1] if "--batch-odd" in args else None
    tools += PONGS if odd == "ping" else []
    pongs: list[dict] = []
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        method, rid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if method is None:  # (an answer to a request of ours)
            pongs.append(msg)
            continue
        if method == "initialize":
            answer = {"protocolVersion": "2025-03-26" if BATCH else params.get("protocolVersion"),
                      "capabilities": {"tools": {}}, "serverInfo": {"name": "odd", "version": "1"}}
            if "--no-version" in args:
                del answer["protocolVersion"]
            if "--number-version" in args:
                answer["protocolVersion"] = 20250326
            send({"jsonrpc": "2.0", "id": rid, "result": answer})
        elif method == "tools/list":
            answer = {"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}}
            ping = {"jsonrpc": "2.0", "id": "p1", "method": "ping"}
            send({"empty": [], "nested": [[answer]], "mixed": [answer, 5], "ping": [ping, answer]}[odd] if odd else answer)
        elif method == "tools/call":
            name = params.get("name")
            if name == "latin1":  # (the JSON is written, then its marker replaced by a byte of Latin-1)
                line = json.dumps({"jsonrpc": "2.0", "id": rid, "result": {
                    "content": [{"type": "text", "text": "caf@"}]}}).encode().replace(b"@", b"\xe9")
                sys.stdout.buffer.write(line + b"\n")
                sys.stdout.flush()
                continue
            if name == "pongs":
                send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": json.dumps(pongs)}]}})
                continue
            if name in ("data", "data_error"):
                send({"jsonrpc": "2.0", "id": rid, "result": {"content": [], "isError": name == "data_error",
                                                              "structuredContent": {"city": "Oslo", "temperature": 21.5}}})
                continue
            content = [{"type": "text", "text": f"{name} said so"},
                       {"type": "image", "data": PNG, "mimeType": "image/png"}]
            result = {"content": content, "structuredContent": {"tool": name}}
            if name == "mixed":
                result["isError"] = True
            send({"jsonrpc": "2.0", "id": rid, "result": result})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
