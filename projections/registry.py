"""The projections Lens maintains, by name (what ``lens log rebuild --projection`` accepts)."""

from __future__ import annotations

from events.secrets import Secrets

from .artifact_names import ArtifactNames
from .artifact_types import ArtifactTypes
from .catalog import ProjectsProjection, SessionsProjection
from .history import HistoryProjection
from .projector import Projection
from .settings import SettingsProjection
from .stats import KindStats


def all_projections(secrets: Secrets | None = None) -> list[Projection]:
    """Fresh instances of every projection, in the order they are built; the history index is
    scrubbed of ``secrets`` (the keys ``lens serve`` knows)."""
    return [KindStats(), ProjectsProjection(), SessionsProjection(), HistoryProjection(secrets), SettingsProjection(),
            ArtifactNames(), ArtifactTypes()]
