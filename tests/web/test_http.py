"""The HTTP client's connection step (tools/web/http.py): several checked addresses of one host."""

from __future__ import annotations

import ipaddress
import socket

import pytest
import trio

from tools.base import ToolError
from tools.web.address import parse_url
from tools.web.http import ATTEMPT_DELAY, request

from .server import WebServer


@pytest.fixture
def stalled_port() -> tuple[int, list[socket.socket]]:
    """A port of 127.0.0.2 whose accept queue is full: a connection to it hangs (SYNs dropped).
    The same port number is then free on 127.0.0.1."""
    listener = socket.socket()
    listener.bind(("127.0.0.2", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.2", port), timeout=5)  # (the one pending slot of backlog 0)
    held = [listener, filler]
    yield port, held
    for s in held:
        s.close()


async def test_an_address_that_does_not_answer_costs_a_quarter_second(stalled_port, nursery: trio.Nursery) -> None:
    port, _ = stalled_port
    server = WebServer("127.0.0.1", port=port)
    await nursery.start(server.run)
    server.reply("/x", "from the second address", "text/plain")
    url = parse_url(f"http://example.test:{port}/x")
    start = trio.current_time()
    with trio.fail_after(5):
        resp = await request(url, [ipaddress.ip_address("127.0.0.2"), ipaddress.ip_address("127.0.0.1")],
                             max_body=1000)
    assert resp.body == b"from the second address"
    assert ATTEMPT_DELAY <= trio.current_time() - start < 3
    assert server.requests[0].headers["host"] == f"example.test:{port}"


async def test_a_refused_address_moves_on_at_once(web_server: WebServer) -> None:
    web_server.reply("/x", "ok", "text/plain")
    with socket.socket() as s:  # (127.0.0.2 at that port: nobody listens, so it refuses)
        s.bind(("127.0.0.2", web_server.port))
    url = parse_url(f"http://example.test:{web_server.port}/x")
    start = trio.current_time()
    resp = await request(url, [ipaddress.ip_address("127.0.0.2"), ipaddress.ip_address("127.0.0.1")], max_body=10)
    assert resp.body == b"ok" and trio.current_time() - start < ATTEMPT_DELAY


async def test_no_address_connects() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ToolError) as info:
        await request(parse_url(f"http://example.test:{port}/"), [ipaddress.ip_address("127.0.0.1"),
                                                                  ipaddress.ip_address("127.0.0.2")], max_body=10)
    assert info.value.code == "CONNECTION_FAILED" and "127.0.0.1" in info.value.message
