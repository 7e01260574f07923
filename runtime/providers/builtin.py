"""The providers Lens knows without a config (F-MOD-5 on embedded defaults).

Beside the scripted ``faux`` (:mod:`.faux`), two real ones, each an ordinary provider entry once
made (:func:`builtin_providers`): ``openai`` (``openai-responses`` at ``https://api.openai.com/v1``,
its key in ``OPENAI_API_KEY``) and ``anthropic`` (``anthropic`` at ``https://api.anthropic.com``,
its key in ``ANTHROPIC_API_KEY``). A config entry with the same id replaces one, as it replaces
``faux`` (``"enabled": false`` there disables it). Their base URL is ``OPENAI_BASE_URL`` /
``ANTHROPIC_BASE_URL`` when set (the SDKs' own variables), checked as a configured ``baseUrl`` is;
a configured entry never reads those variables.

The built-in default model (the last link of the default-model chain, :func:`builtin_default`)
is the first model of the first of ``anthropic``, ``openai`` that is still built in and has a
usable key, else ``faux/faux-1``.

The models are a few current ids of the pinned SDKs' own model-name types
(``anthropic.types.ModelParam``, ``openai.types.shared.ChatModel``), the first of each being its
provider's default; a config lists any other (see ``docs/decisions.md``, "Real providers on
embedded defaults").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from runtime.config import ModelConfig, ProviderConfig, check_base_url, split_model_ref

FAUX_DEFAULT_MODEL = "faux/faux-1"


@dataclass(frozen=True)
class Builtin:
    id: str
    protocol: str
    base_url: str
    key_env: str
    base_url_env: str
    models: tuple[tuple[str, int], ...]  # (model id, context window), the default first


# In the order the built-in default prefers them.
BUILTINS = (
    Builtin("anthropic", "anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
            (("claude-sonnet-5-5", 200_000), ("claude-opus-5-5", 200_000), ("claude-haiku-5-5", 200_000))),
    Builtin("openai", "openai-responses", "https://api.openai.com/v1", "OPENAI_API_KEY", "OPENAI_BASE_URL",
            (("gpt-5.5", 400_000), ("gpt-5.4-mini", 400_000), ("gpt-5.4-nano", 400_000))),
)
BASE_URL_ENV = tuple(b.base_url_env for b in BUILTINS)


def _model_configs(b: Builtin) -> list[ModelConfig]:
    return [ModelConfig(id=m, context_window=w, images=True) for m, w in b.models]


def listed_models(configured: Sequence[ProviderConfig]) -> dict[str, list[ModelConfig]]:
    """The models each provider lists in a config whose provider entries are ``configured``, in
    the order ``GET /models`` shows them: each entry's own list, then each built-in real provider
    no entry replaces, then the built-in ``faux`` (serving ``faux-1``) unless an entry replaces
    it. An entry of id ``faux`` and protocol ``faux`` listing no models lists ``faux-1`` as the
    built-in does (the default model is ``faux/faux-1`` without a usable key, so the listing and
    the model checks name it); a faux entry of another id keeps its own list (none: any id).
    Pure: reads no environment (a base URL variable changes where a built-in is reached, not
    what it lists). The catalog is built from it at start, and ``defaultModel`` is checked
    against it before a start or a config write (:mod:`runtime.startcheck`)."""
    listed = {p.id: list(p.models) for p in configured}
    for b in BUILTINS:
        listed.setdefault(b.id, _model_configs(b))
    faux_provider, faux_model = split_model_ref(FAUX_DEFAULT_MODEL)
    listed.setdefault(faux_provider, [ModelConfig(id=faux_model)])
    if not listed[faux_provider] and any(p.id == faux_provider and p.protocol == "faux" for p in configured):
        listed[faux_provider] = [ModelConfig(id=faux_model)]
    return listed


def builtin_providers(configured: set[str], environ: Mapping[str, str]) -> list[ProviderConfig]:
    """The built-in real providers that no configured id (``configured``) replaces, as provider
    entries. Raises :class:`~runtime.config.ConfigError` for a base URL variable set to what a
    configured ``baseUrl`` may not be (no http(s) URL with a host; a user name or password,
    never quoted); a blank one is unset."""
    out = []
    for b in BUILTINS:
        if b.id in configured:
            continue
        base_url = (environ.get(b.base_url_env) or "").strip() or b.base_url
        if base_url != b.base_url:
            check_base_url(base_url, b.base_url_env, f"unset it for the {b.id} provider's public API",
                           b.key_env)
        out.append(ProviderConfig(id=b.id, protocol=b.protocol, base_url=base_url,  # type: ignore[arg-type]
                                  api_key_env=b.key_env,
                                  models=_model_configs(b)))
    return out


def builtin_default(builtin: list[ProviderConfig], usable: set[str]) -> tuple[str, str]:
    """(the built-in default model, why): the first model of the first of :data:`BUILTINS` in
    ``builtin`` (those not replaced) whose id is in ``usable`` (its key is in the environment),
    else ``faux/faux-1``. The reason names variables, never a value."""
    in_effect = {p.id: p for p in builtin}
    considered = [b for b in BUILTINS if b.id in in_effect]
    for b in considered:
        if b.id in usable:
            return f"{b.id}/{in_effect[b.id].models[0].id}", f"built in: {b.key_env} is set"
    if not considered:
        return FAUX_DEFAULT_MODEL, "built in: the config replaces the built-in providers"
    return FAUX_DEFAULT_MODEL, f"built in: no usable key in {' or '.join(b.key_env for b in considered)}"
