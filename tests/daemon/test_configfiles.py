"""F-API-4: the config-file API lists, reads and writes the daemon's own config files only.

The config directory of each test holds the main config, the pair file, other JSON/JSONC files
that must be listed, and things that must not be (templates, other extensions, dotfiles, a
symlink to a file outside). Paths are sent through :func:`raw_http` so the request target is
exactly what an attacker would send (no client-side normalisation).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import trio

from .conftest import Daemon, DaemonFactory, error_of, raw_http, run_lens

from tests.unwritable import unwritable

MAIN = """// Lens config written by hand
{
  "server": {
    "host": "127.0.0.1", // loopback only
    "port": 7420,
  },
  /* the data dir */ "dataDir": ".lens",
}
"""
OUTSIDE = '{"secret": "outside the config dir"}\n'


@pytest.fixture
async def setup(daemon_factory: DaemonFactory, tmp_path: Path):
    """A daemon whose config dir holds files to list and files to hide; (daemon, strong token, outside file)."""
    root = tmp_path / "root"
    cdir = root / "config"
    cdir.mkdir(parents=True)
    (cdir / "extra.json").write_text('{"a": 1}\n')
    (cdir / "notes.jsonc").write_text("// notes\n{\"b\": [1, 2,],}\n")
    (cdir / "lens.example.jsonc").write_text("{}\n")
    (cdir / "other.template.json").write_text("{}\n")
    (cdir / "readme.txt").write_text("not config\n")
    (cdir / "script.py").write_text("print('x')\n")
    (cdir / ".hidden.json").write_text("{}\n")
    (cdir / "subdir.json").mkdir()
    outside = tmp_path / "outside" / "secret.json"
    outside.parent.mkdir()
    outside.write_text(OUTSIDE)
    (cdir / "link.json").symlink_to(outside)
    (cdir / "dirlink.jsonc").symlink_to(outside.parent)
    d = await daemon_factory(config=MAIN, root=root)
    token = await d.pair("admin", strong=True)
    return d, token, outside


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file() and not p.is_symlink()}


async def get(d: Daemon, token: str, target: str):
    return await raw_http(d.port, "GET", target, {"Authorization": f"Bearer {token}"})


async def put(d: Daemon, token: str, target: str, text: str):
    return await raw_http(d.port, "PUT", target, {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                          json.dumps({"text": text}).encode())


async def test_lists_only_the_daemons_own_config_files(setup):
    d, token, _ = setup
    r = await d.get("/config/files", token)
    assert r.status_code == 200
    files = {f["name"]: f for f in r.json()["files"]}
    assert set(files) == {"lens.jsonc", "pair.json", "extra.json", "notes.jsonc"}
    assert files["lens.jsonc"]["role"] == "main" and files["pair.json"]["role"] == "pair"
    assert files["extra.json"]["role"] == files["notes.jsonc"]["role"] == "other"
    assert files["lens.jsonc"]["exists"] is True and files["lens.jsonc"]["size"] == len(MAIN.encode())
    assert files["pair.json"]["exists"] is True


async def test_main_config_and_pair_file_are_listed_even_before_they_exist(daemon: Daemon):
    token = await daemon.pair("admin", strong=True)
    files = {f["name"]: f for f in (await daemon.get("/config/files", token)).json()["files"]}
    assert files["lens.jsonc"] == {"name": "lens.jsonc", "role": "main", "exists": False, "editable": True, "size": 0}
    r = await daemon.get("/config/files/lens.jsonc", token)
    assert r.status_code == 200 and r.json()["exists"] is False and r.json()["text"] == ""


async def test_reads_a_listed_file_byte_exactly(setup):
    d, token, _ = setup
    r = await d.get("/config/files/lens.jsonc", token)
    assert r.status_code == 200
    body = r.json()
    assert body["text"] == MAIN and body["role"] == "main" and body["exists"] is True
    assert body["digest"] == hashlib.sha256(MAIN.encode()).hexdigest()
    r = await d.get("/config/files/notes.jsonc", token)
    assert r.json()["text"] == (d.config_dir / "notes.jsonc").read_text()


async def test_a_listed_file_the_api_cannot_serve_as_text_is_named(setup):
    # Larger than the body limit (1 MiB here: exactly at it is served), or not UTF-8: a JSON
    # 422 naming the file, not a 500.
    d, token, _ = setup
    limit = 1024 * 1024
    # Served while its PUT body, {"text": "\"xx…\""}, is within the limit (two quotes escaped).
    (d.config_dir / "edge.json").write_bytes(b'"' + b"x" * (limit - 16) + b'"')
    r = await d.get("/config/files/edge.json", token)
    assert r.status_code == 200 and len(r.json()["text"]) == limit - 14
    (d.config_dir / "past.json").write_bytes(b'"' + b"x" * (limit - 15) + b'"')
    (d.config_dir / "big.json").write_bytes(b'"' + b"x" * (limit - 1) + b'"')
    (d.config_dir / "latin1.json").write_bytes(b'{"caf\xe9": 1}')
    for name, words in [("past.json", "too large to write back"), ("big.json", "larger than 1048576 bytes"),
                        ("latin1.json", "not UTF-8 text (byte 5)")]:
        r = await d.get(f"/config/files/{name}", token)
        assert r.status_code == 422 and error_of(r) == "CONFIG_FILE_UNREADABLE", (name, r.text)
        assert name in r.json()["error"]["message"] and words in r.json()["error"]["message"], r.text


TRICKS = [
    "lens.example.jsonc", "other.template.json", "readme.txt", "script.py", ".hidden.json", "subdir.json",
    "link.json", "dirlink.jsonc", "missing.json",
    "..%2Foutside%2Fsecret.json", "..%2F..%2Foutside%2Fsecret.json", "%2e%2e%2foutside%2fsecret.json",
    "%2e%2e", "..", ".", "%2E%2E%2Fconfig%2Flens.jsonc", "..%5Coutside%5Csecret.json", "..\\outside\\secret.json",
    "%2Fetc%2Fpasswd", "%2F{outside}", "/{outside}", "{outside_enc}",
    "lens.jsonc%00", "lens.jsonc%00.txt", "%00", "lens.jsonc%2F", "lens.jsonc%2F..%2Fextra.json",
    "lens.jsonc%20", "LENS.JSONC", "lens.jsonc.", "./lens.jsonc", ".%2Flens.jsonc", "%252e%252e%252foutside",
    "link.json%00", "config%2Flens.jsonc", "..%2Fconfig%2Flens.jsonc", "%C0%AE%C0%AE%2Foutside",
]


def trick_targets(outside: Path) -> list[str]:
    enc = str(outside).replace("/", "%2F")
    return ["/api/v1/config/files/" + t.format(outside=str(outside).lstrip("/"), outside_enc=enc) for t in TRICKS]


async def test_reading_anything_not_listed_is_404(setup):
    d, token, outside = setup
    wrong = []
    for target in trick_targets(outside):
        r = await get(d, token, target)
        if r.status != 404 or r.code not in ("CONFIG_FILE_NOT_FOUND", "NOT_FOUND") or b"outside the config dir" in r.body:
            wrong.append((target, r.status, r.body[:200]))
    assert not wrong, wrong


async def test_writing_anything_not_listed_is_404_and_writes_nothing(setup, tmp_path: Path):
    d, token, outside = setup
    before = tree(tmp_path)
    wrong = []
    for target in trick_targets(outside):
        r = await put(d, token, target, '{"pwned": true}')
        if r.status != 404 or r.code not in ("CONFIG_FILE_NOT_FOUND", "NOT_FOUND"):
            wrong.append((target, r.status, r.body[:200]))
    assert not wrong, wrong
    assert outside.read_text() == OUTSIDE
    after = tree(tmp_path)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    # only the daemon's own data may change meanwhile (it writes nothing for a refused request)
    assert {k for k in changed if not k.startswith("root/data/")} == set(), changed
    assert (d.config_dir / "link.json").is_symlink()


async def test_a_symlinked_main_config_is_neither_read_nor_written_through(daemon_factory, tmp_path: Path):
    # The daemon runs from it, so it is listed as there (it was `exists: false`, and a client
    # offered to create it), but not editable: the API neither follows nor replaces a link.
    root = tmp_path / "root"
    (root / "config").mkdir(parents=True)
    target = tmp_path / "elsewhere.jsonc"
    target.write_text(MAIN)
    (root / "config" / "lens.jsonc").symlink_to(target)
    d = await daemon_factory(root=root)
    token = await d.pair("admin", strong=True)
    r = await d.get("/config/files/lens.jsonc", token)
    assert r.status_code == 422 and error_of(r) == "CONFIG_FILE_NOT_REGULAR"
    assert "symbolic link" in r.json()["error"]["message"] and str(target) not in r.text
    r = await d.put("/config/files/lens.jsonc", token, {"text": "{}\n"})
    assert r.status_code == 422 and error_of(r) == "CONFIG_FILE_NOT_REGULAR"
    assert target.read_text() == MAIN  # not written through the link
    assert (root / "config" / "lens.jsonc").is_symlink()  # nor is the user's link replaced
    listed = {f["name"]: f for f in (await d.get("/config/files", token)).json()["files"]}
    assert listed["lens.jsonc"] == {"name": "lens.jsonc", "role": "main", "exists": True, "editable": False,
                                    "size": len(MAIN)}
    assert listed["pair.json"]["exists"] is True and listed["pair.json"]["editable"] is True


async def test_a_valid_write_replaces_the_file_byte_exactly_and_atomically(setup):
    d, token, _ = setup
    path = d.config_dir / "lens.jsonc"
    os.chmod(path, 0o640)
    inode = os.stat(path).st_ino
    text = MAIN.replace('"port": 7420', '"port": 7421').replace("// loopback only", "// still loopback /* odd */") + "\n"
    r = await d.put("/config/files/lens.jsonc", token, {"text": text})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["name"] == "lens.jsonc" and body["written"] == len(text.encode())
    assert body["digest"] == hashlib.sha256(text.encode()).hexdigest()
    assert path.read_bytes() == text.encode()
    assert os.stat(path).st_ino != inode  # replaced by rename, never rewritten in place
    assert os.stat(path).st_mode & 0o777 == 0o640  # the file keeps its mode
    assert [p.name for p in d.config_dir.iterdir() if p.name.endswith(".tmp")] == []
    read = (await d.get("/config/files/lens.jsonc", token)).json()
    assert read["text"] == text and read["digest"] == body["digest"]
    # the change is recorded in the log
    events = []
    async with d.sse(token, last_event_id=0) as stream:
        while (msg := await stream.next_event()) is not None and msg.event != "config.changed":
            events.append(msg)
    assert msg is not None and msg.json()["body"]["digest"] == body["digest"]
    # other files too, unicode included
    other = '{"emoji": "\u00e9\u2603", "n": 1} // comment\n'
    r = await d.put("/config/files/extra.json", token, {"text": other})
    assert r.status_code == 200 and (d.config_dir / "extra.json").read_bytes() == other.encode()


INVALID_WRITES = [
    ("lens.jsonc", "{ not json"),
    ("lens.jsonc", '{"server": {"port": "seventy"}}'),
    ("lens.jsonc", '{"server": {"port": 70000}}'),
    ("lens.jsonc", "[1, 2]"),
    ("lens.jsonc", '{"providers": [{"id": "a", "protocol": "carrier-pigeon"}]}'),
    ("lens.jsonc", '{"defaultModel": "no-slash"}'),
    # a default model no provider serves: the next start would refuse it (F-MOD-5)
    ("lens.jsonc", '{"defaultModel": "nope/m"}'),
    ("lens.jsonc", '{"providers": [{"id": "local", "protocol": "openai-chat", "models": [{"id": "qwen3"}]}], '
                   '"defaultModel": "local/qwen4"}'),
    ("lens.jsonc", "/* unterminated"),
    ("lens.jsonc", ""),
    ("extra.json", "{ nope"),
    ("notes.jsonc", '{"a": 1} trailing'),
    ("pair.json", '{"version": 1, "clients": "everyone"}'),
    ("pair.json", "{"),
    ("pair.json", '{"version": 2, "clients": []}'),
    ("pair.json", '{"version": 1, "clients": [{"clientId": "../x"}]}'),
    ("pair.json", '{"version": 1, "clients": [{"clientId": "a", "credentialHash": "zz"}]}'),
    ("pair.json", '{"version": 1, "clients": [{"clientId": "a"}, {"clientId": "a", "status": "revoked"}]}'),
    # a misspelt or missing key read as "no clients" and locked every client out
    ("pair.json", '{"version": 1, "Clients": []}'),
    ("pair.json", '{"version": 1}'),
    ("pair.json", '{"clients": []}'),
    ("pair.json", '{"x": ' + "9" * 100_000 + "}"),
    # nested past the interpreter's recursion limit (was a 500 from the decoder)
    ("lens.jsonc", "[" * 5000 + "]" * 5000),
    ("extra.json", "[" * 5000),
    ("pair.json", '{"version": 1, "clients": ' + "[" * 5000 + "]" * 5000 + "}"),
]


async def test_an_invalid_write_is_400_and_changes_nothing(setup):
    d, token, _ = setup
    before_seq = (await d.get("/health")).json()["lastSeq"]
    for name, text in INVALID_WRITES:
        path = d.config_dir / name
        before, inode = path.read_bytes(), os.stat(path).st_ino
        r = await d.put(f"/config/files/{name}", token, {"text": text})
        assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", (name, text, r.text)
        assert path.read_bytes() == before and os.stat(path).st_ino == inode, (name, text)
    assert [p.name for p in d.config_dir.iterdir() if p.name.endswith(".tmp")] == []
    assert (await d.get("/health")).json()["lastSeq"] == before_seq  # no config.changed for a refused write
    await d.wait_accepted(token)  # the pair file still works


async def test_a_write_body_must_be_the_text_object(setup):
    d, token, _ = setup
    before = (d.config_dir / "lens.jsonc").read_bytes()
    for body in [{"text": 5}, {"content": "{}"}, {"text": "{}", "path": "/etc/passwd"}, ["{}"]]:
        r = await d.put("/config/files/lens.jsonc", token, body)
        assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", body
    assert (d.config_dir / "lens.jsonc").read_bytes() == before


async def test_writing_the_pair_file_through_the_api_is_validated_and_honoured(setup):
    d, token, _ = setup
    other = await d.pair("other", strong=False)
    current = (await d.get("/config/files/pair.json", token)).json()["text"]
    data = json.loads(current)
    data["clients"] = [c for c in data["clients"] if c["clientId"] != "other"]
    r = await d.put("/config/files/pair.json", token, {"text": json.dumps(data)})
    assert r.status_code == 200, r.text
    await d.wait_refused(other)
    await d.wait_accepted(token)
    assert os.stat(d.pair_path).st_mode & 0o777 == 0o600


async def test_a_pair_file_written_with_extra_record_fields_is_accepted_and_they_grant_nothing(setup):
    # Flags such as `isVerified` grant nothing (F-API-2); they no longer make the file invalid
    # (a write with one was a 400, a file with one locked every client out).
    d, token, _ = setup
    data = json.loads((await d.get("/config/files/pair.json", token)).json()["text"])
    data["clients"].append({"clientId": "mallory", "isVerified": True, "credentialhash": "0" * 64, "trust": "strong"})
    r = await d.put("/config/files/pair.json", token, {"text": json.dumps(data)})
    assert r.status_code == 200, r.text
    await d.wait_accepted(token)
    assert d.pairs().find("mallory").status == "pending"


async def test_a_second_record_of_an_approved_client_cannot_be_written(setup):
    # Were it accepted, `lens pair revoke` would mark one record revoked and leave its copy (same
    # hash) approved: a client that can write the pair file could make itself unrevocable.
    d, token, _ = setup
    data = json.loads((await d.get("/config/files/pair.json", token)).json()["text"])
    admin = next(c for c in data["clients"] if c["clientId"] == "admin")
    data["clients"].append(dict(admin))
    before = d.pair_path.read_bytes()
    r = await d.put("/config/files/pair.json", token, {"text": json.dumps(data)})
    assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
    assert "'admin' has more than one record" in r.json()["error"]["message"]
    assert d.pair_path.read_bytes() == before
    await trio.to_thread.run_sync(lambda: d.pairs().revoke("admin"))
    await d.wait_refused(token)


async def test_config_text_never_enters_the_daemon_log(setup, caplog: pytest.LogCaptureFixture):
    d, token, _ = setup
    marker = "very-secret-config-marker-42"
    caplog.set_level("DEBUG")
    r = await d.put("/config/files/extra.json", token, {"text": json.dumps({"k": marker})})
    assert r.status_code == 200
    r = await d.put("/config/files/lens.jsonc", token, {"text": "{ " + marker})
    assert r.status_code == 400
    assert marker not in caplog.text
    assert token not in caplog.text



async def test_a_config_directory_the_daemon_cannot_write_is_a_clear_error(setup, caplog: pytest.LogCaptureFixture):
    d, token, _ = setup
    cdir = d.config_path.parent
    before = tree(cdir)
    caplog.set_level("WARNING")
    with unwritable(cdir):
        r = await d.post("/pair/requests", body={"clientId": "newcomer", "name": ""})
        assert r.status_code == 503 and error_of(r) == "PAIR_FILE_UNWRITABLE", r.text
        assert str(cdir) not in r.text  # an unauthenticated caller learns no path
        for name in ("lens.jsonc", "extra.json", "pair.json"):
            current = (await d.get(f"/config/files/{name}", token)).json()["text"]
            r = await d.put(f"/config/files/{name}", token, {"text": current})
            assert r.status_code == 503 and error_of(r) == "CONFIG_FILE_UNWRITABLE", (name, r.text)
            assert "nothing was changed" in r.json()["error"]["message"]
        out = await run_lens(d.root, "pair", "approve", "--client", "admin", check=False)
        assert out.returncode != 0 and "PAIR_FILE_UNWRITABLE" in out.stderr and "Traceback" not in out.stderr
        assert (await d.get("/projects", token)).status_code == 200  # the old credential still works
    assert tree(cdir) == before
    assert "unhandled error" not in caplog.text and "Traceback" not in caplog.text


async def test_a_pair_file_outside_the_config_directory_is_listed_read_and_written(daemon_factory, tmp_path: Path):
    pair = tmp_path / "secrets" / "pair.json"
    d = await daemon_factory(config={"pairFile": str(pair)})
    await d.register("admin")
    token = (await run_lens(d.root, "pair", "approve", "--client", "admin", "--strong-trust")).stdout.splitlines()[-1]
    assert pair.exists() and not (d.config_dir / "pair.json").exists()
    files = {f["name"]: f for f in (await d.get("/config/files", token)).json()["files"]}
    assert files["pair.json"]["role"] == "pair" and files["pair.json"]["exists"] is True
    current = (await d.get("/config/files/pair.json", token)).json()
    assert current["role"] == "pair" and '"admin"' in current["text"]
    data = json.loads(current["text"])
    data["clients"].append({"clientId": "added", "name": "by the API"})
    r = await d.put("/config/files/pair.json", token, {"text": json.dumps(data)})
    assert r.status_code == 200, r.text
    assert [c["clientId"] for c in json.loads(pair.read_text())["clients"]] == ["admin", "added"]
    assert not (d.config_dir / "pair.json").exists()


@pytest.mark.parametrize("extra", [0, 1])
async def test_a_file_is_served_only_if_it_can_be_written_back(daemon_factory, extra: int):
    d = await daemon_factory(config={"server": {"maxBodyBytes": 65536}})
    token = await d.pair("admin", strong=True)
    text = "[" + "1," * ((65536 - len('{"text": "[1]"}')) // 2) + "1]"  # nothing to escape
    text = text[:-2] + "1" * (1 + extra) + text[-2:]
    (d.config_dir / "big.json").write_text(text)
    r = await d.get("/config/files/big.json", token)
    if extra:
        assert r.status_code == 422 and error_of(r) == "CONFIG_FILE_UNREADABLE", r.text
        assert "too large to write back" in r.json()["error"]["message"]
        return
    assert r.status_code == 200 and r.json()["text"] == text
    body = json.dumps({"text": text}).encode()
    assert len(body) == 65536
    r = await d.put("/config/files/big.json", token, {"text": text})
    assert r.status_code == 200, r.text


async def test_an_unknown_name_is_quoted_short(daemon: Daemon, strong: str) -> None:
    """A name of 5,000 characters was echoed whole in the 404 (found by test_http_fuzz.py)."""
    name = "a" * 5000 + ".json"
    for r in [await daemon.get(f"/config/files/{name}", strong),
              await daemon.put(f"/config/files/{name}", strong, {"text": "{}"})]:
        assert r.status_code == 404 and error_of(r) == "CONFIG_FILE_NOT_FOUND", r.text[:300]
        assert r.json()["error"]["message"] == f"{'a' * 80!r} is not one of the daemon's config files"


async def test_a_config_write_with_a_key_written_in_it_is_refused_and_the_file_kept(setup):
    # Keys come only from environment variables (F-MOD-6): a literal key in a provider is refused
    # as it is at start-up, before the file is replaced, and the answer does not quote it.
    d, token, _ = setup
    path = d.config_dir / "lens.jsonc"
    before = path.read_bytes()
    secret = "sk-written-Hq4Zr8Lm2Ty6Nv"
    text = json.dumps({"providers": [{"id": "oa", "protocol": "openai-chat", "apiKey": secret,
                                      "models": [{"id": "m"}]}]})
    r = await d.put("/config/files/lens.jsonc", token, {"text": text})
    assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
    message = r.json()["error"]["message"]
    assert "provider 'oa'" in message and "'apiKey'" in message and "'apiKeyEnv'" in message, message
    assert secret[:8] not in r.text
    assert path.read_bytes() == before
