"""The contract suite runs the real daemon exactly as the daemon suite does: its fixtures
(``daemon``, ``daemon_factory``, ``strong``, ``reader``) and client helpers are those of
``tests/daemon/conftest.py``, imported here so that pytest finds them for this folder too."""

from tests.daemon.conftest import daemon, daemon_factory, reader, strong  # noqa: F401
