"""F-API-2..4, a third pass as a client with only SPEC, README and docs/ drives them: a real daemon
on a loopback port and the `lens` CLI. Only what the earlier passes (`test_auth*.py`,
`test_pairing_end_to_end.py`, `test_auth_config_*_pass.py`, the config-file suites) do not hold.
"""

from __future__ import annotations

import json
import os

import trio

from .conftest import Daemon, error_of, run_lens

# --------------------------------------------------------------------------- pairing


async def test_many_requests_registering_one_client_id_at_once_make_one_pending_record(daemon: Daemon) -> None:
    answers = []

    async def ask(i: int) -> None:
        answers.append(await daemon.post("/pair/requests", body={"clientId": "twin", "name": f"device {i}"}))

    async with trio.open_nursery() as nursery:
        for i in range(6):
            nursery.start_soon(ask, i)
    assert [(r.status_code, r.json()) for r in answers] == [(202, {"clientId": "twin", "status": "pending"})] * 6
    records = [c for c in json.loads(daemon.pair_path.read_text())["clients"] if c["clientId"] == "twin"]
    assert len(records) == 1 and records[0]["name"] in {f"device {i}" for i in range(6)}, records
    # the one record is approvable, and its credential is the client's
    token = (await run_lens(daemon.root, "pair", "approve", "--client", "twin")).stdout.splitlines()[-1]
    await daemon.wait_accepted(token)
    listing = (await run_lens(daemon.root, "pair", "list")).stdout
    assert [line.split()[:2] for line in listing.splitlines() if line.startswith("twin ")] == [["twin", "approved"]]


async def test_records_removed_or_set_back_to_pending_through_the_config_api_end_their_streams(
        daemon: Daemon, strong: str) -> None:
    # a revocation by `lens pair revoke` ends a stream (test_auth.py); a strong client rewriting the
    # pair file through the config API, removing one record and un-approving another, does too
    gone = await daemon.pair("gone")
    back = await daemon.pair("back")
    async with daemon.sse(gone) as s_gone, daemon.sse(back) as s_back, daemon.sse(strong) as s_strong:
        for s in (s_gone, s_back, s_strong):
            await s.next()
        read = (await daemon.get("/config/files/pair.json", strong)).json()
        data = json.loads(read["text"])
        data["clients"] = [
            {"clientId": c["clientId"], "name": c["name"], "requestedAt": c["requestedAt"]} if c["clientId"] == "back" else c
            for c in data["clients"] if c["clientId"] != "gone"]
        r = await daemon.put("/config/files/pair.json", strong, {"text": json.dumps(data), "expectDigest": read["digest"]})
        assert r.status_code == 200 and r.json()["appliesAt"] == "watched", r.text
        for s in (s_gone, s_back):
            end = await s.until(lambda m: m.event == "stream.end", timeout=1.5)
            assert end.json()["code"] == "AUTH_INVALID", end.data
        project = await daemon.project(strong, "after-the-edit")  # the writer's own stream goes on
        ev = await s_strong.until(lambda m: m.event == "project.created")
        assert ev.json()["project_id"] == project["id"]
    assert error_of(await daemon.get("/projects", gone)) == "AUTH_INVALID"
    assert error_of(await daemon.get("/projects", back)) == "AUTH_INVALID"
    listing = (await run_lens(daemon.root, "pair", "list")).stdout
    assert "gone" not in listing
    assert [line.split()[:3] for line in listing.splitlines() if line.startswith("back ")] == [["back", "pending", "-"]]
    assert os.stat(daemon.pair_path).st_mode & 0o777 == 0o600


# --------------------------------------------------------------------------- config writes from a read


async def test_a_write_from_a_read_of_a_file_removed_since_is_409_and_creates_nothing(daemon: Daemon, strong: str) -> None:
    r = await daemon.put("/config/files/lens.jsonc", strong, {"text": '{ "dataDir": ".lens" }\n', "expectDigest": None})
    assert r.status_code == 200, r.text
    read = (await daemon.get("/config/files/lens.jsonc", strong)).json()
    assert read["exists"] and read["digest"] == r.json()["digest"]
    daemon.config_path.unlink()  # removed by hand between the read and the write
    r = await daemon.put("/config/files/lens.jsonc", strong, {"text": "{}\n", "expectDigest": read["digest"]})
    assert r.status_code == 409 and error_of(r) == "CONFIG_FILE_CHANGED", r.text
    assert "does not exist now" in r.json()["error"]["message"]
    assert not daemon.config_path.exists()
    again = (await daemon.get("/config/files/lens.jsonc", strong)).json()
    assert (again["exists"], again["digest"]) == (False, None)


async def test_creates_racing_from_a_read_of_no_file_let_exactly_one_through(daemon: Daemon, strong: str) -> None:
    assert (await daemon.get("/config/files/lens.jsonc", strong)).json()["digest"] is None
    answers = []

    async def create(i: int) -> None:
        text = f'{{ "dataDir": ".lens-{i}" }}\n'
        answers.append((text, await daemon.put("/config/files/lens.jsonc", strong, {"text": text, "expectDigest": None})))

    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(create, i)
    won = [text for text, r in answers if r.status_code == 200]
    lost = [r for _, r in answers if r.status_code != 200]
    assert len(won) == 1 and len(lost) == 4, [(r.status_code, r.text) for _, r in answers]
    assert {(r.status_code, error_of(r)) for r in lost} == {(409, "CONFIG_FILE_CHANGED")}
    assert daemon.config_path.read_text() == won[0]
    # a hand-made file in place of "none" is a change as well
    daemon.config_path.unlink()
    daemon.config_path.write_text('{ "dataDir": ".by-hand" }\n')
    r = await daemon.put("/config/files/lens.jsonc", strong, {"text": "{}\n", "expectDigest": None})
    assert r.status_code == 409 and error_of(r) == "CONFIG_FILE_CHANGED", r.text
    assert daemon.config_path.read_text() == '{ "dataDir": ".by-hand" }\n'


# --------------------------------------------------------------------------- what the next start reads


async def test_a_main_config_others_can_write_is_not_written_as_if_the_next_start_would_read_it(
        daemon: Daemon, strong: str) -> None:
    # a lens.jsonc made by hand under umask 002 (0664) after the daemon started on its defaults: a
    # write through the API kept the mode and answered 200 `appliesAt: nextStart`, and the next
    # `lens serve` refused the file (test_config_trust.py). It is refused as the start refuses it.
    daemon.config_path.write_text("{}\n")
    for mode, who in ((0o664, "0664"), (0o606, "0606")):
        os.chmod(daemon.config_path, mode)
        r = await daemon.put("/config/files/lens.jsonc", strong, {"text": '{ "dataDir": ".lens" }\n'})
        assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
        message = r.json()["error"]["message"]
        assert message.startswith("lens.jsonc: ") and f"(mode {who})" in message and "chmod go-w" in message, message
        assert daemon.config_path.read_text() == "{}\n"
        assert os.stat(daemon.config_path).st_mode & 0o777 == mode
    # readable by others is no refusal at start, nor here; the mode is kept
    os.chmod(daemon.config_path, 0o644)
    r = await daemon.put("/config/files/lens.jsonc", strong, {"text": '{ "dataDir": ".lens" }\n'})
    assert r.status_code == 200 and r.json()["appliesAt"] == "nextStart", r.text
    assert os.stat(daemon.config_path).st_mode & 0o777 == 0o644
    # another file of the directory is read by nothing: its mode is its owner's business
    other = daemon.config_dir / "notes.json"
    other.write_text("{}\n")
    os.chmod(other, 0o666)
    r = await daemon.put("/config/files/notes.json", strong, {"text": '{"a": 1}\n'})
    assert r.status_code == 200 and r.json()["appliesAt"] == "notRead", r.text


async def test_a_main_config_of_another_user_is_written_when_its_mode_is_private(daemon: Daemon, strong: str) -> None:
    # A PUT refused a lens.jsonc owned by another user ("owned by another user"), but the write
    # puts a new file, the daemon user's, in its place: the next start takes it. Only the mode,
    # which the write keeps, is judged.
    daemon.config_path.write_text("{}\n")
    os.chmod(daemon.config_path, 0o600)
    if os.geteuid() == 0:
        os.chown(daemon.config_path, 4321, 4321)
    r = await daemon.put("/config/files/lens.jsonc", strong, {"text": '{ "dataDir": ".lens" }\n'})
    assert r.status_code == 200 and r.json()["appliesAt"] == "nextStart", r.text
    st = os.stat(daemon.config_path)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o600
    # ... while a mode others can write is refused whoever owns the file
    os.chmod(daemon.config_path, 0o620)
    if os.geteuid() == 0:
        os.chown(daemon.config_path, 4321, 4321)
    r = await daemon.put("/config/files/lens.jsonc", strong, {"text": '{}\n'})
    assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID" and "(mode 0620)" in r.text, r.text


async def test_a_main_config_write_into_a_directory_others_can_write_is_refused(daemon: Daemon, strong: str) -> None:
    # A daemon started on its defaults (no config file) never judged the config directory: a PUT
    # into a 0775 directory answered 200 `nextStart`, and the next start refused the directory.
    mode = os.stat(daemon.config_dir).st_mode & 0o777
    try:
        os.chmod(daemon.config_dir, 0o775)
        for exists in (False, True):
            if exists:
                daemon.config_path.write_text("{}\n")
                os.chmod(daemon.config_path, 0o600)
            r = await daemon.put("/config/files/lens.jsonc", strong, {"text": '{ "dataDir": ".lens" }\n'})
            assert r.status_code == 400 and error_of(r) == "CONFIG_INVALID", r.text
            message = r.json()["error"]["message"]
            assert message.startswith("lens.jsonc: its directory is writable by other users (mode 0775)"), message
            assert "chmod go-w" in message and "nothing was changed" in message, message
            assert str(daemon.config_dir) not in message, message
            assert daemon.config_path.exists() == exists
            if exists:
                assert daemon.config_path.read_text() == "{}\n"
        # another file of that directory is read by nothing: written
        (daemon.config_dir / "notes.json").write_text("{}\n")
        r = await daemon.put("/config/files/notes.json", strong, {"text": '{"a": 1}\n'})
        assert r.status_code == 200 and r.json()["appliesAt"] == "notRead", r.text
    finally:
        os.chmod(daemon.config_dir, mode)
    r = await daemon.put("/config/files/lens.jsonc", strong, {"text": '{ "dataDir": ".lens" }\n'})
    assert r.status_code == 200 and r.json()["appliesAt"] == "nextStart", r.text


async def test_a_write_keeps_the_permission_bits_but_not_set_id_or_sticky_bits(daemon: Daemon, strong: str) -> None:
    # A PUT kept the whole mode, set-user-ID and set-group-ID included (04755 stayed 04755): a
    # config file is data, and a write through the API is no place to carry a privilege bit on.
    other = daemon.config_dir / "x.json"
    other.write_text("{}\n")
    os.chmod(other, 0o6755)
    if os.stat(other).st_mode & 0o6000 != 0o6000:
        os.chmod(other, 0o4755)  # (a file system that drops set-group-ID for a non-member)
    r = await daemon.put("/config/files/x.json", strong, {"text": '{"a": 1}\n'})
    assert r.status_code == 200, r.text
    assert os.stat(other).st_mode & 0o7777 == 0o755
    assert json.loads(other.read_text()) == {"a": 1}
