"""The URL shape checks and the public-address rule of web_fetch (tools/web/address.py)."""

from __future__ import annotations

import ipaddress

import pytest

from tools.base import ToolError
from tools.web.address import MAX_URL_CHARS, SystemResolver, allowed, is_public, join, parse_url, resolve

NOT_PUBLIC = [
    "127.0.0.1", "127.255.255.254", "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1",  # loopback, RFC 1918
    "169.254.169.254",  # link-local (cloud metadata)
    "100.64.0.1", "100.127.255.254",  # shared address space (CGNAT)
    "0.0.0.0", "0.1.2.3", "255.255.255.255", "240.0.0.1",  # unspecified, "this network", broadcast, reserved
    "224.0.0.1", "239.255.255.250",  # multicast
    "192.0.2.1", "198.51.100.1", "203.0.113.1", "198.18.0.1", "192.0.0.8",  # documentation, benchmarking, IETF
    "::1", "::", "fe80::1", "fc00::1", "fd12:3456::1", "ff02::1", "fec0::1", "2001:db8::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254",  # IPv4-mapped
    "2002:7f00:1::1", "2002:a00:1::1",  # 6to4 of 127.0.0.1 and 10.0.0.1
    "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::1",  # NAT64 of private addresses; local-use NAT64
    "::7f00:1",  # IPv4-compatible (deprecated)
    "3fff::1", "3fff:fff:ffff::1",  # IPv6 documentation (RFC 9637, 3fff::/20)
    "2001::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo (2001::/32)
]
PUBLIC = ["1.1.1.1", "8.8.8.8", "93.184.215.14", "100.63.255.255", "100.128.0.0", "172.32.0.1", "2606:4700::1111",
          "::ffff:8.8.8.8", "2002:808:808::1", "64:ff9b::808:808",
          "3fff:1000::1"]  # (just past the documentation prefix 3fff::/20)


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_addresses_that_are_not_public(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))


def test_allowed_networks_open_only_themselves() -> None:
    nets = [ipaddress.ip_network("127.0.0.2/32"), ipaddress.ip_network("fd00::/8")]
    assert allowed(ipaddress.ip_address("127.0.0.2"), nets)
    assert allowed(ipaddress.ip_address("::ffff:127.0.0.2"), nets)  # the mapped form of an allowed address
    assert allowed(ipaddress.ip_address("fd00::5"), nets)
    assert not allowed(ipaddress.ip_address("127.0.0.1"), nets)
    assert not allowed(ipaddress.ip_address("127.0.0.3"), nets)
    assert allowed(ipaddress.ip_address("8.8.8.8"), [])


def code(url: object) -> str:
    with pytest.raises(ToolError) as info:
        parse_url(url)
    return info.value.code


@pytest.mark.parametrize("url", ["http://user:secret@example.com/", "https://user@example.com/", "http://@example.com/",
                                 "http://a:b@127.0.0.1:8080/x", "HTTP://USER:PW@EXAMPLE.COM"])
def test_credentials_in_a_url_are_refused_and_never_echoed(url: str) -> None:
    with pytest.raises(ToolError) as info:
        parse_url(url)
    assert info.value.code == "URL_CREDENTIALS"
    assert "secret" not in info.value.message and "PW" not in info.value.message


# A URL whose text is not an http(s) URL of the right shape is refused without quoting the user
# name or password it may hold (urllib's own reason can quote them: it is left out then).
@pytest.mark.parametrize("url", ["http://alice:hunter2@exa mple.com:x/", "ftp://alice:hunter2@example.com/",
                                 "alice:hunter2@example.com/x", "http://alice:hunter2\uff03@example.com/",
                                 "http://alice:hunter2@[::1/", "http://alice:hunter2@example.com:99999/",
                                 "http://alice:hunter2@example.com/\n", "\\\\alice:hunter2@example.com/",
                                 "HTTPS:\\\\alice:hunter2@exa_mple..com\\"])
def test_an_invalid_url_never_echoes_its_credentials(url: str) -> None:
    with pytest.raises(ToolError) as info:
        parse_url(url)
    assert info.value.code in ("URL_INVALID", "URL_CREDENTIALS")
    assert "alice" not in info.value.message and "hunter2" not in info.value.message, info.value.message
    assert info.value.message.startswith("url '")  # (the rest of it is still shown)


# In an http(s) URL a backslash before the query is a slash, and the host follows the scheme
# however many slashes lead to it, as the WHATWG URL standard (a browser) reads it.
@pytest.mark.parametrize("url", ["http:\\\\alice:hunter2@example.com/", "http:/\\alice:hunter2@example.com/",
                                 "http:\\/alice:hunter2@example.com/", "https:alice:hunter2@example.com",
                                 "http:///alice:hunter2@example.com/"])
def test_a_backslash_spelling_of_credentials_is_refused(url: str) -> None:
    with pytest.raises(ToolError) as info:
        parse_url(url)
    assert info.value.code == "URL_CREDENTIALS"
    assert "alice" not in info.value.message and "hunter2" not in info.value.message
    assert "//example.com" in info.value.message


def test_slashes_are_read_as_a_browser_reads_them() -> None:
    assert parse_url("http:\\\\example.com\\a\\b?q=\\#\\").url == "http://example.com/a/b?q=%5C"  # (not in the query)
    assert parse_url("http:///example.com/x").url == "http://example.com/x"
    assert parse_url("https:example.com").url == "https://example.com/"
    assert parse_url("HTTP:\\\\Example.com:8080").host_header == "example.com:8080"


def test_references_are_resolved_as_a_browser_resolves_them() -> None:
    base = "http://base.example:81/dir/page"
    for ref, expected in (("\\\\other.example/x", "http://other.example/x"), ("/\\other.example/x", "http://other.example/x"),
                          ("/\\\\other.example", "http://other.example"), ("///other.example/x", "http://other.example/x"),
                          ("http:\\\\alice:pw@other.example/", "http://alice:pw@other.example/"),
                          ("https:other.example", "https://other.example"), ("\\a\\b", "http://base.example:81/a/b"),
                          ("a\\b?q=\\", "http://base.example:81/dir/a/b?q=\\"), ("http:/x", "http://base.example:81/x"),
                          ("http:x", "http://base.example:81/dir/x"), ("//other.example", "http://other.example")):
        assert join(base, ref) == expected, ref


@pytest.mark.parametrize("url", ["", "example.com", "ftp://example.com/", "file:///etc/passwd", "http://", "http:///",
                                 "http://exa mple.com/", "http://example.com/a\tb", "http://example.com:99999/",
                                 "http://example.com:0/", "http://example.com:x/", "http://[::1/", "http://a..b/",
                                 "gopher://x/", "http://example.com/\n", "javascript:alert(1)", 5, None])
def test_urls_of_the_wrong_shape(url: object) -> None:
    assert code(url) == "URL_INVALID"


def test_url_length_is_checked_at_its_edge() -> None:
    head = "http://example.com/"
    assert parse_url(head + "a" * (MAX_URL_CHARS - len(head))).target.startswith("/a")
    assert code(head + "a" * (MAX_URL_CHARS - len(head) + 1)) == "URL_INVALID"


def test_parts_and_normalisation() -> None:
    u = parse_url("HTTPS://Example.COM/a b/ü?q=ä b&x=%20#frag")
    assert (u.scheme, u.host, u.port) == ("https", "example.com", 443)
    assert u.target == "/a%20b/%C3%BC?q=%C3%A4%20b&x=%20"  # existing escapes kept, the rest encoded
    assert u.url == "https://example.com/a%20b/%C3%BC?q=%C3%A4%20b&x=%20" and u.host_header == "example.com"
    v6 = parse_url("http://[::1]:8080")
    assert (v6.host, v6.port, v6.target, v6.host_header) == ("::1", 8080, "/", "[::1]:8080")
    assert parse_url("http://bücher.example/").host == "xn--bcher-kva.example"


async def test_a_name_is_judged_by_the_addresses_it_resolves_to() -> None:
    with pytest.raises(ToolError) as info:
        await resolve(parse_url("http://localhost:1/"), full_access=False, resolver=SystemResolver())
    assert info.value.code == "ADDRESS_NOT_PUBLIC"
    # numeric forms the resolver accepts are judged by the address they name
    for url in ("http://2130706433/", "http://0x7f.1/", "http://127.1/"):
        with pytest.raises(ToolError) as info:
            await resolve(parse_url(url), full_access=False, resolver=SystemResolver())
        assert info.value.code == "ADDRESS_NOT_PUBLIC", url
    found = await resolve(parse_url("http://localhost:1/"), full_access=True, resolver=SystemResolver())
    assert ipaddress.ip_address("127.0.0.1") in found


async def test_a_name_that_does_not_resolve() -> None:
    with pytest.raises(ToolError) as info:
        await resolve(parse_url("http://no-such-host.invalid/"), full_access=False, resolver=SystemResolver())
    assert info.value.code == "DNS_FAILED"
