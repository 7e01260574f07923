"""How long a large JSON answer holds trio's event loop: ``json_answer``'s one call against its pieces.

Usage::

    python bench/loop_gap_bench.py [--runs N] [--quick] [--secret] [--variant V] [--json]

For each answer below (the table's first column), ``json_answer`` runs under ``trio.run`` beside
a ticker task that sleeps 1 ms at a time and records when it runs; the figure is the largest interval between two of its
turns (and the 99th percentile), the time the loop was held plus the ticker's own 1 ms. Three
paths: the **one call** (``json_response``, ``msgspec.json.encode`` on the loop: ``chars=0``),
the **pieces** (``encode_in_pieces`` in a worker thread: ``chars`` past every threshold) and the
**estimate** (what the daemon does: ``chars`` from the code's own estimate, ``strings_chars`` of
a view's texts or ``page_chars`` of the MessagePack bytes a page's events declare, computed on
the loop inside the timed span; the row says which way it went). Each run also gives the answer's wall
time and the process's CPU time (``time.process_time``: both threads). The median of ``--runs``
runs (default 5) is reported, with the range; the estimate's own cost, timed alone, likewise.

The answers (``--quick``: a tenth of each, but 240 items a view: 720,000 characters, past an
``ESCAPE_MAX``-th of the threshold, so a view's escapes are counted at that size too):

* ``view``: a view-like dict of 1,000 items of 3,000 ASCII characters;
* ``view_escaped``: the same, each text of quotes and newlines (twice its length as JSON);
* ``view_controls``: the same, each text of control characters (six times its length as JSON);
* ``events``: a page of 1,000 events of 15,000 characters;
* ``events_small``: a page of 1,000 events of 1,500 ASCII characters (about 1.5 MB declared);
* ``events_controls``: the same of control characters (about 1.5 MB declared, 9 MB of JSON);
* ``string``: one string of 20 MB (no estimate: not a view nor a page).

Also timed once per answer, alone on this thread: the two whole-value steps the pieces once
began with (``msgspec.to_builtins``, still the first call of ``encode_in_pieces``, and
``Secrets.scrub`` with one key set, now done a string at a time in the walk). ``--variant`` replaces
what the pieces' worker does after each chunk (``runtime.pieces.give_way``; ``code``: what
``runtime/pieces.py`` does; ``none``: nothing, the code before it gave way), to compare them in one
checkout. It prints a Markdown table and, as its last stdout line, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402
import trio  # noqa: E402

from events.secrets import Secrets  # noqa: E402
from runtime import json_answer as ja  # noqa: E402
from runtime.json_chars import PIECES_FROM_CHARS, page_chars, strings_chars  # noqa: E402
from runtime.views import view_texts  # noqa: E402

TICK_S = 0.001
VARIANTS = {  # what the worker does after each chunk of pieces; "code": what runtime/pieces.py does
    "code": None,
    "none": lambda: None,
    "sleep0": lambda: time.sleep(0),
    "sleep1us": lambda: time.sleep(1e-6),
    "sleep50us": lambda: time.sleep(5e-5),
    "sched_yield": lambda: os.sched_yield(),
}
HUGE = 1 << 62
# Items of a view at ``--quick``: 720,000 characters, past PIECES_FROM_CHARS // ESCAPE_MAX (699,050),
# where strings_chars counts escapes (a tenth of 1,000 items would never reach the count).
QUICK_VIEW_ITEMS = 240


def answers(scale: float) -> dict[str, Any]:
    n = max(1, int(1000 * scale))
    view_items = max(n, QUICK_VIEW_ITEMS)
    ascii_text = ("abcdefghij" * 300)[:3000]
    escaped = ('"\n' * 1500)[:3000]
    controls = "\x01" * 3000
    body = ("lorem ipsum " * 1300)[:15000]

    def view(text: str) -> dict[str, Any]:
        return {"sessionId": "s1", "items": [{"id": f"i{i}", "kind": "tool", "text": text + str(i)} for i in range(view_items)]}

    def page(text: str) -> dict[str, Any]:
        return {"events": [{"id": i, "type": "tool.finished", "ts": 1_700_000_000_000 + i,
                            "body": {"callId": f"c{i}", "output": text}} for i in range(n)], "next": None}

    return {
        "view": view(ascii_text),
        "view_escaped": view(escaped),
        "view_controls": view(controls),
        "events": page(body),
        "events_small": page(body[:1500]),
        "events_controls": page(controls[:1500]),
        "string": {"text": "x" * int(20_000_000 * scale)},
    }


def estimator(name: str, data: Any) -> Callable[[], Awaitable[int]] | None:
    """The code's own estimate of an answer's ``chars``, as the routes make it (``None``: the
    answer is neither a view nor a page). A page's declared bytes are its events' bodies'
    MessagePack, as its rows declare them (``raw_size``)."""
    if name.startswith("view"):
        return lambda: strings_chars(view_texts(data))
    if name.startswith("events"):
        declared = sum(len(msgspec.msgpack.encode(e["body"])) for e in data["events"])

        async def page() -> int:
            return page_chars(declared)
        return page
    return None


def gaps_while(work: Callable[[], Awaitable[Any]]) -> tuple[dict[str, float], Any]:
    """Run ``work()`` under ``trio.run`` beside a ticker that sleeps :data:`TICK_S` at a time: the
    largest interval between the ticker's turns and its 99th percentile (ms), ``work``'s wall
    and CPU time (ms: ``process_time``, every thread), and what ``work`` returned."""
    gaps: list[float] = []
    out: dict[str, float] = {}
    result: list[Any] = []

    async def ticker(done: trio.Event) -> None:
        last = time.perf_counter()
        while not done.is_set():
            await trio.sleep(TICK_S)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async def main() -> None:
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker, done)
            await trio.sleep(0.02)  # (the ticker is running)
            gaps.clear()
            cpu, wall = time.process_time(), time.perf_counter()
            result.append(await work())
            out["wall_ms"] = (time.perf_counter() - wall) * 1000
            out["cpu_ms"] = (time.process_time() - cpu) * 1000
            await trio.sleep(0.01)  # (the ticker's turn after the work counts)
            done.set()

    trio.run(main)
    ordered = sorted(gaps)
    out["max_gap_ms"] = ordered[-1] * 1000
    out["p99_gap_ms"] = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    return out, result[0]


def one_run(data: Any, path: str, secrets: Secrets | None, estimate: Callable[[], Awaitable[int]] | None) -> dict[str, float]:
    """One answer made by ``path``: ``one_call``, ``pieces``, or ``estimate`` (the code's own
    estimate, made on the loop inside the timed span, decides which)."""
    went: list[float] = []

    async def work() -> Any:
        if path == "estimate":
            assert estimate is not None
            chars = await estimate()
            went.append(float(chars > PIECES_FROM_CHARS))
        else:
            chars = HUGE if path == "pieces" else 0
        return await ja.json_answer(data, secrets, chars=chars)

    out, answer = gaps_while(work)
    if went:
        out["went_pieces"] = went[0]
    out["bytes"] = float(answer.content_length or 0)
    return out


def whole_tree_steps(data: Any) -> dict[str, float]:
    secrets = Secrets({"sk-bench-0123456789abcdefSECRET": "OPENAI_API_KEY"})
    t = time.perf_counter()
    tree = msgspec.to_builtins(data, str_keys=True)
    built = time.perf_counter()
    secrets.scrub(tree)
    scrubbed = time.perf_counter()
    return {"to_builtins_ms": (built - t) * 1000, "scrub_ms": (scrubbed - built) * 1000}


def estimate_alone(estimate: Callable[[], Awaitable[int]], runs: int) -> tuple[int, list[float]]:
    """The estimate, and how long it took each of ``runs`` times under ``trio.run`` (the loop's
    turns between its slices included)."""
    times: list[float] = []
    chars = 0

    async def main() -> None:
        nonlocal chars
        for _ in range(runs):
            t = time.perf_counter()
            chars = await estimate()
            times.append((time.perf_counter() - t) * 1000)

    trio.run(main)
    return chars, times


def use_variant(name: str) -> None:
    """Make :data:`VARIANTS`' ``name`` what every worker does after a chunk: the pieces of an
    answer, a large event's frame, a large request body's checks (each calls
    ``runtime.pieces.give_way`` through its module). A measurement of one process: the module's
    own hook. (Imported only to replace it: frame_body_gap_bench's ``--only flush`` runs on the
    code from before the module too.)"""
    if VARIANTS[name] is not None:
        from runtime import pieces

        pieces.give_way = VARIANTS[name]


def median_range(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a tenth of each answer (views of 240 items), 3 runs")
    ap.add_argument("--secret", action="store_true", help="one secret set (the pieces scrub each string as they meet it)")
    ap.add_argument("--variant", default="code", choices=sorted(VARIANTS), help="how the worker gives way after a chunk")
    ap.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    args = ap.parse_args()
    runs = 3 if args.quick else args.runs
    scale = 0.1 if args.quick else 1.0
    secrets = Secrets({"sk-bench-0123456789abcdefSECRET": "OPENAI_API_KEY"}) if args.secret else None
    use_variant(args.variant)

    figures: dict[str, Any] = {"variant": args.variant, "runs": runs, "quick": args.quick, "python": platform.python_version(),
                               "msgspec": msgspec.__version__, "trio": trio.__version__, "cases": {}}
    print("| figure | JSON MB | path | largest gap ms (median, range) | p99 gap ms | wall ms | CPU ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, data in answers(scale).items():
        case: dict[str, Any] = whole_tree_steps(data)
        size = len(msgspec.json.encode(data))
        case["json_bytes"] = size
        estimate = estimator(name, data)
        for path in ("one_call", "pieces", "estimate"):
            if path == "estimate" and estimate is None:
                continue
            results = []
            for i in range(runs):  # (alternated with the other path would be fairer; kept simple)
                results.append(one_run(data, path, secrets, estimate))
            row = {}
            for key in ("max_gap_ms", "p99_gap_ms", "wall_ms", "cpu_ms"):
                med, lo, hi = median_range([r[key] for r in results])
                row[key] = round(med, 2)
                row[key + "_range"] = [round(lo, 2), round(hi, 2)]
            assert all(int(r["bytes"]) == size for r in results), "the answer's length is not msgspec's"
            label = path
            if path == "estimate":
                assert estimate is not None
                row["went"] = "pieces" if results[0]["went_pieces"] else "one_call"
                chars, times = estimate_alone(estimate, runs)
                med, lo, hi = median_range(times)
                row["estimate_ms"], row["estimate_ms_range"] = round(med, 3), [round(lo, 3), round(hi, 3)]
                row["chars"] = chars
                label = f"estimate ({row['chars']:,} chars: {row['went']}; estimate alone {row['estimate_ms']:.2f} ms)"
            case[path] = row
            print(f"| {name} | {size / 1e6:.2f} | {label} | {row['max_gap_ms']:.1f} "
                  f"({row['max_gap_ms_range'][0]:.1f}–{row['max_gap_ms_range'][1]:.1f}) | {row['p99_gap_ms']:.1f} "
                  f"| {row['wall_ms']:.1f} | {row['cpu_ms']:.1f} |")
        print(f"| {name} | | whole-tree steps alone | to_builtins {case['to_builtins_ms']:.1f} ms, "
              f"scrub (one key) {case['scrub_ms']:.1f} ms | | | |")
        figures["cases"][name] = case
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
