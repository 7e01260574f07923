"""The executor process: a gRPC server (proto/executor.proto) in front of one workspace."""

PROTOCOL_VERSION = 8


def token_fits_a_header(token: str) -> bool:
    """Whether grpc can send ``authorization: Bearer <token>``: printable ASCII only (it refuses
    to send any other header value, so every call would fail)."""
    return all(" " <= ch <= "~" for ch in token)


def split_host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` split at its last colon, with a port of 0-65535 in decimal digits and an IPv6
    host in brackets (in a bare one, which colon starts the port is a guess); ``None`` otherwise.
    The host is not checked here."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or len(port) > 5 or int(port) > 65535:
        return None
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        return None
    return host, int(port)
