"""The executor process: a gRPC server (proto/executor.proto) in front of one workspace."""

PROTOCOL_VERSION = 8
# The calls that write (one at a time under Core's execution-domain lock); ``Stop`` names one by
# its call id, and answers once it has ended.
EDITING_CALLS = frozenset({"edit_file", "patch_file", "restore"})
# The most Core waits, from the ``Stop`` sent, for the executor's answer: an aborted command's
# end and exit (tools.workspace_tools), a given-up editing call's end (runtime.executors,
# ``ExecutorPool.call_ended``). The executor answers once the command has ended, at most its grace
# between SIGTERM and SIGKILL (``tools.executor.commands.KILL_GRACE_S``, 2 s) after it got the
# stop for a command that ignores SIGTERM; this leaves as long again for a loaded host. An
# executor that never answers (stopped, hung) holds the abort no longer than this.
ABORT_STOP_ANSWER_WAIT_S = 4.0


# grpc refuses a call whose headers pass 8 KiB (by chance up to 16 KiB, then always): a token of at
# most 4 KiB leaves room for the rest of a call's headers (about 600 bytes).
MAX_TOKEN_CHARS = 4096
# The shortest token an executor takes (shorter is EXECUTOR_TOKEN_MISSING): a guessable secret.
MIN_TOKEN_CHARS = 16


def token_fault(token: str) -> str | None:
    """Why ``token`` cannot be an executor's token (completing "the token …"), or None. One
    shorter than :data:`MIN_TOKEN_CHARS` is one no executor takes. Only printable ASCII can be
    sent at all (grpc refuses any other header value), and a token past :data:`MAX_TOKEN_CHARS`
    would fail some calls, then all."""
    if len(token) < MIN_TOKEN_CHARS:
        return (f"must be at least {MIN_TOKEN_CHARS} characters, as `lens executor serve` takes it; "
                f"it has {len(token)}")
    if not all(" " <= ch <= "~" for ch in token):
        return "must be printable ASCII (a gRPC header cannot carry other characters)"
    if len(token) > MAX_TOKEN_CHARS:
        return (f"must be at most {MAX_TOKEN_CHARS} characters (gRPC refuses a call whose headers pass 8 KiB); "
                f"it has {len(token)}")
    return None


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
