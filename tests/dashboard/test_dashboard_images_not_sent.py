"""An image the agent's last request did not send says so on the timeline, under the image.

The provider step names such an image in the request in its place (not whole, or past the
protocol's limits: ``runtime/providers/compile.py``) and its ``model.responded`` says which;
the session view marks the image part (``notSent``) and the call's result (``imagesNotSent``),
and the page shows a note there. A log written as a daemon writes it (the provider's own side is
tested in ``tests/daemon/test_images_a_service_refuses.py``), a real ``lens serve``, headless
Chromium, as in ``test_dashboard_browser.py`` (its fixtures and helpers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.dashboard.test_dashboard_browser import (  # noqa: F401 (fixtures)
    Daemon, browser, console_errors, open_in_page, texts, wait_for)

TALL, WIDE, SMALL = "a" * 64, "b" * 64, "c" * 64
WHY_TALL = "it is 10x2001 pixels; in a request of more than 20 images Anthropic takes at most 2000 a side"
WHY_WIDE = "it is 2500x10 pixels; in a request of more than 20 images Anthropic takes at most 2000 a side"


def write_log(cwd: Path, workspace: Path) -> None:
    import trio

    from events.store import Draft, open_store
    from events import types as t

    async def write() -> None:
        async with open_store(cwd / ".lens") as store:
            async def put(event: Any, **envelope: str) -> None:
                await store.append(Draft(event, project_id="prj_img", session_id="ses_img", agent_id="main",
                                         task_id="tsk_1", **envelope))

            await store.append(Draft(t.ProjectCreated(name="Images", workspace=str(workspace)), project_id="prj_img"))
            await store.append(Draft(t.SessionCreated(model="faux/faux-1"), project_id="prj_img", session_id="ses_img"))
            await put(t.InputSubmitted(content=[t.TextPart("look at these"), t.ImagePart(TALL, "image/png"),
                                                t.ImagePart(SMALL, "image/png")]), request_id="r1")
            await put(t.TaskStarted(input_request_id="r1"))
            await put(t.InputPlaced(input_request_id="r1"))
            await put(t.ModelRequested(provider="claude", model="claude-test"))
            args = json.dumps({"path": "wide.png"})
            await put(t.ModelResponded(tool_calls=[t.ToolCall("c1", "view_image", args)]))
            await put(t.ToolStarted(call_id="c1", name="view_image", arguments=args))
            await put(t.ToolFinished(call_id="c1", name="view_image",
                                     content=[t.TextPart("wide.png"), t.ImagePart(WIDE, "image/png")],
                                     structured_content={"artifact_id": WIDE, "mime": "image/png", "size": 70}))
            await put(t.ModelRequested(provider="claude", model="claude-test"))
            await put(t.ModelResponded(text="I cannot see two of them.", diagnostics={"images_withheld": [
                {"artifact_id": TALL, "why": WHY_TALL}, {"artifact_id": WIDE, "why": WHY_WIDE}]}))
            await put(t.TaskFinished())

    trio.run(write)


def test_dashboard_says_which_images_were_not_sent_to_the_model(browser: Any, tmp_path: Path) -> None:
    cwd, workspace = tmp_path / "daemon", tmp_path / "workspace"
    cwd.mkdir()
    workspace.mkdir()
    write_log(cwd, workspace)
    daemon = Daemon(cwd)
    try:
        token = daemon.pair("dash-images", strong=False)
        driver = browser
        open_in_page(driver, daemon, token, "ses_img")
        expected = [f"This image was not sent to the model: {WHY_TALL}.",
                    f"This image was not sent to the model: {WHY_WIDE}."]
        wait_for(lambda: texts(driver, "#timeline .not-sent") == expected, "the notes of the two images not sent")
        # under the tall image of the input (not the small one), and in the view_image call's card
        where = driver.execute_script("""
          return Array.from(document.querySelectorAll('#timeline .not-sent'), n => {
            const item = n.closest('.msg, .tool');
            const button = n.previousElementSibling && n.previousElementSibling.querySelector('button.artifact');
            return [item.classList.contains('tool') ? 'call' : item.dataset.role, button ? button.dataset.artifactId : null];
          });""")
        assert where == [["user", TALL], ["call", WIDE]], where
        status, view = daemon.request("GET", "/sessions/ses_img", token=token)
        assert status == 200, view
        user = next(it for it in view["items"] if it["role"] == "user")
        assert [p.get("notSent") for p in user["parts"]] == [None, WHY_TALL, None]
        call = next(it for it in view["items"] if it.get("call"))
        assert call["result"]["imagesNotSent"] == [{"artifactId": WIDE, "why": WHY_WIDE}]
        assert console_errors(driver) == []
    finally:
        daemon.stop()
