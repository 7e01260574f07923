"""Request guards: Host/Origin/content-type checks, bearer authentication, trust levels.

Every route but ``GET /health``, ``POST /pair/requests`` and the dashboard page needs
``Authorization: Bearer <credential>``. Read-only credentials may read; only strong-trust ones
may change anything or touch raw config. Requests whose ``Host`` is not the bound address or a
loopback name, or whose ``Origin`` is foreign, are refused (DNS-rebinding and CSRF defence).
Bodies are read as JSON whatever their ``Content-Type`` says (docs/decisions.md, "Daemon and HTTP").
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import urlsplit

from .errors import LensError, shortened
from .pairing import PairFileInvalid, PairStore, Principal

HTTP_SPACE = " \t"  # (RFC 9110 OWS)
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


class AuthRequired(LensError):
    code = "AUTH_REQUIRED"


class AuthInvalid(LensError):
    code = "AUTH_INVALID"


class Forbidden(LensError):
    code = "FORBIDDEN"


class HostForbidden(LensError):
    code = "HOST_FORBIDDEN"


class OriginForbidden(LensError):
    code = "ORIGIN_FORBIDDEN"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def split_host(value: str) -> tuple[str, int | None]:
    """``"host:port"`` (or ``"[v6]:port"``) -> (host lowercased, port or None)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        host, rest = value[: end + 1], value[end + 1 :]
    else:
        host, _, port_part = value.partition(":")
        rest = ":" + port_part if port_part else ""
    port = None
    if rest.startswith(":") and rest[1:].isdigit():
        port = int(rest[1:])
    elif rest:
        raise ValueError(value)
    return host, port


def as_sent(value: str) -> str:
    """A header's value as the client wrote it, for a message: the server hands headers over as
    Latin-1 text, so a client's UTF-8 (`é`) read as `Ã©`; shown as its characters when it is
    UTF-8, as read otherwise."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


@dataclass
class Guard:
    pairs: PairStore
    bound_host: str
    port: int = 0  # set once the server is bound

    # The routes that need no credential (health, and pairing registration), by path: every
    # method on them, so that one they do not take is 405 as the route answers it ("this route
    # needs a credential" told the client something false), and OPTIONS says what they take.
    PUBLIC_PATHS: ClassVar[frozenset[str]] = frozenset({"/api/v1/health", "/api/v1/pair/requests"})

    def allowed_hosts(self) -> set[str]:
        hosts = set(LOOPBACK_NAMES)
        if self.bound_host not in ("0.0.0.0", "::", ""):
            hosts.add(self.bound_host.lower())
            if ":" in self.bound_host and not self.bound_host.startswith("["):
                hosts.add(f"[{self.bound_host.lower()}]")
        return hosts

    def check_host(self, host_header: str | None) -> None:
        if not host_header:
            raise HostForbidden("a Host header is required")
        shown = shortened(as_sent(host_header))  # (a header of kilobytes is not echoed whole)
        try:
            host, port = split_host(host_header)
        except ValueError:
            raise HostForbidden(f"Host {shown!r} is not valid") from None
        if host not in self.allowed_hosts() and not (self._wildcard() and _is_ip(host)):
            raise HostForbidden(f"Host {shown!r} is not this daemon's address")
        if port is not None and self.port and port != self.port:
            raise HostForbidden(f"Host {shown!r} is not this daemon's address")

    def _wildcard(self) -> bool:
        """Bound to every address: any of the machine's addresses may be in ``Host`` — an IP
        address, which a rebound DNS name (what this check stops) never is."""
        return self.bound_host in ("0.0.0.0", "::", "")

    def check_origin(self, origin: str | None) -> None:
        if origin is None:
            return
        shown = shortened(as_sent(origin))  # (a header of kilobytes is not echoed whole)
        try:
            # (urlsplit itself refuses an unclosed `[`, a stray `]`, a bracketed host that is no
            # IP address and characters NFKC turns into delimiters: that was a 500 and a traceback)
            parts = urlsplit(origin)
            port = parts.port
        except ValueError:
            raise OriginForbidden(f"Origin {shown!r} is not valid") from None
        # RFC 6454: scheme://host[:port] and nothing else (no path, not even "/", no query,
        # fragment or user info), which is all a browser sends; anything more is no origin.
        if parts.scheme in ("http", "https") and (
                origin.lower() != f"{parts.scheme}://{parts.netloc}".lower() or "@" in parts.netloc):
            raise OriginForbidden(f"Origin {shown!r} is not valid: an origin is scheme://host[:port] only")
        host = (parts.hostname or "").lower()
        host = f"[{host}]" if ":" in host else host
        known = host in self.allowed_hosts() or host.strip("[]") in self.allowed_hosts() or (self._wildcard() and _is_ip(host))
        if parts.scheme not in ("http", "https") or not known:
            raise OriginForbidden(f"Origin {shown!r} is not this daemon")
        if port is None:
            port = 443 if parts.scheme == "https" else 80
        if self.port and port != self.port:
            raise OriginForbidden(f"Origin {shown!r} is not this daemon")

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise AuthRequired("this route needs Authorization: Bearer <credential>")
        scheme, _, token = authorization.partition(" ")
        # HTTP's white space around a value is the space and the tab alone: str.strip() would also
        # drop NBSP, NEL and the separators 0x1C-0x1F, taking a credential with one of them for it
        token = token.strip(HTTP_SPACE)
        if scheme.lower() != "bearer" or not token:
            raise AuthRequired("use Authorization: Bearer <credential>")
        stray = next((c for c in token if not " " <= c <= "~"), None)
        if stray is not None:  # (named by code point only: the credential is never echoed)
            raise AuthInvalid(f"the credential holds U+{ord(stray):04X}, which no credential holds: a credential "
                              "is printable ASCII, sent as `lens pair approve` printed it")
        principal = self.pairs.authenticate(token)
        if principal is None and not self.pairs.valid:
            # The daemon's fault, not the credential's: a client must not discard a good one.
            raise PairFileInvalid("no credential can be checked while the daemon's pair file is invalid "
                                  "(the daemon log says why); try again once it is fixed")
        if principal is None:
            raise AuthInvalid("the credential is not valid (unknown, revoked or re-issued)")
        return principal

    @staticmethod
    def require_strong(principal: Principal, what: str) -> None:
        if not principal.strong:
            raise Forbidden(f"a read-only credential cannot {what}; approve the client with --strong-trust")
