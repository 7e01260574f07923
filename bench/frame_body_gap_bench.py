"""How long a large event's SSE frame and a large request body hold trio's event loop: on the
loop in one go against a worker thread a step at a time.

Usage::

    python bench/frame_body_gap_bench.py [--runs N] [--quick] [--only CASE,...] [--variant V]

Each case runs under ``trio.run`` beside ``loop_gap_bench``'s ticker (a task sleeping 1 ms at a
time); the figure is the largest interval between two of its turns (and the 99th percentile), the
time the loop was held plus the ticker's own 1 ms, with the work's wall and CPU time (every
thread). Two paths each: ``loop`` (the threshold set past the case: what every frame and body
got before the worker path existed) and ``worker`` (the threshold set to 0). The median of
``--runs`` runs (default 7) is reported, with the range.

The cases (``--quick``: a tenth of each):

* ``frame_ascii``: ``runtime.bus.made_frame`` of an ``input.submitted`` event whose text is the
  largest the default ``log.maxEventBytes`` (32 MiB) allows, less 1 KiB of room, in ASCII;
* ``frame_escaped``: the same size of quotes and newlines (twice its length as JSON);
* ``body_ascii``: ``runtime.http_parts.decoded_body`` of an 8 MB body ``{"text": "..."}`` in ASCII;
* ``body_escaped``: an 8 MB body whose text is quotes and newlines, escaped;
* ``flush``: the bus's step after a frame is made, on the loop whatever its size: a group's
  ``flush`` of a small frame, ``frame_ascii``'s frame and another small one, then a subscriber's
  ``take`` until nothing is left (one path, ``loop``; it runs on the code before the worker path
  too, with ``--only flush``).

``--variant`` replaces what the worker does after each chunk or step (``runtime.pieces.give_way``:
``loop_gap_bench``'s variants; ``code``: what ``runtime/pieces.py`` does), for a frame's pieces and
a body's checks alike. It prints a Markdown table and, as its last stdout line, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import msgspec  # noqa: E402
import trio  # noqa: E402

from events.codec import DEFAULT_MAX_EVENT_BYTES  # noqa: E402
from events.reader import StoredEvent  # noqa: E402
from events.secrets import Secrets  # noqa: E402
from events.types import InputSubmitted, TextPart  # noqa: E402
from loop_gap_bench import HUGE, VARIANTS, gaps_while, median_range, use_variant  # noqa: E402
from runtime.bus import Frame, Group, Subscription, event_frame  # noqa: E402

BODY_BYTES = 8 * 1000 * 1000


class InputBody(msgspec.Struct, forbid_unknown_fields=True):
    text: str


def event(text: str) -> StoredEvent:
    return StoredEvent(1, 1_700_000_000_000, "p1", "s1", 1, "a1", None, "input.submitted", "r1",
                       InputSubmitted(content=[TextPart(text=text)]))


def cases(scale: float) -> dict[str, tuple[str, Any]]:
    chars = int((DEFAULT_MAX_EVENT_BYTES - 1024) * scale)
    body_chars = int(BODY_BYTES * scale) - len(b'{"text":""}')
    return {
        "frame_ascii": ("frame", event(("lorem ipsum " * (chars // 12 + 1))[:chars])),
        "frame_escaped": ("frame", event(('"\n' * (chars // 2 + 1))[:chars])),
        "body_ascii": ("body", msgspec.json.encode({"text": ("lorem ipsum " * (body_chars // 12 + 1))[:body_chars]})),
        "body_escaped": ("body", msgspec.json.encode({"text": ('"\n' * (body_chars // 4 + 1))[:body_chars // 2]})),
        "flush": ("flush", event(("lorem ipsum " * (chars // 12 + 1))[:chars])),
    }


def work(kind: str, data: Any, worker: bool, secrets: Secrets) -> Callable[[], Awaitable[int]]:
    if kind == "flush":
        large = event_frame(data, secrets)  # (made before the timing: the flush and take alone)

        async def flush() -> int:
            group = Group(None, None)
            sub = Subscription(group, 0, 0, 0)
            group.pending = [Frame(1, None, None, b"id: 1\n\n"), large, Frame(3, None, None, b"id: 3\n\n")]
            group.flush()
            size = 0
            while (data := sub.take()) is not None:
                size += len(data)
            return size
        return flush
    from runtime.bus import made_frame
    from runtime.http_parts import decoded_body

    if kind == "frame":
        async def frame() -> int:
            return len((await made_frame(data, secrets, off_loop_chars=0 if worker else HUGE)).data)
        return frame

    async def body() -> int:
        decoded = await decoded_body(data, InputBody, on_loop_bytes=0 if worker else HUGE)
        assert isinstance(decoded, InputBody), decoded
        return len(data)
    return body


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="a tenth of each case, 3 runs")
    ap.add_argument("--only", default="", help="these cases alone (comma-separated names)")
    ap.add_argument("--variant", default="code", choices=sorted(VARIANTS), help="how the worker gives way after a chunk")
    args = ap.parse_args()
    runs = 3 if args.quick else args.runs
    secrets = Secrets({})  # (the daemon's with no key set)
    use_variant(args.variant)
    figures: dict[str, Any] = {"variant": args.variant, "runs": runs, "quick": args.quick, "python": platform.python_version(),
                               "msgspec": msgspec.__version__, "trio": trio.__version__, "cases": {}}
    print("| figure | MB | path | largest gap ms (median, range) | p99 gap ms | wall ms | CPU ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    only = set(filter(None, args.only.split(",")))
    for name, (kind, data) in cases(0.1 if args.quick else 1.0).items():
        if only and name not in only:
            continue
        case: dict[str, Any] = {}
        sizes = set()
        paths = ("loop",) if kind == "flush" else ("loop", "worker")
        for path in paths:
            results = []
            for _ in range(runs):
                out, size = gaps_while(work(kind, data, path == "worker", secrets))
                results.append(out)
                sizes.add(size)
            row: dict[str, Any] = {}
            for key in ("max_gap_ms", "p99_gap_ms", "wall_ms", "cpu_ms"):
                med, lo, hi = median_range([r[key] for r in results])
                row[key] = round(med, 2)
                row[key + "_range"] = [round(lo, 2), round(hi, 2)]
            case[path] = row
        assert len(sizes) == 1, "the two paths made different sizes"
        case["bytes"] = sizes.pop()
        for path in paths:
            row = case[path]
            print(f"| {name} | {case['bytes'] / 1e6:.2f} | {path} | {row['max_gap_ms']:.1f} "
                  f"({row['max_gap_ms_range'][0]:.1f}–{row['max_gap_ms_range'][1]:.1f}) | {row['p99_gap_ms']:.1f} "
                  f"| {row['wall_ms']:.1f} | {row['cpu_ms']:.1f} |")
        figures["cases"][name] = case
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
