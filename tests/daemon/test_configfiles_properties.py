"""The config-file API (F-API-4) by property testing: generated names and generated bodies.

One daemon whose config directory holds the main config, the pair file, other JSON/JSONC files,
and what must never be served: templates, other extensions, a dotfile, a directory named like a
config file, symlinks to a file and a directory outside, a file whose name is not UTF-8.
Hypothesis runs in a worker thread and reaches the daemon's trio loop through
``trio.from_thread`` (as the HTTP fuzz test does); requests are written on a socket by hand, so
the request target is exactly what was drawn.

- Names: the listed ones, traversal (plain, percent-encoded once and twice, with backslashes),
  NULs, other cases and normalisations, templates, other extensions, the links, and generated
  text percent-encoded. A name that is not listed is 404 for ``GET`` and ``PUT``; nothing
  outside the listed files changes, the file behind the link least of all. And the other way
  round: a file of any generated name put in the directory, once listed, is served by ``GET``.
- Bodies: JSONC rendered from generated values with comments, trailing commas, a BOM and CRLF
  (each carrying a marker), and the same text made hostile. Text the JSONC reader refuses is
  400 ``CONFIG_INVALID`` and the file keeps its bytes; accepted text is written byte-exact and
  ``GET`` gives it back. The marker never reaches the daemon's log nor ``lens log decode``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import jsonc
from tests.runtime.test_jsonc_properties import render, rendered

from .conftest import Daemon, DaemonFactory, parse_raw_response, raw_http, run_lens, serving

MARKER = "raw-config-text-marker-7f3a"
MAIN = '{\n  // the daemon under test\n  "server": {"host": "127.0.0.1",},\n}\n'
OUTSIDE = b'{"outside": "the config directory"}\n'
LATIN1_NAME = b"caf\xe9.json"  # a name that is not UTF-8


async def make_config_dir(daemon_factory: DaemonFactory, tmp_path: Path) -> tuple[Daemon, str, Path]:
    root = tmp_path / "root"
    cdir = root / "config"
    cdir.mkdir(parents=True)
    (cdir / "extra.json").write_text('{"a": 1}\n')
    (cdir / "notes.jsonc").write_text('// notes\n{"b": [1, 2,],}\n')
    for name in ("lens.example.jsonc", "other.template.json", "readme.txt", ".hidden.json", "x.json.bak"):
        (cdir / name).write_text("{}\n")
    (cdir / "subdir.json").mkdir()
    outside = tmp_path / "outside" / "secret.json"
    outside.parent.mkdir()
    outside.write_bytes(OUTSIDE)
    (cdir / "link.json").symlink_to(outside)
    (cdir / "dirlink.jsonc").symlink_to(outside.parent)
    with open(os.path.join(os.fsencode(cdir), LATIN1_NAME), "wb") as f:
        f.write(b"{}\n")
    d = await daemon_factory(config=MAIN, root=root)
    token = await d.pair("admin", strong=True)
    return d, token, outside


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def tree(path: Path) -> dict[str, bytes]:
    """Every regular file under ``path`` (not through links), by relative path."""
    out = {}
    for dirpath, _, files in os.walk(os.fsencode(path)):
        for f in files:
            full = os.path.join(dirpath, f)
            if not os.path.islink(full):
                with open(full, "rb") as fh:
                    out[os.path.relpath(full, os.fsencode(path))] = fh.read()
    return out


async def test_a_file_whose_name_is_not_utf8_is_left_out_of_the_listing(daemon_factory: DaemonFactory, tmp_path: Path):
    # os.scandir gives such a name with surrogate escapes, which no JSON answer can carry: the
    # listing was a 500 (and a traceback in the daemon's log) for as long as the file was there.
    d, token, _ = await make_config_dir(daemon_factory, tmp_path)
    r = await d.get("/config/files", token)
    assert r.status_code == 200, r.text
    assert {f["name"] for f in r.json()["files"]} == {"lens.jsonc", "pair.json", "extra.json", "notes.jsonc"}
    for target in ("caf%E9.json", "caf%C3%A9.json", "caf%ED%B3%A9.json"):
        r2 = await raw_http(d.port, "GET", "/api/v1/config/files/" + target, auth(token))
        assert r2.status == 404, (target, r2.status, r2.body[:200])


async def test_a_main_config_whose_name_is_not_utf8_is_left_out_of_the_listing(tmp_path: Path):
    # `lens serve --config` naming such a file: the main config is always listed, under its
    # own name, which no JSON answer can carry. The listing was a 500 for as long as the daemon
    # ran; now the file is left out, as such a file of the directory is, and the rest is listed.
    cdir = tmp_path / "config"
    cdir.mkdir()
    with open(os.path.join(os.fsencode(cdir), b"lens-" + LATIN1_NAME + b"c"), "wb") as f:
        f.write(MAIN.encode())
    (cdir / "extra.json").write_text('{"a": 1}\n')
    async with serving(tmp_path, "--config", os.fsdecode(b"config/lens-" + LATIN1_NAME + b"c")) as (proc, d):
        token = await d.pair("admin", strong=True)
        r = await d.get("/config/files", token)
        assert r.status_code == 200, r.text
        assert [(f["name"], f["role"]) for f in r.json()["files"]] == [("pair.json", "pair"), ("extra.json", "other")]
        r = await raw_http(d.port, "GET", "/api/v1/config/files/lens-caf%E9.jsonc", auth(token))
        assert r.status == 404, (r.status, r.body[:200])
        assert await proc.terminate() == 0


async def test_a_listed_file_whose_name_has_a_backslash_is_read_and_written(daemon_factory: DaemonFactory,
                                                                           tmp_path: Path):
    # It was listed (editable) but GET and PUT were 404: the lookup refused any name with a
    # backslash, though a name is only ever matched against the directory's own entries.
    d, token, outside = await make_config_dir(daemon_factory, tmp_path)
    (d.config_dir / "a\\b.json").write_text('{"b": 1}\n')
    names = {f["name"] for f in (await d.get("/config/files", token)).json()["files"]}
    assert "a\\b.json" in names
    r = await raw_http(d.port, "GET", "/api/v1/config/files/a%5Cb.json", auth(token))
    assert r.status == 200 and r.json()["text"] == '{"b": 1}\n', (r.status, r.body[:200])
    r = await raw_http(d.port, "PUT", "/api/v1/config/files/a%5Cb.json", auth(token), b'{"text": "{\\"b\\": 2}"}')
    assert r.status == 200 and (d.config_dir / "a\\b.json").read_text() == '{"b": 2}', (r.status, r.body[:200])
    r = await raw_http(d.port, "GET", "/api/v1/config/files/..%5Coutside%5Csecret.json", auth(token))
    assert r.status == 404 and outside.read_bytes() == OUTSIDE


NAMES = [
    "lens.jsonc", "pair.json", "extra.json", "notes.jsonc",
    "lens.example.jsonc", "other.template.json", "readme.txt", ".hidden.json", "x.json.bak", "subdir.json",
    "link.json", "dirlink.jsonc", "missing.json", "caf%E9.json", "caf%C3%A9.json",
    "..", ".", "%2e%2e", "..%2Foutside%2Fsecret.json", "%2e%2e%2foutside%2fsecret.json", "..%252Foutside",
    "..%5Coutside%5Csecret.json", "..\\outside\\secret.json", "link.json%2F", "dirlink.jsonc%2Fsecret.json",
    "lens.jsonc%00", "%00", "LENS.JSONC", "lens.jsonc.", "lens.jsonc%20", "lens%2Ejsonc", "%6Cens.jsonc",
    "lens.json%63", "extra.json%3F", "extra.json%23", "ｌｅｎｓ.jsonc", "lens\u2024jsonc", "e\u0301xtra.json",
    "%C0%AE%C0%AE%2Foutside", "config%2Flens.jsonc", "%2Ftmp%2Fx.json", "lens.jsonc;x", "{{name}}.json",
]
NAME = st.one_of(st.sampled_from(NAMES),
                 st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
                 .map(lambda s: quote(s, safe="")))


@st.composite
def body_text(draw: st.DrawFn) -> str:
    """JSONC carrying MARKER (in a comment and a string), sometimes made hostile."""
    value, text = draw(rendered())
    text = text.replace("{", '{"marker": "' + MARKER + '", ', 1) if text.lstrip("\ufeff \t\r\n").startswith("{") \
        else "/* " + MARKER + " */ " + text
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    if draw(st.integers(0, 2)) == 0:
        at = draw(st.integers(0, len(text)))
        junk = draw(st.sampled_from(["", "\0", "/*", '"', "\\ud800", "1e400", ",,", "}", '"marker": 1, "marker": 2, ']))
        text = text[:at] + junk + text[at + draw(st.integers(0, 2)):]
    return text


async def test_generated_names_and_bodies(daemon_factory: DaemonFactory, tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    d, token, outside = await make_config_dir(daemon_factory, tmp_path)
    caplog.set_level("DEBUG")
    listed = {f["name"]: f for f in (await d.get("/config/files", token)).json()["files"]}
    trio_token = trio.lowlevel.current_trio_token()
    seen: dict[str, int] = {}

    async def name_case(name: str, method: str) -> None:
        before = tree(tmp_path)
        target = "/api/v1/config/files/" + quote(name, safe="%\\;{}.-_~:@!$&'()*+,=")
        body = json.dumps({"text": '{"pwned": true}\n'}).encode() if method == "PUT" else b""
        r = await raw_http(d.port, method, target, auth(token), body)
        seen[f"{method} {r.status}"] = seen.get(f"{method} {r.status}", 0) + 1
        assert r.status < 500, (target, r.status, r.body[:300])
        assert OUTSIDE not in r.body
        after = tree(tmp_path)
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        changed = {k for k in changed if not k.startswith(b"root/data/")}
        if r.status == 200:
            assert unquote(name) in listed, (target, r.body[:200])
            if method == "PUT":
                assert changed <= {b"root/config/" + n.encode() for n in listed}, changed
        else:
            assert r.code in ("CONFIG_FILE_NOT_FOUND", "NOT_FOUND", "CONFIG_FILE_NOT_REGULAR", "CONFIG_INVALID"), \
                (target, r.status, r.body[:200])
            assert changed == set(), (target, changed)
        assert outside.read_bytes() == OUTSIDE and (d.config_dir / "link.json").is_symlink()

    @settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(NAME, st.sampled_from(["GET", "PUT"]))
    def names(name: str, method: str) -> None:
        trio.from_thread.run(name_case, name, method, trio_token=trio_token)

    await trio.to_thread.run_sync(names)
    assert {"GET 200", "GET 404", "PUT 200", "PUT 404"} <= set(seen), seen

    async def listed_case(name: str) -> None:
        path = d.config_dir / name
        try:
            path.write_text('{"generated": true}\n')
        except OSError:  # (a name too long for the file system)
            return
        try:
            r = await d.get("/config/files", token)
            assert r.status_code == 200, (name, r.text)
            for f in r.json()["files"]:
                if f["editable"] and f["exists"]:
                    got = await raw_http(d.port, "GET", "/api/v1/config/files/" + quote(f["name"], safe=""), auth(token))
                    assert got.status == 200, (f["name"], got.status, got.body[:200])
        finally:
            path.unlink()

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="/\0"), min_size=1,
                   max_size=20).map(lambda s: s + ".json"))
    def listed_names(name: str) -> None:
        trio.from_thread.run(listed_case, name, trio_token=trio_token)

    await trio.to_thread.run_sync(listed_names)

    async def body_case(name: str, text: str) -> None:
        path = d.config_dir / name
        before = path.read_bytes()
        r = await d.put(f"/config/files/{name}", token, {"text": text})
        try:
            jsonc.loads(text)
            valid = True
        except jsonc.JsoncError:
            valid = False
        seen[f"body {r.status_code}"] = seen.get(f"body {r.status_code}", 0) + 1
        if valid:
            assert r.status_code == 200, (text[:200], r.text)
            assert path.read_bytes() == text.encode()
            assert r.json()["digest"] == hashlib.sha256(text.encode()).hexdigest()
            got = await d.get(f"/config/files/{name}", token)
            assert got.json()["text"] == text
        else:
            assert r.status_code == 400 and r.json()["error"]["code"] == "CONFIG_INVALID", (text[:200], r.text)
            assert path.read_bytes() == before

    @settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(["extra.json", "notes.jsonc"]), body_text())
    def bodies(name: str, text: str) -> None:
        trio.from_thread.run(body_case, name, text, trio_token=trio_token)

    await trio.to_thread.run_sync(bodies)
    assert seen.get("body 200", 0) > 50 and seen.get("body 400", 0) > 20, seen

    async def main_case(value: dict[str, Any], text: str) -> None:
        before = d.config_path.read_bytes()
        r = await d.put("/config/files/lens.jsonc", token, {"text": text})
        if value.get("server", {}).get("port", 0) <= 65535:
            assert r.status_code == 200, (text[:300], r.text)
            assert d.config_path.read_bytes() == text.encode()
        else:
            assert r.status_code == 400 and "server.port must be 0 to 65535" in r.text, r.text
            assert d.config_path.read_bytes() == before

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 65536), st.data())
    def main(port: int, data: st.DataObject) -> None:
        value = {"server": {"host": "127.0.0.1", "port": port}, "dataDir": "data", "note": MARKER}
        text = render(data.draw, value) + "\n"
        trio.from_thread.run(main_case, value, text, trio_token=trio_token)

    await trio.to_thread.run_sync(main)

    assert MARKER not in caplog.text
    assert "Traceback" not in caplog.text and "unhandled error" not in caplog.text
    out = await run_lens(d.root, "log", "decode", "--data", str(d.data_dir))
    assert "config.changed" in out.stdout and MARKER not in out.stdout and MARKER not in out.stderr
