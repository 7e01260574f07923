"""F-API-2 … F-API-4 as a stranger drives them: a fresh install, the ``lens`` command line and HTTP.

What the other daemon tests leave out: the limits of a pairing request at their edge and one
past, a second request under one client id, revoking twice, re-approving a revoked client, the
columns of ``lens pair list`` for the longest client id, the listing's subdirectories, and the
output of a real ``lens serve`` process after config writes (the raw text must not be in it).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import trio

from .conftest import Daemon, DaemonFactory, error_of, run_lens, serving


def records(d: Daemon) -> dict[str, dict]:
    return {c["clientId"]: c for c in json.loads(d.pair_path.read_text())["clients"]}


async def test_a_pairing_request_is_held_to_its_limits_at_the_edge_and_one_past(daemon: Daemon) -> None:
    async def ask(body: object, raw: bytes | None = None) -> httpx2.Response:
        if raw is not None:
            return await daemon.request("POST", "/pair/requests", headers={"Content-Type": "application/json"},
                                        content=raw)
        return await daemon.post("/pair/requests", body=body)

    # clientId: 64 characters is the edge, 65 one past
    r = await ask({"clientId": "c" * 64, "name": "edge"})
    assert r.status_code == 202 and r.json() == {"clientId": "c" * 64, "status": "pending"}
    for bad in ("c" * 65, "", "a/b", "a b"):
        r = await ask({"clientId": bad, "name": "past"})
        assert r.status_code == 400 and error_of(r) == "PAIRING_INVALID", (bad, r.text)
        assert "clientId" in r.json()["error"]["message"]
    # name: 200 characters is the edge, 201 one past
    r = await ask({"clientId": "n200", "name": "n" * 200})
    assert r.status_code == 202 and r.json() == {"clientId": "n200", "status": "pending"}
    r = await ask({"clientId": "n201", "name": "n" * 201})
    assert r.status_code == 400 and error_of(r) == "PAIRING_INVALID" and "name" in r.json()["error"]["message"]
    # missing clientId, wrong types, a null clientId (required): 422 naming the field; not JSON or no body: 400
    for body, field in [({"name": "x"}, "clientId"), ({}, "clientId"), ({"clientId": 5}, "clientId"),
                        ({"clientId": None}, "clientId")]:
        r = await ask(body)
        assert r.status_code == 422 and error_of(r) == "VALIDATION_FAILED", (body, r.text)
        assert field in r.json()["error"]["message"], r.text
    for raw in (b"not json", b"", b"{\"clientId\": \"x\""):
        r = await ask(None, raw)
        assert r.status_code == 400 and error_of(r) == "INVALID_JSON", (raw, r.text)
    # a missing name is an empty one (the name is only shown to the operator); a null name is the
    # name left out, as for every optional field of a body
    r = await ask({"clientId": "nameless"})
    assert r.status_code == 202 and r.json() == {"clientId": "nameless", "status": "pending"}
    r = await ask({"clientId": "nullname", "name": None})
    assert r.status_code == 202 and r.json() == {"clientId": "nullname", "status": "pending"}, r.text
    recs = records(daemon)
    assert set(recs) == {"c" * 64, "n200", "nameless", "nullname"}
    assert recs["n200"]["name"] == "n" * 200 and recs["nameless"].get("name", "") == ""
    assert recs["nullname"].get("name", "") == ""


async def test_a_second_request_under_one_client_id_keeps_the_first_and_grants_nothing(daemon: Daemon) -> None:
    await daemon.register("phone", "my phone")
    r = await daemon.post("/pair/requests", body={"clientId": "phone", "name": "admin laptop", "isVerified": True,
                                                  "trust": "strong", "deviceId": "copied"})
    assert r.status_code == 202 and r.json() == {"clientId": "phone", "status": "pending"}
    recs = records(daemon)
    # one record, the name the operator was first shown, nothing of the extra fields
    assert list(recs) == ["phone"]
    assert recs["phone"]["name"] == "my phone" and recs["phone"].get("status", "pending") == "pending"
    assert not {"isVerified", "trust", "deviceId", "credentialHash"} & set(recs["phone"])


async def test_pair_list_keeps_its_columns_for_a_client_id_of_64_characters(daemon: Daemon) -> None:
    long_id = "l" * 64
    await daemon.register("short", "a")
    await daemon.register(long_id, "")
    out = await run_lens(daemon.root, "pair", "list")
    head, *lines = out.stdout.splitlines()
    assert head.split() == ["clientId", "status", "trust", "name"]
    column = head.index("status")
    assert len(lines) == 2
    for line in lines:
        assert line[column:column + 7] == "pending", (head, line)
        assert line == line.rstrip()
    assert lines[1].split() == [long_id, "pending", "-"]


async def test_revoking_a_revoked_client_again_says_so_and_changes_nothing(daemon: Daemon) -> None:
    token = await daemon.pair("tablet", strong=True, via="cli")
    out = await run_lens(daemon.root, "pair", "revoke", "--client", "tablet")
    assert out.stdout == "revoked client tablet\n" and out.stderr == ""
    await daemon.wait_refused(token)
    before = daemon.pair_path.read_bytes()
    again = await run_lens(daemon.root, "pair", "revoke", "--client", "tablet", check=False)
    assert again.returncode == 0, again
    assert again.stdout == "client tablet is revoked already; nothing was changed\n" and again.stderr == ""
    # (its revokedAt is still the revocation's: it orders the revoked records kept)
    assert daemon.pair_path.read_bytes() == before
    unknown = await run_lens(daemon.root, "pair", "revoke", "--client", "stranger", check=False)
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr.startswith("lens: CLIENT_NOT_FOUND: ") and "'stranger'" in unknown.stderr
    assert daemon.pair_path.read_bytes() == before


async def test_approving_a_revoked_client_issues_a_new_credential_and_the_old_stays_refused(daemon: Daemon) -> None:
    old = await daemon.pair("laptop", strong=True, via="cli")
    await run_lens(daemon.root, "pair", "revoke", "--client", "laptop")
    await daemon.wait_refused(old)
    out = await run_lens(daemon.root, "pair", "approve", "--client", "laptop")
    new = out.stdout.splitlines()[-1]
    assert new != old
    await daemon.wait_accepted(new, timeout=1.0)
    assert (await daemon.get("/whoami", new)).json()["trust"] == "read"  # the approval's trust, not the old one
    assert (await daemon.get("/whoami", old)).status_code == 401
    listing = (await run_lens(daemon.root, "pair", "list")).stdout.splitlines()
    assert [line.split()[:3] for line in listing[1:]] == [["laptop", "approved", "read"]]


async def test_only_the_config_directorys_own_json_files_are_listed(daemon_factory: DaemonFactory,
                                                                    tmp_path: Path) -> None:
    cdir = tmp_path / "config"
    (cdir / "sub").mkdir(parents=True)
    (cdir / "sub" / "inner.json").write_text("{}\n")
    (cdir / "lens.example.jsonc").write_text("{}\n")
    (cdir / "tools.jsonc").write_text("{}\n")
    d = await daemon_factory(config={"dataDir": "x"})
    token = await d.pair("admin", strong=True)
    files = (await d.get("/config/files", token)).json()["files"]
    assert [(f["name"], f["role"]) for f in files] == [("lens.jsonc", "main"), ("pair.json", "pair"),
                                                       ("tools.jsonc", "other")]
    for target in ("sub%2Finner.json", "sub/inner.json", "inner.json", "lens.example.jsonc"):
        r = await d.get(f"/config/files/{target}", token)
        assert r.status_code == 404 and error_of(r) in ("CONFIG_FILE_NOT_FOUND", "NOT_FOUND"), (target, r.text)


async def test_an_invalid_write_of_the_main_config_or_the_pair_file_names_the_problem_and_keeps_the_file(
        daemon_factory: DaemonFactory) -> None:
    d = await daemon_factory(config={"dataDir": "x"})
    token = await d.pair("admin", strong=True)
    main_before, pair_before = d.config_path.read_bytes(), d.pair_path.read_bytes()
    for name, text, words in [
        ("lens.jsonc", '{"server": {"port": 65536}}', "server.port"),
        ("lens.jsonc", "{ oops", "lens.jsonc"),
        ("pair.json", '{"version": 2, "clients": []}', "version 2"),
        ("pair.json", '{"version": 1, "clients": [{"clientId": "a b"}]}', "clients[0].clientId"),
        ("pair.json", '{"version": 1}', "clients"),
    ]:
        r = await d.put(f"/config/files/{name}", token, {"text": text})
        assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", (name, text, r.text)
        assert words in r.json()["error"]["message"], (words, r.text)
    assert d.config_path.read_bytes() == main_before and d.pair_path.read_bytes() == pair_before
    # the port's edge is written
    r = await d.put("/config/files/lens.jsonc", token, {"text": '{"dataDir": "x", "server": {"port": 65535}}'})
    assert r.status_code == 200, r.text
    await d.wait_accepted(token)


async def test_config_text_is_in_no_output_of_a_serving_process(tmp_path: Path) -> None:
    marker = "cfg-marker-7b1d0e"
    (tmp_path / "config").mkdir()
    async with serving(tmp_path) as (serve, d):
        await d.register("admin")
        token = (await run_lens(tmp_path, "pair", "approve", "--client", "admin", "--strong-trust")
                 ).stdout.splitlines()[-1]
        await d.wait_accepted(token)
        writes = [
            ("lens.jsonc", '{"dataDir": "data", "' + marker + '": "' + marker + '"} // ' + marker, 200),
            ("lens.jsonc", '{"server": {"port": "' + marker + '"}}', 400),
            ("lens.jsonc", "{ " + marker, 400),
            ("pair.json", marker, 400),
        ]
        for name, text, status in writes:
            r = await d.put(f"/config/files/{name}", token, {"text": text})
            assert r.status_code == status, (name, r.text)
        r = await d.get("/config/files/lens.jsonc", token)
        assert marker in r.json()["text"]
        assert await serve.terminate() == 0
    output = "\n".join(serve.lines) + (tmp_path / "serve-0.err").read_text()
    assert marker not in output and token not in output
    assert "listening on" in output  # (the output was read)


async def test_an_empty_pair_file_is_named_as_empty(daemon: Daemon) -> None:
    token = await daemon.pair("admin", strong=True)
    before = daemon.pair_path.read_bytes()
    for text in ("", " \n"):
        r = await daemon.put("/config/files/pair.json", token, {"text": text})
        assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
        assert r.json()["error"]["message"] == ('pair.json is not a valid pair file (it is empty; a pair file without '
                                                'clients is {"version": 1, "clients": []})'), r.text
    assert daemon.pair_path.read_bytes() == before
    # one emptied on disk: the command line names it so too (and refuses every credential, 503)
    daemon.pair_path.write_bytes(b"")
    out = await run_lens(daemon.root, "pair", "list", check=False)
    assert out.returncode == 2 and out.stdout == ""
    assert "PAIR_FILE_INVALID" in out.stderr and "(it is empty;" in out.stderr, out.stderr
    r = await daemon.get("/whoami", token)
    assert r.status_code == 503 and error_of(r) == "PAIR_FILE_INVALID"
