"""SPEC §9's session routes (F-ACT-3, F-ACT-6, F-ACT-7) driven as a client written from SPEC §9
and docs/http-api.md alone would drive them: a real daemon on a loopback port, the ``faux``
provider, JSON bodies as client libraries write them. What the earlier modules pin (the shapes,
the bounds, the refusals of wrong types, duplicate keys, charsets, trailing slashes) is not
repeated here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.http_parts import _null_is_left_out

from .conftest import Daemon, DaemonFactory, error_of, race


async def test_null_for_an_optional_field_is_the_field_left_out(daemon: Daemon, strong: str) -> None:
    """A client that writes every optional field it does not set as ``null`` (a generated client,
    ``Optional[...] = None`` serialised whole) is answered as one that leaves the field out."""
    sid = await daemon.new_session(strong)
    r = await daemon.post(f"/sessions/{sid}/inputs", strong, {"requestId": "r1", "content": "hi", "whenBusy": None})
    assert r.status_code == 202 and r.json()["duplicate"] is False, r.text
    await daemon.wait_idle(strong, sid)
    submitted = [e for e in await daemon.events(strong, sid) if e["kind"] == "input.submitted"]
    assert [e["body"]["when_busy"] for e in submitted] == ["followUp"]

    # the same rule in every route with an optional field of its body
    r = await daemon.post("/pair/requests", body={"clientId": "nullname", "name": None})
    assert (r.status_code, r.json()) == (202, {"clientId": "nullname", "status": "pending"}), r.text
    project_id = (await daemon.view(strong, sid))["projectId"]
    left_out = await daemon.post("/history/search", strong, {"projectId": project_id, "query": "hi"})
    as_null = await daemon.post("/history/search", strong, {"projectId": project_id, "query": "hi", "limit": None,
                                                            "sessionId": None, "afterContextItemId": None})
    assert left_out.status_code == as_null.status_code == 200, as_null.text
    assert as_null.json() == left_out.json() and as_null.json()["results"]
    for body in ({"callId": "nope"}, {"itemIds": ["nope"]}):
        path = "include" if "callId" in body else "hide"
        plain = await daemon.post(f"/sessions/{sid}/context/{path}", strong, body)
        nulled = await daemon.post(f"/sessions/{sid}/context/{path}", strong, body | {"agentId": None})
        assert (nulled.status_code, nulled.json()) == (plain.status_code, plain.json()) == (
            404, plain.json()), nulled.text
        assert error_of(nulled) == "CONTEXT_ITEM_NOT_FOUND"


async def test_a_daemon_started_again_reads_no_body_type_anew(daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    """Which fields take a null as left out is read once per body type: a second daemon in the
    same process serving the same routes adds nothing to what is kept (the context edits' body
    types were made per daemon, one entry more each time)."""
    kept = []
    for root in (tmp_path / "first", tmp_path / "second"):
        d = await daemon_factory(root=root)
        token = await d.pair("edits", strong=True)
        sid = await d.new_session(token)
        for path, body in (("snip", {"itemIds": ["nope"]}), ("include", {"callId": "nope"}),
                           ("hide", {"itemIds": ["nope"]})):
            r = await d.post(f"/sessions/{sid}/context/{path}", token, body | {"agentId": None})
            assert (r.status_code, error_of(r)) == (404, "CONTEXT_ITEM_NOT_FOUND"), r.text
        kept.append(_null_is_left_out.cache_info().currsize)
    assert kept[1] == kept[0]


async def test_null_for_a_required_field_is_refused_naming_it(daemon: Daemon, strong: str) -> None:
    sid = await daemon.new_session(strong)
    before = await daemon.events(strong, sid)
    cases: list[tuple[str, dict[str, Any], str]] = [
        (f"/sessions/{sid}/inputs", {"requestId": None, "content": "hi"}, "requestId"),
        (f"/sessions/{sid}/inputs", {"requestId": "r1", "content": None}, "content"),
        (f"/sessions/{sid}/fork", {"seq": None}, "seq"),
        ("/sessions", {"projectId": None}, "projectId"),
    ]
    for path, body, field in cases:
        r = await daemon.post(path, strong, body)
        assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED"), (body, r.text)
        assert f"$.{field}" in r.json()["error"]["message"], r.text
    # a null where the route takes no field at all is a field all the same
    r = await daemon.post(f"/sessions/{sid}/abort", strong, {"reason": None})
    assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED") and "reason" in r.text
    assert await daemon.events(strong, sid) == before


async def test_a_patch_raced_by_a_delete_changes_all_of_its_fields_or_none(daemon: Daemon, strong: str) -> None:
    """``PATCH /sessions/{id} {thinkingLevel, name}`` sent at the moment of a ``DELETE``: either
    the change comes first (200, both fields changed, then deleted) or the delete does (409
    ``SESSION_DELETED``, nothing changed). The change was two writes, the name after the rest: a
    delete between them left the thinking level changed under a 409 (22 of 40 tries)."""
    project = await daemon.project(strong)
    outcomes = set()
    for _ in range(40):
        sid = (await daemon.session(strong, project["id"]))["id"]
        patch, delete = await race(
            lambda: daemon.request("PATCH", f"/sessions/{sid}", strong, json_body={"thinkingLevel": "high", "name": "n"}),
            lambda: daemon.request("DELETE", f"/sessions/{sid}", strong))
        assert delete.status_code == 200, delete.text
        view = await daemon.view(strong, sid)
        changed = (view["thinkingLevel"], view["name"])
        if patch.status_code == 200:
            assert changed == ("high", "n"), (patch.text, changed)
        else:
            assert (patch.status_code, error_of(patch)) == (409, "SESSION_DELETED"), patch.text
            assert changed == (None, None), changed  # (nothing of the refused change recorded)
        outcomes.add(patch.status_code)
    assert outcomes == {200, 409}  # (both orders came: about one PATCH in three was first)


async def test_an_empty_tool_policy_patch_changes_nothing_and_is_answered_as_such(daemon: Daemon, strong: str) -> None:
    """``{"toolPolicy": {}}`` (a client sending the overrides its form changed: none) is a field
    given that changes nothing, as a thinking level sent again is: 200 with the view, nothing
    recorded. It was 422 telling the client to give toolPolicy, which it had."""
    sid = await daemon.new_session(strong)
    before = await daemon.events(strong, sid)
    r = await daemon.request("PATCH", f"/sessions/{sid}", strong, json_body={"toolPolicy": {}})
    assert r.status_code == 200 and r.json()["id"] == sid, r.text
    assert await daemon.events(strong, sid) == before
    r = await daemon.request("PATCH", f"/sessions/{sid}", strong, json_body={})
    assert (r.status_code, error_of(r)) == (422, "VALIDATION_FAILED")  # (no field at all: still refused)
