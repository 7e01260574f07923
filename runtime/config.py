"""Lens configuration: ``config/lens.jsonc`` (JSONC), typed and validated with msgspec.

Every key has a built-in default, so the daemon starts without any file. Keys are camelCase in
the file. Unknown keys are ignored (a newer config must not stop an older daemon) but listed in
the start-up notes. Relative paths resolve against the process working directory.
See ``config/lens.example.jsonc`` for every key with its meaning.
"""

from __future__ import annotations

import ipaddress
import os
import re
import typing
from pathlib import Path
from typing import Any, Collection, Literal, Mapping
from urllib.parse import urlsplit

import msgspec

from events.secrets import Secrets
from tools.catalog_config import LocalPtcConfig, ToolsConfig
from tools.catalog_policy import MAX_POLICY_ENTRIES, PolicyError, check_policy_map
from tools.executor import split_host_port
from tools.web.address import shown_url

from . import jsonc
from .atomicfile import FileTooLarge, others_can_change, others_can_write, read_regular_file
from .body_hints import first_refused
from .errors import LensError, short_reason, shortened, shortened_json
from .credentials import (KEY_IN_PLACE_OF_A_NAME, WELL_KNOWN_KEY_ENV, config_secrets, credential_literals,
                          is_key_in_place_of_a_name)
from .key_hints import UnknownKey, hinted, refused_key_hint, unknown_keys_listed
from .mcp_config import McpServerConfig, check_mcp_servers
from .trust import loose_directory_above, swap_fix, the_fix

DEFAULT_CONFIG_PATH = Path("config/lens.jsonc")
DEFAULT_PAIR_FILE = "pair.json"
# The largest config file read or written (start-up, `lens pair`, `PUT /config/files/…`). Parsing
# takes about ten times the text in memory; a real config is a few KiB.
MAX_CONFIG_BYTES = 4 * 1024 * 1024


class ConfigError(LensError):
    code = "CONFIG_INVALID"


class _C(msgspec.Struct, rename="camel", kw_only=True):
    pass


class ServerConfig(_C):
    host: str = "127.0.0.1"
    port: int = 7420
    max_body_bytes: int = 1024 * 1024
    heartbeat_seconds: float = 15.0
    sse_buffer_events: int = 2048
    max_pending_pairings: int = 32


# The prompt-cache ttls OpenAI's explicit cache breakpoints accept (runtime.providers.caching).
CACHE_TTLS = ("30m", "12h")


class ModelConfig(_C):
    id: str
    context_window: int = 131072
    images: bool = False
    explicit_cache: bool = False
    cache_ttl: str | None = None  # explicit cache breakpoints' ttl (default: the provider's, else 30m)
    # the largest answer, in tokens (Anthropic ``max_tokens``, to which a thinking budget is added;
    # Responses ``max_output_tokens``; Chat ``max_completion_tokens`` on OpenAI's own API, else
    # ``max_tokens``). None: the provider's default (Anthropic 8192; Responses/Chat: not sent).
    max_output_tokens: int | None = None


def split_model_ref(ref: str) -> tuple[str, str]:
    """A model reference ``<provider id>/<model id>`` as (provider id, model id), split at its
    first ``/``: a provider id has none, a model id may (``openrouter/meta/llama``). A part
    that is missing is ``""`` (``"faux"`` is ``("faux", "")``); each caller refuses such a
    reference in its own words."""
    provider_id, _, model_id = ref.partition("/")
    return provider_id, model_id


def blank_around(ref: str) -> str | None:
    """What blank surrounds a model reference (one copied with a space, the likeliest slip), in
    the words every refusal of it uses: ``it begins with a blank``, ``it ends with a blank``,
    ``it begins and ends with a blank``, ``it is all blank``; None when there is none. A blank is
    what ``str.strip`` removes."""
    if ref and not ref.strip():
        return "it is all blank"
    begins, ends = ref.lstrip() != ref, ref.rstrip() != ref
    if not (begins or ends):
        return None
    return f"it {' and '.join(w for w, f in (('begins', begins), ('ends', ends)) if f)} with a blank"


Protocol = Literal["openai-responses", "openai-chat", "anthropic", "faux"]


class ProviderConfig(_C):
    id: str
    protocol: Protocol
    base_url: str | None = None
    api_key_env: str | None = None
    enabled: bool = True
    models: list[ModelConfig] = []
    script: list[Any] | None = None  # faux only: scripted turns
    # How long a request may go without a byte from the server (each attempt) — and a stream
    # without a byte of the answer (keep-alives are none) — and how many times
    # the SDK retries a failed one: a server that accepts and never answers holds a session
    # "running" for timeoutSeconds x (maxRetries + 1).
    timeout_seconds: float = 600.0
    max_retries: int = 2
    cache_ttl: str | None = None  # default ttl of this provider's models' explicit cache breakpoints


class LogConfig(_C):
    synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = "FULL"
    max_event_bytes: int = 32 * 1024 * 1024
    compression_level: int = 3
    # Train a zstd dictionary from the log's own events once it holds AUTO_DICTIONARY_AFTER
    # events (F-LOG-7: optional). False: never train one; one already in use stays in use.
    auto_dictionary: bool = True


class SessionsConfig(_C):
    idle_seconds: float = 300.0
    snapshot_every: int = 500
    max_restarts: int = 3


class ExecutorConfig(_C):
    """Where workspace tools run: a local child per project (default) or one remote executor."""

    address: str | None = None  # "host:port" of a remote `lens executor serve`; None: spawn locally
    token_env: str | None = None  # environment variable holding the remote executor's token
    shared_filesystem: bool = False  # verified by a probe file before local skills/LSP use paths
    # Variables of the daemon's environment named as credentials (GITHUB_TOKEN…) that a local
    # executor, and so the agent's commands, is given all the same (never the configured keys).
    pass_env: list[str] = []


class WebConfig(_C):
    """``web_fetch``'s address policy (F-TOOL-8)."""

    # true grants every web_fetch call full access: loopback, private, link-local and other
    # non-public addresses may be fetched (a trusted network only). Default: public addresses only.
    allow_private_addresses: bool = False
    # Non-public networks (CIDR, e.g. "10.1.0.0/16") that web_fetch may reach without full access.
    allowed_private_networks: list[str] = []


class WebSearchConfig(_C):
    """``web_search``'s backend: an Exa-compatible ``POST {baseUrl}/search`` (F-TOOL-8)."""

    base_url: str | None = "https://api.exa.ai"  # None: web_search answers WEB_SEARCH_NOT_CONFIGURED
    api_key_env: str | None = "EXA_API_KEY"  # the key comes only from this variable; None: no key sent


class CompactionConfig(_C):
    """Context compaction (F-CTX-2); a session's saved value wins over these (PATCH /sessions/{id})."""

    auto: bool = True  # compact before a model request whose estimate reaches triggerPercent
    trigger_percent: int = 80  # of the model's contextWindow, 1 to 100
    # The newest rounds kept as written after the summary, in estimated tokens (at most half the
    # threshold); 0 keeps only the inputs not answered yet.
    keep_recent_tokens: int = 20_000


class PruneToolResultsConfig(_C):
    """Tool-result pruning (F-CTX-2), off by default: before a model request, results of calls
    older than the last ``keepRecentRounds`` model responses whose estimate is at least
    ``minTokens`` become a placeholder in the Working Context (the Full Context keeps them)."""

    enabled: bool = False
    keep_recent_rounds: int = 3
    min_tokens: int = 1000


class ContextConfig(_C):
    compaction: CompactionConfig = msgspec.field(default_factory=CompactionConfig)
    prune_tool_results: PruneToolResultsConfig = msgspec.field(default_factory=PruneToolResultsConfig)


class Config(_C):
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    data_dir: str = ".lens"
    providers: list[ProviderConfig] = []
    default_model: str | None = None
    pair_file: str | None = None  # default: pair.json beside the main config
    log: LogConfig = msgspec.field(default_factory=LogConfig)
    sessions: SessionsConfig = msgspec.field(default_factory=SessionsConfig)
    executor: ExecutorConfig = msgspec.field(default_factory=ExecutorConfig)
    web: WebConfig = msgspec.field(default_factory=WebConfig)
    web_search: WebSearchConfig = msgspec.field(default_factory=WebSearchConfig)
    context: ContextConfig = msgspec.field(default_factory=ContextConfig)
    mcp_servers: dict[str, McpServerConfig] = {}  # stdio MCP servers by name (runtime.mcp_config)
    tools: ToolsConfig = msgspec.field(default_factory=ToolsConfig)  # deferral and policy (tools/catalog.py)
    local_ptc: LocalPtcConfig | None = None  # programmatic_tool_run, on when present (tools/ptc)


def parse_config(text: str | bytes, where: str = "config") -> Config:
    """Parse and validate config text. Raises :class:`ConfigError` naming the problem."""
    check_size(text, where)
    try:
        data = jsonc.loads(text)
    except jsonc.JsoncError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level must be an object")
    literal = _literal_key(data)
    if literal is not None:
        raise ConfigError(f"{where}: {literal}")
    protocol = _unknown_protocol(data)
    if protocol is not None:
        raise ConfigError(f"{where}: {protocol}")
    try:
        cfg = msgspec.convert(data, Config)
    except msgspec.ValidationError as exc:
        if "[...]" in str(exc):  # (msgspec does not name a map's keys: which MCP server's `command`?)
            exc = msgspec.ValidationError(first_refused(data, Config, "$") or str(exc))
        reason = short_reason(exc)
        raise ConfigError(f"{where}: {reason}{refused_key_hint(Config, reason)}") from None
    check_config(cfg, where)
    return cfg


def _unknown_protocol(data: dict[str, Any]) -> str | None:
    """Why a provider entry's ``protocol`` is refused (missing, or not one of :data:`Protocol`),
    naming the provider, the value and the protocols it takes; or None. msgspec's own reason
    (``Invalid enum value 'grpc' - at `$.providers[1].protocol```) named neither the provider nor
    what a protocol may be."""
    providers = data.get("providers")
    if not isinstance(providers, list):
        return None
    allowed = typing.get_args(Protocol)
    takes = ", ".join(repr(p) for p in allowed[:-1]) + f" or {allowed[-1]!r}"
    for i, p in enumerate(providers):
        if not isinstance(p, dict):
            continue
        pid = p.get("id")
        # (the key's path as every other refusal of a config value names it, the provider by its id too)
        named = f"provider {shortened(pid)!r}: " if isinstance(pid, str) else ""
        if "protocol" not in p:
            return f"{named}providers[{i}].protocol is missing; it takes {takes}"
        value = p["protocol"]
        if isinstance(value, str) and value in allowed:
            continue
        shown = repr(shortened(value)) if isinstance(value, str) else shortened_json(value)
        return f"{named}providers[{i}].protocol {shown} is not one this version knows; it takes {takes}"
    return None


def _is_literal_key(name: Any) -> bool:
    """Whether a config key names a credential given as a value (``apiKey``, ``api_key``,
    ``API-KEY``…), not the variable holding one (``apiKeyEnv``)."""
    return isinstance(name, str) and name.lower().replace("_", "").replace("-", "") == "apikey"


def _literal_key(data: dict[str, Any]) -> str | None:
    """Why a config that writes a key itself is refused, or None. Keys come only from environment
    variables (F-MOD-6): a literal one was ignored as an unknown key, and the provider then failed
    at its first request (``AUTH_FAILED``), with the key left in a file meant to be shared. The
    value is never quoted."""
    places: list[tuple[str, Any, str]] = []
    providers = data.get("providers")
    if isinstance(providers, list):
        for i, p in enumerate(providers):
            pid = p.get("id") if isinstance(p, dict) else None
            named = f"provider {shortened(pid)!r}" if isinstance(pid, str) else f"providers[{i}]"
            places.append((named, p, "apiKeyEnv"))
    places.append(("webSearch", data.get("webSearch"), "webSearch.apiKeyEnv"))
    for named, section, env_key in places:
        if isinstance(section, dict):
            for name in section:
                if _is_literal_key(name):
                    return (f"{named}: {shortened(name)!r} holds a key, and keys are read only from environment "
                            f"variables: put it in one and name that variable with {env_key.rpartition('.')[2]!r} "
                            f"(remove {shortened(name)!r} from the file)")
    return None


def check_size(text: str | bytes, where: str) -> None:
    """:class:`ConfigError` for config text larger than :data:`MAX_CONFIG_BYTES` (UTF-8)."""
    # (a str has at most as many characters as its UTF-8 bytes, and at least a quarter as many)
    if len(text) > MAX_CONFIG_BYTES or (isinstance(text, str) and len(text) * 4 > MAX_CONFIG_BYTES
                                        and len(text.encode("utf-8", "surrogatepass")) > MAX_CONFIG_BYTES):
        raise ConfigError(f"{where}: the config is larger than {MAX_CONFIG_BYTES} bytes (the limit for a config file)")


# (key, value, lowest, highest): the ranges in which each number keeps the daemon usable. The body
# limit's floor keeps room for a config write (a lower one would refuse the write that fixes it).
def _ranges(cfg: Config) -> list[tuple[str, float, float, float]]:
    s, lg, ss = cfg.server, cfg.log, cfg.sessions
    return [
        ("server.port", s.port, 0, 65535),
        ("server.maxBodyBytes", s.max_body_bytes, 64 * 1024, 1024**3),
        ("server.heartbeatSeconds", s.heartbeat_seconds, 0.1, 86400),
        ("server.sseBufferEvents", s.sse_buffer_events, 1, 10_000_000),
        ("server.maxPendingPairings", s.max_pending_pairings, 1, 100_000),
        ("log.maxEventBytes", lg.max_event_bytes, 64 * 1024, 1024**3),
        ("log.compressionLevel", lg.compression_level, 1, 22),
        ("sessions.idleSeconds", ss.idle_seconds, 0.1, 365 * 86400),
        ("sessions.snapshotEvery", ss.snapshot_every, 1, 10_000_000),
        ("sessions.maxRestarts", ss.max_restarts, 0, 1000),
        ("context.compaction.triggerPercent", cfg.context.compaction.trigger_percent, 1, 100),
        ("context.compaction.keepRecentTokens", cfg.context.compaction.keep_recent_tokens, 0, 1_000_000_000),
        ("context.pruneToolResults.keepRecentRounds", cfg.context.prune_tool_results.keep_recent_rounds, 0, 1_000_000),
        ("tools.mcpDeferAbove", cfg.tools.mcp_defer_above, 0, 1_000_000),
        ("context.pruneToolResults.minTokens", cfg.context.prune_tool_results.min_tokens, 1, 1_000_000_000),
        *[(f"providers[{i}].timeoutSeconds", p.timeout_seconds, 1, 86400) for i, p in enumerate(cfg.providers)],
        *[(f"providers[{i}].maxRetries", p.max_retries, 0, 10) for i, p in enumerate(cfg.providers)],
    ]


_HOST_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _valid_host(host: str) -> bool:
    """An IP address (IPv6 with or without brackets) or a DNS host name."""
    try:
        ipaddress.ip_address(host[1:-1] if host.startswith("[") and host.endswith("]") else host)
        return True
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    return 0 < len(name) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in name.split("."))


def _valid_base_url(url: str) -> bool:
    import httpx2  # (here: every `lens` command loads this module, only a configured URL needs it)

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises for a port that is not one)
        # as the providers' SDKs parse it: a control character or a host IDNA refuses passed,
        # and every request then raised from the SDK and crashed the session's actor
        httpx2.URL(url)
    except (ValueError, httpx2.InvalidURL):
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and not any(ch.isspace() for ch in url)


_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[/\\]*([^/\\?#]*)")


def _quoted_url(url: str) -> str:
    """A refused URL for the message: as :func:`shown_url` shows it (without its user name and
    password), or not at all when it holds an ``@`` after its authority: a password with an
    unescaped ``/``, ``?`` or ``#`` (``http://me:pa/ss@host``) ends the authority early, and
    ``shown_url`` would show it."""
    m = _AUTHORITY.match(url)
    authority = m.group(1) if m else url  # (no scheme: all of it may be `user:pass@host`)
    if url.count("@") != authority.count("@"):
        return "the URL given (not quoted: it holds an '@' after its host, perhaps in a password)"
    return shown_url(url)


def check_base_url(url: str, what: str, instead: str, key_from: str) -> None:
    """:class:`ConfigError` ``"<what> must …"`` for a provider's base URL that is no http(s) URL
    with a host (quoted without credentials, ``instead`` says what to do) or that carries a user
    name or password (never quoted; ``key_from`` says where the key comes from). A configured
    ``baseUrl`` and the built-in providers' ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` alike."""
    if not _valid_base_url(url):
        raise ConfigError(f"{what} must be an http:// or https:// URL with a host, not {_quoted_url(url)} ({instead})")
    if _has_credentials(url):
        # (a secret in the config file, which the config-file API serves; and the SDKs' HTTP
        # client sends it as Basic auth instead of the key: never quoted, see shown_url)
        raise ConfigError(f"{what} must not carry a user name or password (user:pass@host): "
                          f"a key comes only from {key_from}")


def _has_credentials(url: str) -> bool:
    """Whether a URL :func:`_valid_base_url` takes carries a user name or password
    (``user:pass@host``, ``user@host``, ``:pass@host``): the SDKs' HTTP client would send them as
    Basic auth, in place of the key's header."""
    import httpx2

    return "@" in urlsplit(url).netloc or bool(httpx2.URL(url).userinfo)


def _valid_address(address: str) -> bool:
    """``host:port`` (``[v6]:port``) with a host :func:`_valid_host` takes and a port 1–65535."""
    parts = split_host_port(address)
    return parts is not None and parts[1] >= 1 and _valid_host(parts[0])


def _is_env_name(name: str) -> bool:
    """Whether an environment variable can have ``name``: a non-empty one without ``=`` or NUL
    (``A=B`` would be read as variable ``A``; a lookup of either finds nothing, ever)."""
    return bool(name) and "=" not in name and "\0" not in name


def _key_in_place_of_a_name(where: str, field: str, name: str | None) -> None:
    """Refuse a variable's name that is a key itself (:func:`credentials.is_key_in_place_of_a_name`):
    a key pasted where its variable's name belongs was echoed as that name ("needs its key in the
    environment variable sk-…") in answers and notes. The value is never quoted. (An MCP
    server's ``envFrom`` and ``env`` names: :func:`runtime.mcp_config.check_mcp_servers`.)"""
    if is_key_in_place_of_a_name(name):
        raise ConfigError(f"{where}: {field} {KEY_IN_PLACE_OF_A_NAME}")


def check_config(cfg: Config, where: str) -> None:
    """Raise :class:`ConfigError` naming the first value out of its range or shape."""
    for key, value, lo, hi in _ranges(cfg):
        if not lo <= value <= hi:  # (also false for NaN)
            # (exact bounds: `:g` printed 1 GiB as 1.07374e+09, a number no config may hold)
            raise ConfigError(f"{where}: {key} must be {lo} to {hi}, not {shortened(repr(value))}")
    if not _valid_host(cfg.server.host):
        raise ConfigError(f"{where}: server.host {cfg.server.host[:100]!r} is not an IP address or host name")
    if not cfg.data_dir or "\0" in cfg.data_dir:
        raise ConfigError(f"{where}: dataDir must be a non-empty path")
    if cfg.pair_file and "\0" in cfg.pair_file:  # ("" or null: pair.json beside the main config)
        raise ConfigError(f"{where}: pairFile must be a path without NUL characters")
    ids = [p.id for p in cfg.providers]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ConfigError(f"{where}: provider ids must be unique (repeated: {', '.join(sorted(dup))})")
    for p in cfg.providers:
        if not p.id or "/" in p.id:
            raise ConfigError(f"{where}: provider id {p.id!r} must be non-empty and without '/'")
    if cfg.executor.address is not None and not _valid_address(cfg.executor.address):
        # (quoted without what comes before an '@': `user:password@host:port` is no address, and
        # its password is not echoed; the token comes from tokenEnv)
        raise ConfigError(f"{where}: executor.address must be 'host:port' with a port from 1 to 65535"
                          f"{', without a user name or password' if '@' in cfg.executor.address else ''}, "
                          f"not {cfg.executor.address.rpartition('@')[2][:200]!r}")
    if cfg.executor.address is not None and not cfg.executor.token_env:
        raise ConfigError(f"{where}: executor.tokenEnv must name the environment variable with the remote executor's token")
    if any(not _is_env_name(name) for name in cfg.executor.pass_env):
        raise ConfigError(f"{where}: executor.passEnv must list environment variable names")
    _key_in_place_of_a_name(where, "executor.tokenEnv", cfg.executor.token_env)
    if cfg.executor.token_env is not None and not _is_env_name(cfg.executor.token_env):
        raise ConfigError(f"{where}: executor.tokenEnv must name an environment variable (or be null)")
    if cfg.executor.token_env and cfg.executor.address is None:
        # (after the checks of its value, which say first what is wrong with it: a key pasted in
        # is told as one. A token with no executor to give it to: the daemon spawned a local
        # executor without a word, and the agent's commands ran on this host where a remote one
        # was most likely meant)
        raise ConfigError(f"{where}: executor.tokenEnv is set but executor.address is not: the token is for a "
                          f"remote executor; set executor.address to its 'host:port', or make executor.tokenEnv "
                          f"null to run a local executor")
    for p in cfg.providers:
        # ("" is no key, as null: decided earlier, and daemons' configs say it)
        _key_in_place_of_a_name(where, f"provider {p.id!r}: apiKeyEnv", p.api_key_env)
        if p.api_key_env and not _is_env_name(p.api_key_env):
            raise ConfigError(f"{where}: provider {p.id!r}: apiKeyEnv must name an environment variable "
                              f"(or be null: no key needed)")
        if p.base_url is not None:
            check_base_url(p.base_url, f"{where}: provider {p.id!r}: baseUrl", "omit it for the vendor's public API",
                           "the environment variable apiKeyEnv names")
        model_ids = [m.id for m in p.models]
        if "" in model_ids or len(set(model_ids)) != len(model_ids):
            raise ConfigError(f"{where}: provider {p.id!r}: model ids must be non-empty and unique")
        for key, ttl in [(f"provider {p.id!r}", p.cache_ttl), *[(f"provider {p.id!r} model {m.id!r}", m.cache_ttl) for m in p.models]]:
            if ttl is not None and ttl not in CACHE_TTLS:
                # (an Anthropic user writes Anthropic's own lifetimes, "5m" or "1h": say whose these are)
                unused = "" if p.protocol.startswith("openai-") else \
                    f" (the lifetime of OpenAI explicit cache breakpoints: the {p.protocol} protocol does not use it)"
                raise ConfigError(f"{where}: {key}: cacheTtl must be {' or '.join(map(repr, CACHE_TTLS))}, "
                                  f"not {ttl[:40]!r}{unused}")
        for m in p.models:
            if m.max_output_tokens is not None and m.max_output_tokens < 1:
                raise ConfigError(f"{where}: provider {p.id!r} model {m.id!r}: maxOutputTokens must be a positive integer")
            if m.context_window < 1:
                raise ConfigError(f"{where}: provider {p.id!r} model {m.id!r}: contextWindow must be a positive integer")
    for i, net in enumerate(cfg.web.allowed_private_networks):
        try:
            ipaddress.ip_network(net, strict=False)
        except ValueError:
            raise ConfigError(f"{where}: web.allowedPrivateNetworks[{i}] must be an IP network such as "
                              f"'10.0.0.0/8' or 'fd00::/8', not {net[:100]!r}") from None
    ws = cfg.web_search
    if ws.base_url is not None and (not _valid_base_url(ws.base_url) or _has_credentials(ws.base_url)):
        raise ConfigError(f"{where}: webSearch.baseUrl must be an http:// or https:// URL with a host and no "
                          f"credentials, not {_quoted_url(ws.base_url)} (null turns web_search off)")
    _key_in_place_of_a_name(where, "webSearch.apiKeyEnv", ws.api_key_env)
    if ws.api_key_env is not None and not _is_env_name(ws.api_key_env):
        raise ConfigError(f"{where}: webSearch.apiKeyEnv must name an environment variable (or be null)")
    check_mcp_servers(cfg.mcp_servers, where, ConfigError)
    native = cfg.local_ptc.native_capabilities if cfg.local_ptc is not None else None
    for key, patterns in (("tools.deferred", cfg.tools.deferred), ("tools.eager", cfg.tools.eager),
                          ("localPtc.nativeCapabilities", native or [])):
        if any(not p or len(p) > 256 for p in patterns):
            raise ConfigError(f"{where}: {key} entries must be tool names or patterns of 1 to 256 characters")
        if len(patterns) > MAX_POLICY_ENTRIES:
            raise ConfigError(f"{where}: {key} has more than {MAX_POLICY_ENTRIES} entries")
    try:
        check_policy_map(cfg.tools.policy, "tools.policy")
    except PolicyError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if cfg.default_model is not None:  # ("" is no model: only null means "no default")
        blank = blank_around(cfg.default_model)
        if blank is not None:
            raise ConfigError(f"{where}: defaultModel must be '<provider id>/<model id>' with no blank around it: {blank}")
        provider, model = split_model_ref(cfg.default_model)
        if not provider or not model:
            raise ConfigError(f"{where}: defaultModel must be '<provider id>/<model id>', not {cfg.default_model!r}")


def configured_secrets(path: Path | None, environ: Mapping[str, str]) -> tuple[Secrets, str | None]:
    """The keys a ``lens`` process with the config at ``path`` (None: its default place, as
    ``lens serve`` without ``--config`` reads it) knows: the values ``environ`` holds under the
    config's credential variables and its MCP servers' credential literals
    (:func:`config_secrets`), and a note (None when the config was read). Built before anything else the process says, so that its errors (a bad value in
    that very config: a key pasted into a model name or a URL) leave without the keys.

    A config that cannot be read gives the SDKs' own variables and, when it is no valid config,
    those it names anyway (``apiKeyEnv``, ``tokenEnv`` wherever they stand, read from the JSONC
    if it parses, else from the text), with the reason in the note."""
    try:
        cfg, _, _ = load_config(path)
        return config_secrets(cfg, environ), None
    except ConfigError as exc:
        names = set(WELL_KNOWN_KEY_ENV) | _named_key_variables(path or DEFAULT_CONFIG_PATH)
        return Secrets.from_environ(names, environ), exc.message


_KEY_VARIABLE = re.compile(r'"(?:apiKeyEnv|tokenEnv)"\s*:\s*"([^"\\]+)"')


def _named_key_variables(path: Path) -> set[str]:
    """The variables an invalid config names as ``apiKeyEnv`` or ``tokenEnv`` (see
    :func:`configured_secrets`); none when the file cannot be read."""
    try:
        raw = read_regular_file(path, MAX_CONFIG_BYTES)
    except (OSError, FileTooLarge):
        return set()
    try:
        data = jsonc.loads(raw)
    except jsonc.JsoncError:
        return set(_KEY_VARIABLE.findall(raw.decode("utf-8", "replace")))
    found: set[str] = set()
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("apiKeyEnv", "tokenEnv") and isinstance(item, str) and item:
                    found.add(item)
                else:
                    stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)
    return found


def unknown_keys(text: str | bytes) -> list[UnknownKey]:
    """Keys the daemon does not know, at any depth (``server.prot``, ``providers[0].apikeyEnv``),
    sorted, each with the known key of its object it may have meant (``port``, ``apiKeyEnv``):
    reported at start-up, not fatal (a newer config must not stop an older daemon)."""
    return hinted(sorted(_unknown(jsonc.loads(text), Config, ""), key=lambda k: k[0]))


def _unknown(data: Any, cls: type, path: str) -> list[tuple[str, str, Collection[str]]]:
    """(path, key, the known keys of its object) of each unknown key under ``data``."""
    if not isinstance(data, dict):
        return []
    fields = {f.encode_name: f.type for f in msgspec.structs.fields(cls)}
    out: list[tuple[str, str, Collection[str]]] = []
    for key, value in data.items():
        if key not in fields:
            out.append((f"{path}{key}", key, fields.keys()))
            continue
        kind = fields[key]
        if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
            out += _unknown(value, kind, f"{path}{key}.")
        elif typing.get_origin(kind) is dict and isinstance(value, dict):  # (mcpServers: by name)
            item = typing.get_args(kind)[1]
            if isinstance(item, type) and issubclass(item, msgspec.Struct):
                for name, element in value.items():
                    out += _unknown(element, item, f"{path}{key}.{name}.")
        elif typing.get_origin(kind) is list and isinstance(value, list):
            (item,) = typing.get_args(kind)
            if isinstance(item, type) and issubclass(item, msgspec.Struct):
                for i, element in enumerate(value):
                    out += _unknown(element, item, f"{path}{key}[{i}].")
    return out


def load_config(path: Path | None) -> tuple[Config, Path, list[str]]:
    """(config, main config path, notes). ``path=None``: ``config/lens.jsonc`` if it exists.

    An explicit path that does not exist is an error; the default one may be absent.
    :class:`ConfigError` for a config file, or a directory holding it, that another local user
    can change (:func:`check_private_config`): every command reading the config (``lens serve``,
    ``lens pair …``, ``lens log …``) judges it here, the same way.
    """
    notes: list[str] = []
    explicit = path is not None
    path = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    if not path.exists() and not path.is_symlink():  # (a dangling link is a config that cannot be read)
        if explicit:
            raise ConfigError(f"config file {path} does not exist")
        notes.append(f"no config file at {path}; using built-in defaults")
        return Config(), path, notes
    modes: list[int] = []

    def look(st: os.stat_result) -> None:
        modes.append(st.st_mode)
        check_private_config(path, st)

    try:
        # (a FIFO or /dev/zero: refused, never read; the mode of the file read, for the note below)
        raw = read_regular_file(path, MAX_CONFIG_BYTES, check=look)
    except FileTooLarge:
        raise ConfigError(f"{path}: the config is larger than {MAX_CONFIG_BYTES} bytes (the limit for a config file)") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    cfg = parse_config(raw, str(path))
    extra = unknown_keys(raw)
    if extra:
        notes.append(f"{path}: ignoring unknown keys {unknown_keys_listed(extra)}")
    held = credential_literals(cfg)
    if held and modes and modes[0] & 0o044:
        shown_held = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
        notes.append(f"{path}: other users can read it (mode {modes[0] & 0o777:04o}), and it holds credentials "
                     f"({shown_held}); make it private (chmod 600 {path}), or pass them with envFrom")
    return cfg, path, notes


_DAEMON_USER = "the daemon's user"


def check_private_config(path: Path, st: os.stat_result) -> None:
    """:class:`ConfigError` for a config file (``st``: the ``fstat`` of the file read), a
    directory holding it (its own, and its link target's), or a directory above those up to
    ``/``, that a user other than the daemon's (or root) can change: writable by the group or
    by others, or another user's (:func:`~runtime.atomicfile.others_can_change`; above, a
    sticky directory owned by root or this user passes: :func:`~runtime.trust.others_can_swap`).
    Such a user could point a provider's ``baseUrl`` at a server of theirs, which is then sent
    the key, name another variable as ``apiKeyEnv``, or start an MCP server of their choosing as
    the daemon's user; in a directory they can write, or above it, they can put such a file
    (or a directory holding one) in the config's place. Readable by others is not refused (see
    the note about credentials it holds)."""
    check_private_config_file(path, st)
    problem = config_place_problem(path)
    if problem is None:
        return
    folder, why, below = problem
    if below is None:
        if isinstance(why, OSError):
            raise ConfigError(f"cannot check the config directory {folder}: {why.strerror}")
        raise ConfigError(f"the config directory {folder} is {why}, who could put a config of theirs in "
                          f"place of {path.name} (and send the providers' keys to a server of theirs); "
                          f"check what it holds, then {the_fix(why, folder, _DAEMON_USER)}, "
                          f"or move the config to a directory of the daemon's user alone")
    if isinstance(why, OSError):
        raise ConfigError(f"cannot check the directories above the config directory {below}: {why.strerror}")
    raise ConfigError(f"the directory {folder} above the config directory {below} is {why}, who "
                      f"could put a directory of theirs, and a config in it, in place of {below}; "
                      f"check what it holds, then {swap_fix(why, folder)}, or move the config "
                      f"to a directory of the daemon's user alone")


def place_problem(folders: list[Path], *, missing_ok: bool = False
                  ) -> tuple[Path, str | OSError, Path | None] | None:
    """The first of ``folders`` (the directories holding a file: the config's, the pair file's)
    that a user other than the daemon's (or root) can change (:func:`directory_problem`), then
    the first directory above one of them, up to ``/``, that such a user can swap
    (:func:`~runtime.trust.loose_directory_above`: a sticky one of root's or this user's
    passes), as ``(directory, why, None)`` or ``(directory, why, folder)`` for one above
    ``folder``; ``why`` is in words, or the :class:`OSError` that kept it from being checked.
    ``None`` when there is none. ``missing_ok``: a folder not there yet is not judged itself
    (the directories above it are), for a writer that makes it private. The one rule of the
    main config's start (:func:`check_private_config`) and of every pair file write."""
    problem = directory_problem(folders, missing_ok=missing_ok)
    if problem is not None:
        return problem[0], problem[1], None
    for folder in folders:
        try:
            above = loose_directory_above(folder)
        except OSError as exc:
            return folder, exc, folder
        if above is not None:
            return above[0], above[1], folder
    return None


def config_directories(path: Path) -> list[Path]:
    """The directories holding config ``path``: its own, then its link target's when that is
    another one."""
    return list(dict.fromkeys([path.parent, Path(os.path.realpath(path)).parent]))


def config_place_problem(path: Path) -> tuple[Path, str | OSError, Path | None] | None:
    """What keeps config ``path`` from being taken: :func:`place_problem` over its
    :func:`config_directories` (its own, its link target's, and every directory above them).
    The start (:func:`check_private_config`), a write of the main config through the
    config-file API and a write through a pair file's link each word their own message from it,
    so that a write is refused exactly where the next start refuses."""
    return place_problem(config_directories(path))


def directory_problem(folders: list[Path], *, missing_ok: bool = False) -> tuple[Path, str | OSError] | None:
    """The first of ``folders`` that a user other than the daemon's (or root) can change, with
    why (:func:`~runtime.atomicfile.others_can_change`) or the :class:`OSError` that kept it
    from being checked; ``missing_ok``: one not there is passed over."""
    for folder in folders:
        try:
            why = others_can_change(os.stat(folder))
        except FileNotFoundError as exc:
            if missing_ok:
                continue
            return folder, exc
        except OSError as exc:
            return folder, exc
        if why is not None:
            return folder, why
    return None


def check_private_config_file(path: Path, st: os.stat_result) -> None:
    """The file part of :func:`check_private_config`: :class:`ConfigError` for a config file
    (``st``: its ``fstat``) writable by the group or by others, or another user's."""
    why = others_can_change(st)
    if why is not None:
        _refuse_config_file(path, why)


def check_config_file_mode(path: Path, st: os.stat_result) -> None:
    """The mode part of :func:`check_private_config_file`: :class:`ConfigError` for a config
    file writable by the group or by others, in the same words. A write through the config-file
    API runs this (a write the next start would refuse is refused): it keeps the file's mode,
    which the next start judges, but the file it writes is a new one, the daemon user's, so
    whose the old one was does not hold at the next start and is not judged."""
    why = others_can_write(st)
    if why is not None:
        _refuse_config_file(path, why)


def _refuse_config_file(path: Path, why: str) -> None:
    raise ConfigError(f"config file {path} is {why}, who could send the providers' keys to a server of "
                      f"theirs or run commands as this user; check it, then "
                      f"{the_fix(why, path, _DAEMON_USER)}")


def expand_path(value: str, key: str, where: str) -> Path:
    """``value`` with a leading ``~`` or ``~user`` expanded, as ``dataDir``, ``--data`` and
    ``pairFile`` are: only a ``~`` that begins the value as written (``./~x`` is the directory
    ``~x`` here; pathlib's ``expanduser`` drops the ``./`` first and made it user x's home).
    :class:`ConfigError` naming ``key`` for an empty value, a NUL or a home directory that cannot
    be found (``~nosuchuser``), which were tracebacks."""
    if not value or "\0" in value:
        raise ConfigError(f"{where}: {key} must be a non-empty path without NUL characters")
    expanded = os.path.expanduser(value)
    if expanded.startswith("~"):  # (left as written: no such user, or no HOME and no home of ours)
        raise ConfigError(f"{where}: {key} {value[:200]!r}: {no_home_said(value)}")
    return Path(expanded)


def no_home_said(value: str) -> str:
    """What to say of a path ``value`` whose leading ``~`` or ``~user`` names no home directory."""
    user = value[1:].split("/", 1)[0]
    return f"there is no home directory {f'of user {user!r}' if user else '(HOME is unset and the user has none)'}"


def data_dir_path(cfg: Config, where: str) -> Path:
    return expand_path(cfg.data_dir, "dataDir", where)


def pair_file_path(cfg: Config, config_path: Path, where: str | None = None) -> Path:
    """The pair file: ``pairFile`` (``~`` expanded), else ``pair.json`` beside the main config.
    :class:`ConfigError` (naming ``where``, by default the config file) for a ``pairFile`` that
    cannot be expanded."""
    if cfg.pair_file:
        path = expand_path(cfg.pair_file, "pairFile", where or str(config_path))
        if path.name in ("", ".", ".."):
            # (".", "/", "dir/..": no name of a file there; each was read as a missing pair file,
            # and a write made a lock file named ".lock" or "...lock" in the directory)
            raise ConfigError(f"{where or config_path}: pairFile {cfg.pair_file[:200]!r} names a directory, not a "
                              f"file; give the pair file's own path (as config/pair.json)")
        return path
    return config_path.parent / DEFAULT_PAIR_FILE
