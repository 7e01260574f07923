"""F-TOOL-1/2/4 and F-MOD-3, through a real daemon (the ``faux`` provider, the test MCP server
``tests/mcp/server.py`` over stdio): ``capability_search`` offers only a tool some plane can
call, and an MCP tool named as another tool's digest alias keeps its name, the other tool taking
a further alias. What the earlier passes' tests hold is not repeated."""

from __future__ import annotations

from .conftest import DaemonFactory, run_tool
from .test_catalog_mcp_second_pass import faux
from .test_tool_catalog_http import inventory

PTC = "programmatic_tool_run"


async def test_a_deferred_tool_no_plane_can_call_is_not_searchable_and_search_does_not_load_it(
        daemon_factory: DaemonFactory) -> None:
    # With `localPtc.nativeCapabilities` fixed, a deferred `skill` left out of it was searchable:
    # capability_search loaded it, and then a direct call answered TOOL_NOT_NATIVE (a load does not
    # change a fixed native list) and a program's PTC_TOOL_NOT_ALLOWED: loaded, callable from
    # nowhere. Such a tool is not searchable; one a program can call still is.
    d = await daemon_factory(config={**faux(), "localPtc": {"nativeCapabilities": ["capability_search"]},
                                     "tools": {"deferred": ["skill", "get_system_time"]}})
    token = await d.pair("reach", strong=True)
    sid = await d.new_session(token)
    inv = await inventory(d, token, sid)
    assert "skill" not in inv["searchable"] and "get_system_time" in inv["searchable"], inv["searchable"]
    assert "skill" not in inv["offered"] and "skill" not in inv["ptc"]["fromProgram"], inv["ptc"]

    found = await run_tool(d, token, sid, "s1", "capability_search", {"query": "skill"})
    assert found["structured_content"]["loaded"] == [], found
    text = found["content"][0]["text"]
    assert text.startswith('No deferred capability matches "skill": skill is left out of your tools by '
                           "localPtc.nativeCapabilities, and a program cannot call it"), text
    assert text.endswith("Nothing was loaded."), text
    direct = await run_tool(d, token, sid, "s2", "skill", {"name": "review"})
    assert direct["error_code"] == "TOOL_NOT_NATIVE", direct  # (what it answered loaded too, before)

    # A deferred tool a program can call is searched and loaded, and then runs from a program.
    time = await run_tool(d, token, sid, "s3", "capability_search", {"query": "get_system_time"})
    assert time["structured_content"]["loaded"] == ["get_system_time"], time
    program = await run_tool(d, token, sid, "s4", PTC, {"code": "t = get_system_time()\nprint(\"ran\")"})
    assert program.get("error_code") is None and program["content"][0]["text"].startswith("ran"), program
    assert (await inventory(d, token, sid))["searchable"] == [], "nothing left that a plane can call"
