"""web_fetch under hostile DNS (F-TOOL-8: "timeout covers DNS", "every redirect re-validated;
connection pinned to the validated address"): a resolver that changes its answer after the
check, redirects to names of private addresses, lookups that never answer.

The hostile resolver is given to the tool (its ``resolver``) and also installed as trio's
hostname resolver, so a lookup of the name anywhere else in the process (a connection made to
the name) would get its second answer too. Two servers share one port: the allowed one on
127.0.0.2 (``web.allowedPrivateNetworks``), the forbidden one on 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from typing import Any, AsyncIterator

import pytest
import trio

from tools.artifacts import ArtifactStore
from tools.base import ToolRegistry
from tools.web import web_fetch_tool
from tools.web.address import MAX_LOOKUP_THREADS

from .conftest import call, text_of
from .server import WebServer

ALLOWED = [ipaddress.ip_network("127.0.0.2/32")]


class HostileResolver:
    """Answers each name from ``answers``: a list of address lists, one per lookup (the last one
    repeats); a name without answers does not resolve. An IP address is answered as itself."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[tuple[Any, ...]]:
        try:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (str(ipaddress.IPv4Address(host)), port))]
        except ValueError:
            pass
        self.asked.append(host)
        turns = self.answers.get(host)
        if not turns:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        ips = turns[min(self.asked.count(host) - 1, len(turns) - 1)]
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (ip, port, 0, 0)) if ":" in ip
                else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port)) for ip in ips]

    # trio's hostname resolver interface
    async def getaddrinfo(self, host: bytes | str, port: Any, family: int = 0, type: int = 0, proto: int = 0,
                          flags: int = 0) -> list[tuple[Any, ...]]:
        name = host.decode() if isinstance(host, bytes) else host
        return await self(name, int(port))

    async def getnameinfo(self, sockaddr: Any, flags: int) -> tuple[str, str]:
        # (it knows names, not what an address is called: a reverse lookup finds nothing)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


@pytest.fixture
def allowed_server(other_server: WebServer) -> WebServer:
    return other_server  # (127.0.0.2, the address ALLOWED opens)


@pytest.fixture
async def forbidden_server(nursery: trio.Nursery, allowed_server: WebServer) -> WebServer:
    server = WebServer("127.0.0.1", port=allowed_server.port)  # (the same port: only the address differs)
    await nursery.start(server.run)
    server.reply("/secret", "internal", "text/plain")
    return server


@pytest.fixture
async def hostile() -> AsyncIterator[HostileResolver]:
    resolver = HostileResolver({})
    trio.socket.set_custom_hostname_resolver(resolver)
    try:
        yield resolver
    finally:
        trio.socket.set_custom_hostname_resolver(None)


def tool(artifacts: ArtifactStore, resolver: HostileResolver) -> ToolRegistry:
    return ToolRegistry([web_fetch_tool(artifacts, networks=ALLOWED, resolver=resolver)])


async def test_a_name_that_changes_its_address_after_the_check_is_not_followed(
        artifacts: ArtifactStore, allowed_server: WebServer, forbidden_server: WebServer,
        hostile: HostileResolver) -> None:
    hostile.answers["rebind.example"] = [["127.0.0.2"], ["127.0.0.1"]]
    allowed_server.reply("/page", "allowed", "text/plain")
    r = await call(tool(artifacts, hostile), "web_fetch", {"url": f"http://rebind.example:{allowed_server.port}/page"})
    assert not r.is_error and text_of(r) == "allowed"
    assert hostile.asked == ["rebind.example"]  # looked up once: the connection went to the checked address
    assert forbidden_server.requests == []
    assert allowed_server.requests[0].headers["host"] == f"rebind.example:{allowed_server.port}"


async def test_a_name_with_a_private_address_among_public_ones_is_fetched_from_an_allowed_one(
        artifacts: ArtifactStore, allowed_server: WebServer, forbidden_server: WebServer,
        hostile: HostileResolver) -> None:
    hostile.answers["mixed.example"] = [["127.0.0.1", "127.0.0.2"]]
    allowed_server.reply("/page", "allowed", "text/plain")
    r = await call(tool(artifacts, hostile), "web_fetch", {"url": f"http://mixed.example:{allowed_server.port}/page"})
    assert text_of(r) == "allowed"
    assert forbidden_server.requests == []  # the private address was never tried


async def test_a_redirect_to_a_name_of_a_private_address_is_refused(
        artifacts: ArtifactStore, allowed_server: WebServer, forbidden_server: WebServer,
        hostile: HostileResolver) -> None:
    port = allowed_server.port
    hostile.answers["inside.example"] = [["127.0.0.1"]]
    hostile.answers["rebind.example"] = [["127.0.0.2"], ["127.0.0.1"]]  # private from its second lookup on
    to_inside = allowed_server.redirect("/to-inside", f"http://inside.example:{port}/secret")
    allowed_server.redirect("/to-self", f"http://rebind.example:{port}/secret")
    for url in (to_inside, f"http://rebind.example:{port}/to-self"):
        r = await call(tool(artifacts, hostile), "web_fetch", {"url": url})
        assert r.error_code == "ADDRESS_NOT_PUBLIC", text_of(r)
    assert text_of(r).startswith("ADDRESS_NOT_PUBLIC: rebind.example is at 127.0.0.1, not a public address")
    assert hostile.asked == ["inside.example", "rebind.example", "rebind.example"]
    assert forbidden_server.requests == []
    assert [q.path for q in allowed_server.requests] == ["/to-inside", "/to-self"]


async def test_a_name_of_a_mapped_address_is_refused_naming_it_in_dotted_form(
        artifacts: ArtifactStore, allowed_server: WebServer, hostile: HostileResolver) -> None:
    hostile.answers["mapped.example"] = [["::ffff:127.0.0.1", "::ffff:10.0.0.1"]]
    r = await call(tool(artifacts, hostile), "web_fetch", {"url": f"http://mapped.example:{allowed_server.port}/x"})
    assert text_of(r).startswith("ADDRESS_NOT_PUBLIC: mapped.example is at ::ffff:127.0.0.1, ::ffff:10.0.0.1, not a "
                                 "public address"), text_of(r)
    assert allowed_server.requests == []


async def test_a_lookup_that_never_answers_ends_at_the_timeout(artifacts: ArtifactStore, autojump_clock) -> None:
    class Silent:
        async def __call__(self, host: str, port: int) -> list[tuple[Any, ...]]:
            await trio.sleep_forever()
            raise AssertionError

    reg = ToolRegistry([web_fetch_tool(artifacts, resolver=Silent())])
    r = await call(reg, "web_fetch", {"url": "http://silent.example/", "timeout": 5})
    assert r.error_code == "FETCH_TIMEOUT"
    assert text_of(r) == ("FETCH_TIMEOUT: looking up the address of silent.example did not finish within 5 s "
                          "(0 redirect(s) followed)")


async def test_lookups_that_never_return_hold_a_bounded_number_of_threads(
        artifacts: ArtifactStore, full: ToolRegistry, monkeypatch: pytest.MonkeyPatch, autojump_clock) -> None:
    # The system resolver blocks in a thread that cancellation cannot stop: each timed-out call
    # leaves one behind. They must not grow with the calls, nor take the threads the rest of the
    # daemon shares (trio's default limiter: 40 blocked lookups would stall every other thread).
    release = threading.Event()
    lock = threading.Lock()
    entered = [0]
    all_in = trio.Event()
    system_getaddrinfo = socket.getaddrinfo

    def hung_getaddrinfo(host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0,
                         flags: int = 0) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if not name.endswith(".hung.example"):
            return system_getaddrinfo(host, port, family, type, proto, flags)
        if flags & socket.AI_NUMERICHOST:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        with lock:
            entered[0] += 1
            if entered[0] == MAX_LOOKUP_THREADS:
                trio.from_thread.run_sync(all_in.set)
        release.wait()
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hung_getaddrinfo)
    reg = ToolRegistry([web_fetch_tool(artifacts)])
    try:
        for i in range(3 * MAX_LOOKUP_THREADS):
            r = await call(reg, "web_fetch", {"url": f"http://n{i}.hung.example/", "timeout": 1})
            assert r.error_code == "FETCH_TIMEOUT" and "looking up the address of" in text_of(r), text_of(r)
        await all_in.wait()
        assert entered[0] == MAX_LOOKUP_THREADS
        assert trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0
        assert await trio.to_thread.run_sync(lambda: "free") == "free"
    finally:
        release.set()
