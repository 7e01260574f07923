"""Which provider serves a model reference ``"<provider id>/<model id>"``.

The full catalog (config, enablement, keys from the environment, the default-model chain)
grows here; today it maps provider ids to instances and resolves the session's model.
"""

from __future__ import annotations

from typing import Mapping

from runtime.errors import ModelUnavailable

from .base import Provider
from .faux import FauxProvider

BUILTIN_DEFAULT_MODEL = "faux/faux-1"


class ProviderCatalog:
    def __init__(self, providers: Mapping[str, Provider] | None = None, default_model: str = BUILTIN_DEFAULT_MODEL) -> None:
        self.providers: dict[str, Provider] = dict(providers or {"faux": FauxProvider()})
        self.default_model = default_model

    def resolve(self, model_ref: str | None) -> tuple[Provider, str, str]:
        """(provider, model id, full reference) for ``model_ref`` or the default model.

        Raises :class:`ModelUnavailable` (``MODEL_UNKNOWN``) for a reference no provider serves.
        """
        ref = model_ref or self.default_model
        provider_id, sep, model_id = ref.partition("/")
        if not sep or not model_id:
            raise ModelUnavailable("MODEL_UNKNOWN", f"model {ref!r} is not of the form '<provider>/<model>'")
        provider = self.providers.get(provider_id)
        if provider is None:
            raise ModelUnavailable("MODEL_UNKNOWN", f"no provider {provider_id!r} is configured (model {ref!r})")
        return provider, model_id, ref
