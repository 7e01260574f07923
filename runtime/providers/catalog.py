"""Which provider serves a model reference ``"<provider id>/<model id>"``.

The full catalog (config, enablement, keys from the environment, the default-model chain)
grows here; today it maps provider ids to instances and resolves the session's model.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Mapping

from runtime.errors import ModelUnavailable

from .base import Provider
from .faux import FauxProvider

if TYPE_CHECKING:
    from runtime.config import Config

BUILTIN_DEFAULT_MODEL = "faux/faux-1"


class ProviderCatalog:
    def __init__(
        self,
        providers: Mapping[str, Provider] | None = None,
        default_model: str = BUILTIN_DEFAULT_MODEL,
        *,
        unavailable: Mapping[str, tuple[str, str]] | None = None,
        models: Mapping[str, list[str]] | None = None,
    ) -> None:
        self.providers: dict[str, Provider] = dict(providers or {"faux": FauxProvider()})
        self.default_model = default_model
        # provider id -> (error code, message) for configured providers that cannot serve now
        self.unavailable = dict(unavailable or {})
        self.models = dict(models or {})  # provider id -> its configured model ids (empty: any)

    def resolve(self, model_ref: str | None) -> tuple[Provider, str, str]:
        """(provider, model id, full reference) for ``model_ref`` or the default model.

        Raises :class:`ModelUnavailable` (``MODEL_UNKNOWN``) for a reference no provider serves.
        """
        ref = model_ref or self.default_model
        provider_id, sep, model_id = ref.partition("/")
        if not sep or not model_id:
            raise ModelUnavailable("MODEL_UNKNOWN", f"model {ref!r} is not of the form '<provider>/<model>'")
        if provider_id in self.unavailable:
            code, message = self.unavailable[provider_id]
            raise ModelUnavailable(code, message)
        provider = self.providers.get(provider_id)
        known = self.models.get(provider_id)
        if provider is not None and known and model_id not in known:
            raise ModelUnavailable("MODEL_UNKNOWN", f"provider {provider_id!r} has no model {model_id!r} (configured: {', '.join(known)})")
        if provider is None:
            raise ModelUnavailable("MODEL_UNKNOWN", f"no provider {provider_id!r} is configured (model {ref!r})")
        return provider, model_id, ref


def build_catalog(cfg: "Config", *, cli_model: str | None = None) -> ProviderCatalog:
    """Providers from config; the built-in ``faux`` is always there unless config replaces it.

    Keys come only from the environment variable a provider names (``apiKeyEnv``); they are
    never read from config, printed or stored. Default model: ``--model`` > config
    ``defaultModel`` > the built-in ``faux/faux-1``.
    """
    providers: dict[str, Provider] = {"faux": FauxProvider("faux")}
    unavailable: dict[str, tuple[str, str]] = {}
    models: dict[str, list[str]] = {}
    for p in cfg.providers:
        providers.pop(p.id, None)
        models[p.id] = [m.id for m in p.models]
        if not p.enabled:
            unavailable[p.id] = ("PROVIDER_DISABLED", f"provider {p.id!r} is disabled in the config")
            continue
        if p.api_key_env and not os.environ.get(p.api_key_env):
            unavailable[p.id] = ("PROVIDER_KEY_REQUIRED", f"provider {p.id!r} needs its key in the environment variable {p.api_key_env}")
            continue
        if p.protocol == "faux":
            providers[p.id] = FauxProvider.from_config(p.id, p.script)
        else:
            unavailable[p.id] = ("PROVIDER_UNSUPPORTED", f"provider {p.id!r}: protocol {p.protocol!r} is not available in this build yet")
    default = cli_model or cfg.default_model or BUILTIN_DEFAULT_MODEL
    return ProviderCatalog(providers, default, unavailable=unavailable, models=models)
