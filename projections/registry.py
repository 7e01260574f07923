"""The projections Lens maintains, by name (what ``lens log rebuild --projection`` accepts)."""

from __future__ import annotations

from .catalog import ProjectsProjection, SessionsProjection
from .history import HistoryProjection
from .projector import Projection
from .settings import SettingsProjection
from .stats import KindStats


def all_projections() -> list[Projection]:
    """Fresh instances of every projection, in the order they are built."""
    return [KindStats(), ProjectsProjection(), SessionsProjection(), HistoryProjection(), SettingsProjection()]
