"""The checks a config file must pass for ``lens serve`` to start from it.

:func:`check_startable` is run by ``lens serve`` on its config file before anything is made, and
by ``PUT /config/files/<main config>`` on the text to be written: a write the API accepts is one
the next start accepts too (the API used to run only :func:`~runtime.config.parse_config`, and a
remote edit could leave a daemon that would not come back after its next restart). It adds to
``parse_config`` what needs more than the text's shape: expanding the paths (``~user``) and
building each faux provider's script, with the very functions start-up uses for them.

Not checked here, because they belong to the environment of the start, not to the file: a
provider's key variable (a missing key is a start-up note), ``executor.tokenEnv`` being set, the
address being free.
"""

from __future__ import annotations

from pathlib import Path

from .config import Config, ConfigError, data_dir_path, pair_file_path
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
