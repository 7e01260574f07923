"""web_fetch over https: the certificate is checked against the URL's host (also when the
connection goes to the address checked for it), and SNI names that host.

The certificate is made for the test by the ``openssl`` command (skipped where there is none)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
import trio

from tools.artifacts import ArtifactStore
from tools.base import ToolRegistry
from tools.web import web_fetch_tool

from .conftest import call, text_of
from .server import WebServer

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(cert, key) of a self-signed certificate for the name ``localhost`` only (no IP address)."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture
async def tls_server(nursery: trio.Nursery, certificate: tuple[Path, Path]) -> tuple[WebServer, list[str]]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*certificate)
    names: list[str] = []
    ctx.sni_callback = lambda _sock, name, _ctx: names.append(name)  # type: ignore[assignment,misc]
    server = WebServer("127.0.0.1", tls=ctx)
    await nursery.start(server.run)
    return server, names


def trusting(cert: Path, artifacts: ArtifactStore) -> ToolRegistry:
    ctx = ssl.create_default_context(cafile=str(cert))
    return ToolRegistry([web_fetch_tool(artifacts, full_access=True, tls=ctx)])


async def test_https_checks_the_certificate_against_the_url_host(tls_server: tuple[WebServer, list[str]],
                                                                 certificate: tuple[Path, Path],
                                                                 artifacts: ArtifactStore) -> None:
    server, names = tls_server
    server.reply("/p", "<p>secure</p>")
    reg = trusting(certificate[0], artifacts)
    r = await call(reg, "web_fetch", {"url": f"https://localhost:{server.port}/p"})
    assert text_of(r) == "secure", text_of(r)
    assert names == ["localhost"] and server.requests[0].headers["host"] == f"localhost:{server.port}"
    # the same server by its address: the certificate does not name 127.0.0.1
    r = await call(reg, "web_fetch", {"url": f"https://127.0.0.1:{server.port}/p"})
    assert r.error_code == "TLS_FAILED", text_of(r)


async def test_an_untrusted_certificate_is_refused(tls_server: tuple[WebServer, list[str]],
                                                   artifacts: ArtifactStore) -> None:
    server, _ = tls_server
    server.reply("/p", "<p>secure</p>")
    reg = ToolRegistry([web_fetch_tool(artifacts, full_access=True)])  # the system's CAs
    r = await call(reg, "web_fetch", {"url": f"https://localhost:{server.port}/p"})
    assert r.error_code == "TLS_FAILED" and "certificate" in text_of(r).lower()
    assert server.requests == []


async def test_plain_http_to_a_tls_port_is_a_protocol_error(tls_server: tuple[WebServer, list[str]],
                                                            certificate: tuple[Path, Path],
                                                            artifacts: ArtifactStore) -> None:
    server, _ = tls_server
    r = await call(trusting(certificate[0], artifacts), "web_fetch", {"url": f"http://localhost:{server.port}/p"})
    assert r.error_code == "HTTP_PROTOCOL_ERROR", text_of(r)


async def test_web_search_over_https_checks_its_backends_certificate(tls_server: tuple[WebServer, list[str]],
                                                                     certificate: tuple[Path, Path]) -> None:
    # The backend is exempt from web_fetch's address rule (an operator's endpoint), not from TLS:
    # an untrusted certificate is TLS_FAILED and no query is sent; a trusted one answers.
    from tools.web import web_search_tool

    server, _ = tls_server
    server.reply("/search", b'{"results": [{"url": "https://tls.example/"}]}', "application/json")
    base = f"https://localhost:{server.port}"
    untrusted = ToolRegistry([web_search_tool(base, None)])
    r = await call(untrusted, "web_search", {"query": "q"})
    assert r.error_code == "TLS_FAILED" and text_of(r).startswith("TLS_FAILED: the search backend"), text_of(r)
    assert server.requests == []
    trusted = ToolRegistry([web_search_tool(base, None, tls=ssl.create_default_context(cafile=str(certificate[0])))])
    r = await call(trusted, "web_search", {"query": "q"})
    assert not r.is_error and r.structured_content["results"][0]["url"] == "https://tls.example/", text_of(r)
