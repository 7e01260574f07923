"""Set-ups the dashboard suite's files share. The daemon, the browser and what drives the page are
``test_dashboard_browser.py``'s (its fixtures are imported by name where used)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def project_and_session(d: Any, token: str, workspace: Path, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A project ``name`` over ``workspace`` (made here) and a session of it, both made over the
    API with ``token`` (each answered 201) as another client would: (the project, the session)."""
    workspace.mkdir()
    status, project = d.request("POST", "/projects", {"name": name, "workspace": str(workspace)}, token=token)
    assert status == 201, project
    status, session = d.request("POST", "/sessions", {"projectId": project["id"]}, token=token)
    assert status == 201, session
    return project, session
