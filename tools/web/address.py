"""Which URLs ``web_fetch`` may request and which addresses it may connect to (F-TOOL-8).

:func:`parse_url` checks a URL's shape (http/https, a host, no credentials, a valid port) and
returns its parts with the host in ASCII (IDNA) form. :func:`resolve` looks the host up and
returns the addresses the call may connect to: only public ones (and those of the networks the
server config allows) unless the call has full access.
The caller connects to one of these exact addresses (never to the name again), so a DNS answer
that changes between the check and the connection cannot move the request elsewhere. A host that
is an IP address is judged as it is; names are looked up by a :data:`Resolver` the tool is given,
by default a :class:`SystemResolver`.

A public address is a globally routable unicast one: not private (RFC 1918, ULA), loopback,
link-local, multicast, reserved, unspecified, shared (CGNAT 100.64/10), IETF protocol
assignments (192.0.0/24), documentation or benchmarking space. IPv6 forms that carry an IPv4 address (IPv4-mapped, 6to4, NAT64
``64:ff9b::/96``) are judged by the IPv4 address they carry.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

import trio

from events.secrets import Secrets

from ..base import ToolError

_NO_SECRETS = Secrets()

MAX_URL_CHARS = 8192
MAX_LOOKUP_THREADS = 8  # a SystemResolver's lookups at once (each holds a thread until getaddrinfo returns)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_IETF = ipaddress.ip_network("192.0.0.0/24")  # protocol assignments (Python counts only parts as private)
_DOC6 = ipaddress.ip_network("3fff::/20")  # IPv6 documentation, RFC 9637 (2024: Python 3.11 calls it global)
# Characters kept as they are in a request target; everything else (spaces, non-ASCII) is
# percent-encoded as UTF-8. '%' is kept: a URL's existing escapes are not escaped twice.
_SAFE_PATH = "/%:@!$&'()*+,;=-._~"
_SAFE_QUERY = _SAFE_PATH + "?"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")


@dataclass(frozen=True)
class Url:
    scheme: str  # "http" | "https"
    host: str  # ASCII: an IDNA name, an IPv4 address or an IPv6 address (no brackets)
    port: int
    target: str  # path and query, percent-encoded ASCII ("/" at least)
    url: str  # the whole URL, normalised, without its fragment

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def parse_url(url: object, *, what: str = "url", secrets: Secrets | None = None) -> Url:
    """The parts of an http(s) URL. Raises ``URL_INVALID`` (shape) or ``URL_CREDENTIALS``
    (a user name or password in it). ``secrets``: keys replaced whole before the URL is cut in a
    message (for a URL the caller did not send, a redirect's target: see :func:`shown_url`)."""
    if not isinstance(url, str) or not url:
        raise ToolError("URL_INVALID", f"{what} must be a non-empty string")
    if len(url) > MAX_URL_CHARS:
        raise ToolError("URL_INVALID", f"{what} is longer than {MAX_URL_CHARS} characters")
    if any((ch.isspace() and ch != " ") or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise ToolError("URL_INVALID", f"{what} {shown_url(url, secrets)} holds control characters or line breaks")
    url = special_slashes(url.strip(" "))  # (a space inside is percent-encoded, as a browser does)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        shown = shown_url(url, secrets)  # (urllib's reason may quote the user name and password: then it is left out)
        reason = f" ({exc})" if shown == repr(_cut(url, secrets)) else ""
        raise ToolError("URL_INVALID", f"{what} {shown} is not a valid URL{reason}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ToolError("URL_INVALID", f"{what} {shown_url(url, secrets)}: only http:// and https:// URLs can be fetched")
    if "@" in parts.netloc:
        # (shown without them: the point is that they are secret)
        shown = urlunsplit((scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, ""))
        raise ToolError("URL_CREDENTIALS", f"{what} {_cut(shown, secrets)!r} carries a user name or password "
                                           f"(user:pass@host): URLs with credentials are not fetched")
    host = parts.hostname or ""
    if not host:
        raise ToolError("URL_INVALID", f"{what} {shown_url(url, secrets)} has no host")
    if port == 0:
        raise ToolError("URL_INVALID", f"{what} {shown_url(url, secrets)}: port 0 cannot be connected to")
    host = _ascii_host(host, url, what, secrets)
    port = port if port is not None else (443 if scheme == "https" else 80)
    path = quote(parts.path or "/", safe=_SAFE_PATH)
    target = path + ("?" + quote(parts.query, safe=_SAFE_QUERY) if parts.query else "")
    shown_host = f"[{host}]" if ":" in host else host
    netloc = shown_host if parts.port is None else f"{shown_host}:{port}"
    return Url(scheme, host, port, target, urlunsplit((scheme, netloc, path, target[len(path) + 1:], "")))


def special_slashes(ref: str, base_scheme: str | None = None) -> str:
    """``ref`` with its slashes read as the WHATWG URL standard (and so a browser) reads them in an
    http(s) URL, where RFC 3986 (``urllib``) reads them otherwise: before the query a backslash is
    a slash; after ``http:`` or ``https:`` (another scheme than ``base_scheme``'s) comes the
    authority, with or without slashes; and a reference starting with two or more slashes names a
    host. So ``http:\\\\me:pw@host/``, ``\\\\host/x`` and ``///host`` name the host they do for a
    browser. ``base_scheme``: the scheme of the URL ``ref`` is resolved against (a redirect's), or
    ``None`` for a URL on its own. Other schemes are left as they are."""
    m = _SCHEME.match(ref)
    scheme = m.group(1).lower() if m else base_scheme
    if scheme not in ("http", "https"):
        return ref
    cut = min((i for i in (ref.find("?"), ref.find("#")) if i >= 0), default=len(ref))
    head, tail = ref[:cut].replace("\\", "/"), ref[cut:]
    rest = head[m.end():] if m else head
    if m and scheme != base_scheme:  # (an absolute URL: its authority follows the scheme)
        return f"{scheme}://{rest.lstrip('/')}{tail}"
    if rest.startswith("//"):  # (a host, however many slashes lead to it)
        return f"{head[:m.end()] if m else ''}//{rest.lstrip('/')}{tail}"
    return head + tail


def join(base: str, ref: str) -> str:
    """``ref`` (a redirect's ``Location``, a link) resolved against the http(s) URL ``base``, its
    slashes read as a browser reads them (:func:`special_slashes`). Raises ``ValueError`` for what
    ``urljoin`` cannot read (``http://[::1``)."""
    return urljoin(base, special_slashes(ref, urlsplit(base).scheme.lower()))


def shown_url(url: str, secrets: Secrets | None = None) -> str:
    """``url`` quoted for an error message: its first 200 characters, any user name and password
    taken out (the part of its authority up to the last ``@``; a string without a scheme is read
    as ``user:pass@host``). ``secrets``: replaced whole before the cut, for a URL the caller did
    not send (a redirect's target): a tool's error is scrubbed of whole keys alone, and a cut
    made first would leave a key's first characters."""
    m = _SCHEME.match(url)
    start = m.end() if m else 0
    while start < len(url) and url[start] in "/\\":
        start += 1
    if m and start == m.end() and m.group(1).lower() not in ("http", "https"):
        start = 0  # ("me:pw@host": no scheme, a user name)
    end = next((i for i in range(start, len(url)) if url[i] in "/\\?#"), len(url))
    if "@" in url[start:end]:
        url = url[:start] + url[start:end].rpartition("@")[2] + url[end:]
    return repr(_cut(url, secrets))


def _cut(url: str, secrets: Secrets | None) -> str:
    return (secrets or _NO_SECRETS).cut(url, 200)


def _ascii_host(host: str, url: str, what: str, secrets: Secrets | None) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if host.startswith("[") or "%" in host:
        raise ToolError("URL_INVALID", f"{what} {shown_url(url, secrets)} has an invalid host")
    try:
        ascii_host = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError:
        raise ToolError("URL_INVALID", f"{what} {shown_url(url, secrets)} has a host name that cannot be encoded (IDNA)") from None
    name = ascii_host[:-1] if ascii_host.endswith(".") else ascii_host
    labels = name.split(".")
    if not name or len(name) > 253 or not all(0 < len(label) <= 63 for label in labels) or not all(
            ch.isalnum() or ch in "-_" for ch in name.replace(".", "")):
        raise ToolError("URL_INVALID", f"{what} {shown_url(url, secrets)} has an invalid host name")
    return ascii_host.lower()


def is_public(ip: IPAddress) -> bool:
    """Whether ``ip`` is a globally routable unicast address (see the module docstring)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return False
        if ip.ipv4_mapped is not None:
            return is_public(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            return is_public(ip.sixtofour)
        if ip in _NAT64:
            return is_public(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip in _NAT64_LOCAL or ip in _DOC6 or ip.is_site_local:
            return False
    elif ip in _SHARED or ip in _IETF:
        return False
    return ip.is_global and not (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast
                                 or ip.is_reserved or ip.is_unspecified)


def shown_address(ip: IPAddress) -> str:
    """``ip`` for a message: an IPv4-mapped IPv6 address with its IPv4 part dotted
    (``::ffff:127.0.0.1``, where ``str`` gives ``::ffff:7f00:1``), any other as ``str`` gives it."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return f"::ffff:{ip.ipv4_mapped}" + (f"%{ip.scope_id}" if ip.scope_id else "")
    return str(ip)


def shown_host(host: str) -> str:
    """A URL's host (:attr:`Url.host`) for a message: an IP address as :func:`shown_address` shows it."""
    try:
        return shown_address(ipaddress.ip_address(host))
    except ValueError:
        return host


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
AddrInfo = tuple[Any, ...]  # one entry of getaddrinfo's answer: (family, type, proto, canonname, sockaddr)
Resolver = Callable[[str, int], Awaitable[Sequence[AddrInfo]]]
"""Looks up ``(host, port)`` (an ASCII name) as ``getaddrinfo`` does; raises ``OSError`` if it cannot."""


class SystemResolver:
    """The system's resolver (``getaddrinfo``), run in worker threads, at most ``max_threads`` at
    once. A lookup that the call's time limit cancels is abandoned (``getaddrinfo`` cannot be
    interrupted): its thread runs on until the system gives up and keeps its place until then.
    So lookups that never return hold at most ``max_threads`` threads, and never the threads the
    rest of the daemon shares (trio's default limiter); later lookups wait for a place within
    their call's time limit. Numeric hosts (``2130706433``, ``0x7f.1``) are read without a thread."""

    def __init__(self, max_threads: int = MAX_LOOKUP_THREADS) -> None:
        self._limiter = trio.CapacityLimiter(max_threads)

    async def __call__(self, host: str, port: int) -> Sequence[AddrInfo]:
        try:
            return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        except socket.gaierror:
            pass  # (a name: looked up below)
        lookup = functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
        return await trio.to_thread.run_sync(lookup, abandon_on_cancel=True, limiter=self._limiter)


def allowed(ip: IPAddress, networks: Sequence[IPNetwork] = ()) -> bool:
    """Whether a call without full access may connect to ``ip``: a public address, or one in
    ``networks`` (the server config's ``web.allowedPrivateNetworks``)."""
    if is_public(ip):
        return True
    plain = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip
    if isinstance(plain, ipaddress.IPv6Address) and plain.scope_id:
        plain = ipaddress.IPv6Address(str(plain).split("%", 1)[0])
    return any(plain.version == n.version and plain in n for n in networks)


async def resolve(url: Url, *, full_access: bool, networks: Sequence[IPNetwork] = (),
                  resolver: Resolver) -> list[IPAddress]:
    """The addresses ``url``'s host may be reached at, in resolver order: with ``full_access``
    all of them, else the :func:`allowed` ones. A host that is an IP address (a zone id too) is
    that address, judged without a lookup. Raises ``DNS_FAILED`` (no address) or
    ``ADDRESS_NOT_PUBLIC`` (none of its addresses may be used)."""
    try:
        found: list[IPAddress] = [ipaddress.ip_address(url.host)]
    except ValueError:
        found = await _look_up(url, resolver)
    if full_access:
        return found
    usable = [ip for ip in found if allowed(ip, networks)]
    if not usable:
        shown = ", ".join(shown_address(ip) for ip in found[:4])
        raise ToolError("ADDRESS_NOT_PUBLIC",
                        f"{shown_host(url.host)} is at {shown}, not a public address; only public addresses may be fetched "
                        f"(the server config keys web.allowPrivateAddresses and web.allowedPrivateNetworks grant more)")
    return usable


async def _look_up(url: Url, resolver: Resolver) -> list[IPAddress]:
    try:
        infos = await resolver(url.host, url.port)
    except (OSError, UnicodeError) as exc:  # (socket.gaierror is an OSError)
        raise ToolError("DNS_FAILED", f"{url.host} could not be resolved ({exc})") from None
    found: list[IPAddress] = []
    for family, _type, _proto, _canon, sockaddr in infos:
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        try:
            ip = ipaddress.ip_address(sockaddr[0])
        except ValueError:
            continue
        if family == socket.AF_INET6 and len(sockaddr) >= 4 and sockaddr[3]:
            ip = ipaddress.IPv6Address(f"{ip}%{sockaddr[3]}")
        if ip not in found:
            found.append(ip)
    if not found:
        raise ToolError("DNS_FAILED", f"{url.host} has no IPv4 or IPv6 address")
    return found
