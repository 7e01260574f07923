"""The dashboard page: ``GET /`` serves ``runtime/static/index.html`` (404 ``NOT_FOUND`` when it is
not installed), with a Content-Security-Policy that lets its own inline scripts run by their
hashes and no other.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from quart import Response
from quart_trio import QuartTrio

from .http_parts import ApiError
from .services import Services

STATIC_DIR = Path(__file__).parent / "static"


def add_dashboard_routes(app: QuartTrio, svc: Services) -> None:
    @app.get("/")
    async def dashboard() -> Response:
        page = STATIC_DIR / "index.html"
        if not page.exists():
            raise ApiError("NOT_FOUND", "the dashboard is not installed")
        data = page.read_bytes()
        resp = Response(data, content_type="text/html; charset=utf-8")
        # The page's own inline script runs by its hash; any other inline script (an injection)
        # does not.
        scripts = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(code).digest()).decode()}'"
                           for code in re.findall(rb"<script>(.*?)</script>", data, re.S))
        resp.headers["Content-Security-Policy"] = (
            f"default-src 'self'; script-src 'self' {scripts}; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
            "form-action 'self'")
        resp.headers["X-Frame-Options"] = "DENY"
        resp.headers["Referrer-Policy"] = "no-referrer"
        return resp
