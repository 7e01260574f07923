"""The executor process: a gRPC server (proto/executor.proto) in front of one workspace."""

PROTOCOL_VERSION = 8


def token_fits_a_header(token: str) -> bool:
    """Whether grpc can send ``authorization: Bearer <token>``: printable ASCII only (it refuses
    to send any other header value, so every call would fail)."""
    return all(" " <= ch <= "~" for ch in token)
