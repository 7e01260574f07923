"""How an MCP ``tools/call`` result becomes a Lens tool result (:func:`tools.mcp.results.to_tool_result`),
over a real artifact store; and the registry's run-time removal."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from events import types as t
from tools.artifacts import ArtifactStore
from tools.base import ToolSpec
from tools.mcp.results import MAX_STRUCTURED_BYTES, MAX_TEXT_BYTES, to_tool_result
from tools.registry import builtin_tools
from tests.image_walks import image_work_on_this_thread

from .server import PNG_1X1


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_every_content_block_kind_maps(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    res = await to_tool_result({"content": [
        {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "A text resource"}},
        {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": b64(b"\x00\x01"), "mimeType": "application/x-b"}},
        {"type": "audio", "data": b64(b"RIFF...."), "mimeType": "audio/wav"},
        {"type": "image", "data": b64(b"not an image"), "mimeType": "image/png"},
        {"type": "image", "data": "%%% not base64", "mimeType": "image/png"},
        {"type": "resource_link", "uri": "https://example.com/r", "name": "r"},
        {"type": "hologram"},
        "just a string",
    ]}, store, "mcp__s__t")
    texts = [p.text for p in res.content if isinstance(p, t.TextPart)]
    blob_id, audio_id, fake_png_id = (e.artifact_id for e in res.events)
    assert texts == [
        "[resource file:///a.txt]\nA text resource",
        f"[resource file:///b.bin: application/x-b, 2 bytes, saved as artifact {blob_id}]",
        f"[audio: audio/wav, 8 bytes, saved as artifact {audio_id}]",
        f"[image: image/png, 12 bytes, saved as artifact {fake_png_id}]",  # (not a PNG: not sent as an image)
        "[image: image/png, not valid base64; left out]",
        "[resource link: https://example.com/r (r)]",
        "[a content block of type 'hologram', not shown]",
        "[a content block that is not an object: just a string]",
    ]
    assert store.get(blob_id) == b"\x00\x01" and not res.is_error


async def test_structured_content_errors_and_invalid_results(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    res = await to_tool_result({"content": [{"type": "text", "text": "bad \ud800 input"}], "isError": True,
                                "structuredContent": {"n": 2**70}}, store, "mcp__s__t")
    assert res.is_error and res.error_code == "MCP_TOOL_ERROR"
    assert res.content[0].text == "bad ? input"  # (a lone surrogate cannot be recorded)
    assert res.content[1].text.startswith("[structured content left out: contain an integer outside 64 bits")
    big = {"s": "x" * MAX_STRUCTURED_BYTES}
    res = await to_tool_result({"content": [], "structuredContent": big}, store, "mcp__s__t")
    assert res.structured_content is None and "above the 262144-byte cap" in res.content[0].text
    res = await to_tool_result({"content": [{"type": "image", "data": b64(PNG_1X1), "mimeType": "image/png"}]},
                               store, "mcp__s__t")
    assert isinstance(res.content[0], t.ImagePart) and res.content[0].mime == "image/png"
    # a PNG cut short was shown to the model (a provider refuses it, with every later request)
    cut = {"content": [{"type": "image", "data": b64(PNG_1X1[:-12]), "mimeType": "image/png"}]}
    with image_work_on_this_thread(PNG_1X1[:-12]) as on_loop:  # (walked in a worker thread)
        res = await to_tool_result(cut, store, "mcp__s__t")
    assert on_loop == []
    aid = res.events[0].artifact_id
    assert [p.text for p in res.content] == [f"[image: image/png, {len(PNG_1X1) - 12} bytes, saved as artifact {aid}; "
                                             "the image is truncated (no IEND chunk): not shown to the model]"]
    res = await to_tool_result({"isError": True}, store, "mcp__s__t")  # (said "no message", naming nothing)
    assert res.error_code == "MCP_TOOL_ERROR" and res.content[0].text == "MCP_TOOL_ERROR: mcp__s__t reported an error without a message"
    res = await to_tool_result({"content": "text"}, store, "mcp__s__t")
    assert res.error_code == "MCP_RESULT_INVALID"


def test_the_registry_removes_run_time_tools_but_never_a_replay_safe_one() -> None:
    async def run(args, ctx):  # pragma: no cover - never called
        raise AssertionError

    registry = builtin_tools()
    registry.add(ToolSpec("mcp__s__t", "", {"type": "object"}, run, read_only=False, source="mcp"))
    registry.remove("mcp__s__t")
    assert registry.get("mcp__s__t") is None
    registry.remove("mcp__s__t")  # (already gone: nothing to do)
    safe = next(s for s in registry.visible(is_main_agent=True) if s.replay_safe)
    with pytest.raises(ValueError):
        registry.remove(safe.name)
    assert registry.get(safe.name) is safe


async def test_a_servers_text_cut_in_a_block_note_shows_no_piece_of_a_key(tmp_path: Path) -> None:
    # A block that is not an object, or of an unknown type, is quoted cut to a limit: the keys are
    # replaced whole first (the store's scrub of whole keys finds no piece a cut made first leaves).
    from events.secrets import Secrets

    key = "sk-proj-Q7mZ4kT1vB8nR3wY6pJ0dF5hGcanaryBlock"
    content = ["b" * 190 + key, {"type": "t" * 30 + key}]
    r = await to_tool_result({"content": content}, ArtifactStore(tmp_path), "mcp__s__x",
                             Secrets({key: "LENS_TEST_KEY"}))
    text = "".join(p.text for p in r.content if isinstance(p, t.TextPart))
    assert "bbbb" in text and "tttt" in text, text
    assert not [key[i:i + 8] for i in range(len(key) - 7) if key[i:i + 8] in text], text


@pytest.mark.parametrize("fill", [0, 1])
async def test_structured_content_alone_lengthened_by_its_scrub_is_cut_saying_so(tmp_path: Path, fill: int) -> None:
    # Structured content alone is given as its JSON text, scrubbed, then capped as any text: a key
    # of 8 characters becomes `[redacted OPENAI_API_KEY]`, and a JSON within the structured cap
    # came out past the text cap, cut mid-JSON with no note (the note was decided before it).
    from events.secrets import Secrets

    key, marker = "k8secret", "[redacted OPENAI_API_KEY]"
    grown = len(marker) - len(key)
    pad = MAX_TEXT_BYTES - len(f'{{"s":"{key}"}}') - grown + fill  # (fill 0: exactly at the cap once scrubbed)
    structured = {"s": key + "x" * pad}
    r = await to_tool_result({"content": [], "structuredContent": structured}, ArtifactStore(tmp_path),
                             "mcp__s__x", Secrets({key: "OPENAI_API_KEY"}))
    assert r.structured_content is not None
    text = r.content[0].text
    assert text.startswith('{"s":"' + marker) and len(text.encode()) == MAX_TEXT_BYTES
    if fill:
        assert [p.text for p in r.content[1:]] == [
            f"[output truncated: 1 more byte of text above the {MAX_TEXT_BYTES}-byte cap]"]
    else:
        assert text.endswith('x"}') and len(r.content) == 1
