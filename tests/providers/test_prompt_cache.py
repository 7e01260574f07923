"""The daemon's per-project system prompt cache: one build per refresh period, shared, never stale past it."""

from __future__ import annotations

import pytest
import trio

from runtime.prompt import PROMPT_REFRESH_SECONDS, PromptCache, build_system_prompts


class Files:
    """AGENTS.md texts per project, counting reads; a build can be told to fail or to wait."""

    def __init__(self) -> None:
        self.text = {"p": "rule one", "q": "rule of q"}
        self.reads: list[str | None] = []
        self.fail = False
        self.gate: trio.Event | None = None

    async def build(self, project_id: str | None) -> list[str]:
        self.reads.append(project_id)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise OSError("executor unreachable")

        async def read_text(path: str) -> str | None:
            return self.text.get(project_id) if path == "/ws/AGENTS.md" else None

        return (await build_system_prompts(read_text, workspace="/ws", home=None)).for_agent(True)


async def test_one_build_per_refresh_period_then_edits_show(autojump_clock: trio.testing.MockClock) -> None:
    files = Files()
    cache = PromptCache(files.build)
    first = await cache.get("p")
    assert "rule one" in first[0]
    files.text["p"] = "rule two"
    await trio.sleep(PROMPT_REFRESH_SECONDS * 0.99)
    assert await cache.get("p") == first  # within the period: the files are not read again
    assert files.reads == ["p"]
    await trio.sleep(PROMPT_REFRESH_SECONDS * 0.02)  # the period is over at exactly `refresh`
    again = await cache.get("p")
    assert "rule two" in again[0] and "rule one" not in again[0]
    assert files.reads == ["p", "p"]


async def test_projects_are_cached_apart() -> None:
    files = Files()
    cache = PromptCache(files.build)
    p, q, none = await cache.get("p"), await cache.get("q"), await cache.get(None)
    assert "rule one" in p[0] and "rule of q" in q[0]
    assert "rule one" not in none[0] and "rule of q" not in none[0]
    assert await cache.get("q") == q
    assert files.reads == ["p", "q", None]


async def test_concurrent_requests_share_one_build() -> None:
    files = Files()
    files.gate = trio.Event()
    cache = PromptCache(files.build)
    got: list[list[str]] = []

    async def ask() -> None:
        got.append(await cache.get("p"))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        files.gate.set()
    assert files.reads == ["p"] and len(got) == 5 and all(g == got[0] for g in got)


async def test_a_failed_or_cancelled_build_is_not_cached(autojump_clock: trio.testing.MockClock) -> None:
    files = Files()
    files.fail = True
    cache = PromptCache(files.build)
    with pytest.raises(OSError, match="executor unreachable"):
        await cache.get("p")
    files.fail = False
    files.gate = trio.Event()
    with trio.move_on_after(1) as scope:  # cancelled while reading the files
        await cache.get("p")
    assert scope.cancelled_caught
    files.gate = None
    assert "rule one" in (await cache.get("p"))[0]
    assert files.reads == ["p", "p", "p"]


async def test_callers_cannot_change_the_cached_prompt() -> None:
    cache = PromptCache(Files().build)
    mine = await cache.get("p")
    mine.append("tampered")
    assert await cache.get("p") == mine[:1]
