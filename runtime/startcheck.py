"""The checks a config file must pass for ``lens serve`` to start from it.

:func:`check_startable` is run by ``lens serve`` on its config file before anything is made, and
by ``PUT /config/files/<main config>`` on the text to be written: a write the API accepts is one
the next start accepts too (the API used to run only :func:`~runtime.config.parse_config`, and a
remote edit could leave a daemon that would not come back after its next restart). It adds to
``parse_config`` what needs more than the text's shape: expanding the paths (``~user``) and
building each faux provider's script, with the very functions start-up uses for them, and
``defaultModel`` naming a provider there is (configured or built in) and, when that provider
lists its models, one of them (as ``--model`` is held to at start: a typo, most likely).

Not checked here, because they belong to the environment of the start, not to the file: a
provider's key variable (a missing key is a start-up note, and so is a ``defaultModel`` of a
disabled provider: sessions using it fail with ``PROVIDER_KEY_REQUIRED`` / ``PROVIDER_DISABLED``),
``executor.tokenEnv`` being set, the address being free.
"""

from __future__ import annotations

from pathlib import Path

from .config import Config, ConfigError, data_dir_path, pair_file_path, split_model_ref
from .providers.builtin import listed_models
from .providers.faux import FauxProvider


def check_startable(cfg: Config, config_path: Path, where: str) -> None:
    """Raise :class:`ConfigError` (``CONFIG_INVALID``, starting with ``where``) for the first
    thing in ``cfg`` that would stop ``lens serve`` from starting with ``config_path`` as its
    config file. ``cfg`` has passed :func:`~runtime.config.parse_config`."""
    data_dir_path(cfg, where)
    pair_file_path(cfg, config_path, where)
    for p in cfg.providers:
        if p.protocol == "faux":
            try:
                FauxProvider.from_config(p.id, p.script)  # as build_catalog does at start
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc}") from None
    check_default_model(cfg, where)


def check_default_model(cfg: Config, where: str) -> None:
    """``defaultModel`` must name a provider of the config or a built-in one (``faux``,
    ``openai``, ``anthropic``, unless the config replaces it), and a model that provider lists
    (a provider listing none cannot be checked). Every session without a model of its own would
    fail ``MODEL_UNKNOWN`` otherwise; it was a start-up note."""
    if not cfg.default_model:
        return
    listed = {pid: [m.id for m in models] for pid, models in listed_models(cfg.providers).items()}
    ref = cfg.default_model
    provider, model = split_model_ref(ref)
    if provider not in listed:
        raise ConfigError(f"{where}: defaultModel {ref[:200]!r} names no provider {provider[:100]!r} "
                          f"(providers: {', '.join(sorted(listed))})")
    models = listed[provider]
    if models and model not in models:
        shown = ", ".join(models[:20]) + (", …" if len(models) > 20 else "")
        raise ConfigError(f"{where}: defaultModel {ref[:200]!r}: provider {provider!r} lists no model "
                          f"{model[:100]!r} (listed: {shown})")
