"""The provider catalog (F-MOD-5/6): which provider serves ``"<provider id>/<model id>"``.

Providers are registered from config (``openai-responses``, ``openai-chat`` with any base URL,
``anthropic``, ``faux``); the built-in ``faux``, ``openai`` and ``anthropic`` (:mod:`.builtin`)
are there unless config replaces them. Every
configured provider is *listed*; only enabled ones with their key present are *selectable*.
Resolving a model of a disabled provider fails with ``PROVIDER_DISABLED``, then (enabled but the
environment variable named by ``apiKeyEnv`` unset or empty) ``PROVIDER_KEY_REQUIRED``. A default
model pointing at such a provider does not stop the daemon: it fails when a request is made.

Keys are read only from the environment variable a provider names, once, when the catalog is
built; they are never read from config, printed, logged, stored or put in an error message.

Default model chain (:func:`default_model`): session explicit > CLI ``--model`` > saved default >
config ``defaultModel`` > built-in (:func:`.builtin.builtin_default`: ``anthropic`` or ``openai``
when its key is in the environment, else ``faux/faux-1``). A saved default whose provider was disabled
later is not skipped: sessions take it and fail with ``PROVIDER_DISABLED`` when they submit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from runtime.config import ConfigError, ModelConfig, split_model_ref
from runtime.errors import ModelUnavailable

from . import caching
from .base import Provider, ProviderError
from .builtin import FAUX_DEFAULT_MODEL, builtin_default, builtin_providers, listed_models
from .faux import FauxProvider

if TYPE_CHECKING:
    from runtime.config import Config, ProviderConfig

    from .sdk import SdkImport

BUILTIN_DEFAULT_MODEL = FAUX_DEFAULT_MODEL  # (without a built-in real provider's key)
DEFAULT_SOURCES = ("session", "cli", "saved", "config", "default")


def default_model(*, session: str | None = None, cli: str | None = None, saved: str | None = None,
                  config: str | None = None, builtin: str = BUILTIN_DEFAULT_MODEL) -> tuple[str, str]:
    """(model reference, where it came from: session | cli | saved | config | default);
    ``builtin`` is the last link (see :func:`.builtin.builtin_default`)."""
    for source, ref in (("session", session), ("cli", cli), ("saved", saved), ("config", config)):
        if ref:
            return ref, source
    return builtin, "default"


@dataclass(frozen=True)
class ModelEntry:
    """One model as clients list it."""

    ref: str
    provider: str
    model: str
    protocol: str
    context_window: int
    images: bool
    explicit_cache: bool
    enabled: bool
    available: bool
    reason: str | None = None  # PROVIDER_DISABLED / PROVIDER_KEY_REQUIRED when not available
    default: bool = False

    def to_json(self) -> dict[str, Any]:
        """camelCase, as the HTTP API returns it."""
        return {"id": self.ref, "provider": self.provider, "model": self.model, "protocol": self.protocol,
                "contextWindow": self.context_window, "images": self.images, "explicitCache": self.explicit_cache,
                "enabled": self.enabled, "available": self.available, "reason": self.reason, "default": self.default}


class ProviderCatalog:
    def __init__(
        self,
        providers: Mapping[str, Provider] | None = None,
        default_model: str = BUILTIN_DEFAULT_MODEL,
        *,
        unavailable: Mapping[str, tuple[str, str]] | None = None,
        models: Mapping[str, list[str]] | None = None,
        model_configs: Mapping[str, list[ModelConfig]] | None = None,
        protocols: Mapping[str, str] | None = None,
        default_source: str = "default",
        saved_default: str | None = None,
        builtin_reason: str = "built in",
        sdk_import: "SdkImport | None" = None,
    ) -> None:
        self.providers: dict[str, Provider] = dict(providers or {"faux": FauxProvider()})
        # The SDKs' import the SDK-backed providers share, which the daemon begins as it starts;
        # None when no provider uses an SDK (nothing is imported).
        self.sdk_import = sdk_import
        # The chain without its saved step (session aside): --model, defaultModel or built-in.
        self._unsaved = (default_model, default_source)
        self.saved_default: str | None = None
        self.saved_seq = 0  # the seq of the default_model.set that set saved_default (0: none read)
        self.default_model = default_model
        self.default_source = default_source
        self.builtin_reason = builtin_reason  # why the built-in default is what it is (variables named, no value)
        self.set_saved_default(saved_default)
        # provider id -> (error code, message) for configured providers that cannot serve now
        self.unavailable = dict(unavailable or {})
        self._configs: dict[str, list[ModelConfig]] = {k: list(v) for k, v in (model_configs or {}).items()}
        for pid, ids in (models or {}).items():
            self._configs.setdefault(pid, [ModelConfig(id=i) for i in ids])
        self._protocols = dict(protocols or {})

    def set_saved_default(self, model: str | None, seq: int | None = None) -> bool:
        """Take the saved default model (``None``: cleared) recorded by the event at ``seq``;
        the effective default follows the chain (``--model`` still wins). An older ``seq`` than
        the one taken is ignored (``False``): the latest event is in effect."""
        if seq is not None:
            if seq < self.saved_seq:
                return False
            self.saved_seq = seq
        self.saved_default = model or None
        ref, source = self._unsaved
        if source != "cli" and self.saved_default:
            ref, source = self.saved_default, "saved"
        self.default_model, self.default_source = ref, source
        return True

    def check_default(self, model_ref: str) -> str:
        """``model_ref`` as a default to save: a model ``GET /models`` lists (else
        ``MODEL_UNKNOWN``) of an enabled provider (else ``PROVIDER_DISABLED``). Its key is not
        checked: a key set later makes it usable, as for any listed model."""
        for entry in self.models():
            if entry.ref == model_ref:
                if not entry.enabled:
                    raise ModelUnavailable("PROVIDER_DISABLED", f"provider {entry.provider!r} is disabled in the config")
                return model_ref
        raise ModelUnavailable("MODEL_UNKNOWN", f"no listed model {model_ref!r} (GET /models lists them)")

    def model_ids(self, provider_id: str) -> list[str]:
        return [m.id for m in self._configs.get(provider_id, [])]

    def resolve(self, model_ref: str | None) -> tuple[Provider, str, str]:
        """(provider, model id, full reference) for ``model_ref`` or the default model.

        Raises :class:`ModelUnavailable`: ``PROVIDER_DISABLED``, ``PROVIDER_KEY_REQUIRED`` (in that
        order) for a configured provider that cannot serve, ``MODEL_UNKNOWN`` for a reference no
        provider serves.
        """
        ref = model_ref or self.default_model
        provider_id, model_id = split_model_ref(ref)
        if not provider_id or not model_id:
            raise ModelUnavailable("MODEL_UNKNOWN", f"model {ref!r} is not of the form '<provider>/<model>'")
        if provider_id in self.unavailable:
            code, message = self.unavailable[provider_id]
            raise ModelUnavailable(code, message)
        provider = self.providers.get(provider_id)
        known = self.model_ids(provider_id)
        if provider is not None and known and model_id not in known:
            raise ModelUnavailable("MODEL_UNKNOWN", f"provider {provider_id!r} has no model {model_id!r} (configured: {', '.join(known)})")
        if provider is None:
            raise ModelUnavailable("MODEL_UNKNOWN", f"no provider {provider_id!r} is configured (model {ref!r})")
        return provider, model_id, ref

    def check(self, model_ref: str | None) -> str:
        """The reference that would be used, or :class:`ModelUnavailable` (a submit-time guard)."""
        return self.resolve(model_ref)[2]

    def check_listed(self, model_ref: str) -> str | None:
        """For a model named at start (``--model``): :class:`ModelUnavailable` ``MODEL_UNKNOWN``
        if its provider lists models (as ``GET /models`` shows them: the built-in faux lists
        ``faux-1``) and not this one — a typo, most likely; a note (returned) if the provider
        lists none, so nothing can be checked; ``None`` when it is listed."""
        provider_id, model_id = split_model_ref(model_ref)
        listed = [e.model for e in self.models() if e.provider == provider_id]
        if not listed:
            return (f"provider {provider_id!r} lists no models, so --model {model_ref} cannot be checked "
                    f"before a session uses it")
        if model_id not in listed:
            raise ModelUnavailable("MODEL_UNKNOWN", f"provider {provider_id!r} lists no model {model_id!r} "
                                                    f"(listed: {', '.join(listed[:20])})")
        return None

    def model_config(self, model_ref: str | None) -> ModelConfig:
        """The configured model (context window, images…), or defaults for an unlisted one."""
        ref = model_ref or self.default_model
        provider_id, model_id = split_model_ref(ref)
        for m in self._configs.get(provider_id, []):
            if m.id == model_id:
                return m
        return ModelConfig(id=model_id)

    def models(self, *, selectable_only: bool = False) -> list[ModelEntry]:
        """Every configured model (and the built-in faux one), with availability and its reason."""
        out: list[ModelEntry] = []
        seen: set[str] = set()
        pids = list(dict.fromkeys([*self._configs, *self.providers, *self.unavailable]))
        for pid in pids:
            # (a faux provider of no known list, as in a catalog built without a config, serves
            # faux-1; one of the config keeps its own list, and one listing none lists nothing)
            configs = self._configs[pid] if pid in self._configs else (
                [ModelConfig(id="faux-1")] if isinstance(self.providers.get(pid), FauxProvider) else [])
            reason = self.unavailable.get(pid, (None, ""))[0]
            enabled = reason != "PROVIDER_DISABLED"
            protocol = self._protocols.get(pid) or getattr(self.providers.get(pid), "protocol", None) or "faux"
            for m in configs:
                ref = f"{pid}/{m.id}"
                if ref in seen:
                    continue
                seen.add(ref)
                entry = ModelEntry(ref, pid, m.id, protocol, m.context_window, m.images, m.explicit_cache,
                                   enabled, reason is None, reason, ref == self.default_model)
                if entry.available or not selectable_only:
                    out.append(entry)
        return out

    async def aclose(self) -> None:
        """Close the SDK clients (each provider's HTTP connection pool)."""
        for p in self.providers.values():
            close = getattr(p, "aclose", None)
            if close is not None:
                await close()


def usable_key(value: str | None) -> str | None:
    """The key a variable holds, without the white space around it (a file with CRLF endings, a
    pasted space: no part of a key), or ``None`` when nothing is left or what is left holds a
    character an HTTP header cannot carry (printable ASCII only). Such a key failed every request
    as a retryable connection error, and the SDK's debug log of that failure quoted the header."""
    key = (value or "").strip()
    if not key or not all("!" <= ch <= "~" for ch in key):
        return None
    return key


def _sdk_provider(p: "ProviderConfig", key: str | None, load_image: Any, **options: Any) -> Provider:
    from .anthropic_messages import AnthropicProvider
    from .openai_chat import OpenAIChatProvider
    from .openai_responses import OpenAIResponsesProvider

    cls = {"openai-responses": OpenAIResponsesProvider, "openai-chat": OpenAIChatProvider,
           "anthropic": AnthropicProvider}[p.protocol]
    ttl = getattr(p, "cache_ttl", None) or "30m"
    return cls(p.id, base_url=p.base_url, api_key=key, api_key_env=p.api_key_env,
               models={m.id: m for m in p.models}, load_image=load_image, cache_ttl=ttl, **options)


def build_catalog(
    cfg: "Config",
    *,
    cli_model: str | None = None,
    saved_default: str | None = None,
    artifacts: Any = None,
    environ: Mapping[str, str] | None = None,
    max_retries: int | None = None,
    timeout: float | None = None,
) -> ProviderCatalog:
    """Providers from config (see the module docstring).

    ``artifacts`` (an :class:`~tools.artifacts.ArtifactStore`) lets requests carry images;
    ``environ`` defaults to ``os.environ`` (only the variables providers name are read).
    ``max_retries`` and ``timeout`` override every provider's ``maxRetries``/``timeoutSeconds``.
    Raises :class:`ConfigError` for an unsupported prompt-cache ttl.
    """
    from .sdk import SdkImport, store_loader

    env = os.environ if environ is None else environ
    sdk_import, uses_sdk = SdkImport(), False  # (one import for every SDK-backed provider)
    load_image = store_loader(artifacts) if artifacts is not None else None
    # (faux providers here keep no requests: nothing of the daemon reads them, and each pins a
    # session's Working Context)
    providers: dict[str, Provider] = {"faux": FauxProvider("faux", keep_requests=0)}
    unavailable: dict[str, tuple[str, str]] = {}
    # (what each provider lists, the built-in faux's faux-1 included: GET /models, --model and
    # the saved default are checked against it, as defaultModel is before a start)
    configs = listed_models(cfg.providers)
    protocols: dict[str, str] = {}
    builtin = builtin_providers({p.id for p in cfg.providers}, env)
    for p in [*cfg.providers, *builtin]:
        providers.pop(p.id, None)
        protocols[p.id] = p.protocol
        if p.protocol != "faux":
            for m in p.models:
                ttl = getattr(m, "cache_ttl", None) or getattr(p, "cache_ttl", None)
                if ttl is not None:
                    try:
                        caching.check_openai_ttl(ttl)
                    except ProviderError as exc:
                        raise ConfigError(f"provider {p.id!r} model {m.id!r}: {exc.message}") from None
        if not p.enabled:
            unavailable[p.id] = ("PROVIDER_DISABLED", f"provider {p.id!r} is disabled in the config")
            continue
        key = usable_key(env.get(p.api_key_env)) if p.api_key_env else None
        if p.api_key_env and not key:
            where = f"the environment variable {p.api_key_env}"
            why = f"needs its key in {where}" if not (env.get(p.api_key_env) or "").strip() else \
                f"cannot send the key in {where} (it holds a character an HTTP header cannot carry: printable ASCII only)"
            unavailable[p.id] = ("PROVIDER_KEY_REQUIRED", f"provider {p.id!r} {why}")
            continue
        if p.protocol == "faux":
            try:
                providers[p.id] = FauxProvider.from_config(p.id, p.script, keep_requests=0)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        else:
            uses_sdk = True
            providers[p.id] = _sdk_provider(p, key, load_image,
                                            max_retries=p.max_retries if max_retries is None else max_retries,
                                            timeout=p.timeout_seconds if timeout is None else timeout,
                                            max_answer_bytes=cfg.log.max_event_bytes, sdk_import=sdk_import)
    fallback, reason = builtin_default(builtin, {p.id for p in builtin if p.id not in unavailable})
    # (the saved step: the catalog's)
    ref, source = default_model(cli=cli_model, config=cfg.default_model, builtin=fallback)
    return ProviderCatalog(providers, ref, unavailable=unavailable, model_configs=configs, protocols=protocols,
                           default_source=source, saved_default=saved_default, builtin_reason=reason,
                           sdk_import=sdk_import if uses_sdk else None)
