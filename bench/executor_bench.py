"""Executor round-trip benchmark: ``read_file`` through the Core path vs a bare gRPC unary call.

Usage::

    python bench/executor_bench.py [--calls N] [--rounds R] [--edits E] [--concurrency C] [--json] [--quick]

What one run measures, side by side on the same machine (see docs/performance.md):

* The **real executor** (``lens executor serve --listen 127.0.0.1:0``) runs in a **subprocess**
  over a fresh temporary workspace holding one small file (``small.txt``, 1 KiB of text lines);
  the token travels in its environment. All traffic is loopback.
* **read_file (Core path)**: ``ExecutorClient.call("read_file", {"path": "small.txt"})`` from
  trio: the JSON argument encoding, the ``stub.Call.future()`` + done-callback bridge into trio,
  the executor's auth/protocol interceptor, the confined open/read/UTF-8 page of the workspace
  library, the JSON result and its decoding on the Core side.
* **bare unary (same bridge)**: ``Hello`` through the *same* bridge (``executor_client.unary``)
  on the same channel, with the same metadata, so the interceptor runs too: the floor that the
  Core path is held against. Target: read_file ≥ 0.7 × bare unary.
* **plain sync grpc loop** (reference, no trio): ``stub.Hello(...)`` in a tight loop on its own
  channel; it shows what the trio bridge itself costs.
* **edit_file**: ``ExecutorClient.call("edit_file", rewrite of the small file, call_id=…)``,
  alternating two contents so every call really writes (atomic temp file + fsync + rename, plus
  the call-replay journal the Core path always uses).

The read and bare phases are interleaved in ``R`` rounds of ``N`` sequential calls each (one
call in flight, the agent's normal pattern), after a warm-up; the figure of each is the median of
its rounds' rates, the ratio is computed per round and its median reported. With
``--concurrency C`` > 1 an extra pair of phases runs C calls in flight. It prints a Markdown table
and, as its last stdout line, one JSON object. The executor is stopped (SIGTERM, then kill)
whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
import trio  # noqa: E402

from proto import executor_pb2 as pb  # noqa: E402
from proto import executor_pb2_grpc as pb_grpc  # noqa: E402
from runtime.executor_client import ExecutorClient, unary  # noqa: E402
from tools.executor import PROTOCOL_VERSION  # noqa: E402

DEFAULTS = {"calls": 1000, "rounds": 5, "edits": 500, "concurrency": 16}
QUICK = {"calls": 50, "rounds": 2, "edits": 20, "concurrency": 4}
TARGET_RATIO = 0.7


def start_executor(workdir: Path, token: str) -> tuple[subprocess.Popen[bytes], str]:
    ws = workdir / "workspace"
    ws.mkdir()
    (ws / "small.txt").write_text("".join(f"line {i:04d} of a small source file, some text\n" for i in range(22)))
    out = workdir / "executor.out"
    with out.open("wb") as fo:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.cli", "executor", "serve", "--workspace", str(ws),
             "--listen", "127.0.0.1:0", "--state", str(workdir / "state")],
            cwd=ROOT, env={**os.environ, "LENS_EXECUTOR_TOKEN": token}, stdin=subprocess.DEVNULL,
            stdout=fo, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 30
    while True:
        text = out.read_text()
        if "listening on" in text and text.endswith("\n"):
            return proc, "127.0.0.1:" + text.strip().rsplit(":", 1)[1]
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise SystemExit(f"executor did not start: {text!r}")
        time.sleep(0.02)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


async def rate(n: int, one: Callable[[int], Awaitable[Any]], concurrency: int = 1) -> float:
    """Calls per second for ``n`` calls, ``concurrency`` in flight."""
    per = n // concurrency
    t0 = time.perf_counter()
    if concurrency == 1:
        for i in range(n):
            await one(i)
    else:
        async def worker(w: int) -> None:
            for i in range(per):
                await one(w * per + i)

        async with trio.open_nursery() as nursery:
            for w in range(concurrency):
                nursery.start_soon(worker, w)
    return (per * concurrency if concurrency > 1 else n) / (time.perf_counter() - t0)


def sync_loop(address: str, token: str, n: int) -> float:
    meta = (("authorization", f"Bearer {token}"), ("lens-protocol", str(PROTOCOL_VERSION)))
    channel = grpc.insecure_channel(address)
    try:
        stub = pb_grpc.ExecutorStub(channel)
        req = pb.HelloRequest(protocol_version=PROTOCOL_VERSION)
        for _ in range(max(10, n // 10)):
            stub.Hello(req, metadata=meta, timeout=10)
        t0 = time.perf_counter()
        for _ in range(n):
            stub.Hello(req, metadata=meta, timeout=10)
        return n / (time.perf_counter() - t0)
    finally:
        channel.close()


async def measure(address: str, token: str, cfg: dict[str, int]) -> dict[str, Any]:
    client = ExecutorClient(address, token)
    try:
        await client.hello()
        hello_req = pb.HelloRequest(protocol_version=PROTOCOL_VERSION)
        stub, meta = client._stub, client._meta  # the same channel and metadata as the Core path

        async def bare(_: int) -> Any:
            return await unary(stub.Hello, hello_req, metadata=meta, timeout=10)

        async def read(_: int) -> Any:
            out = await client.call("read_file", {"path": "small.txt"}, timeout=10)
            assert out.result["eof"]
            return out

        contents = ["".join(f"version {v} line {i}\n" for i in range(20)) for v in (0, 1)]
        run_id = secrets.token_hex(4)

        async def edit(i: int) -> Any:
            out = await client.call("edit_file", {"path": "small.txt", "mode": "rewrite", "content": contents[i % 2]},
                                    call_id=f"bench-{run_id}-{i}", timeout=10)
            return out

        warm = max(20, cfg["calls"] // 5)
        await rate(warm, bare)
        await rate(warm, read)
        bare_rates, read_rates, ratios = [], [], []
        for r in range(cfg["rounds"]):
            # Alternate which goes first, so drift within a round favours neither.
            if r % 2 == 0:
                b = await rate(cfg["calls"], bare)
                rd = await rate(cfg["calls"], read)
            else:
                rd = await rate(cfg["calls"], read)
                b = await rate(cfg["calls"], bare)
            bare_rates.append(b)
            read_rates.append(rd)
            ratios.append(rd / b)
        c = cfg["concurrency"]
        conc: dict[str, float] = {}
        if c > 1:
            conc["bare_unary_calls_per_s_concurrent"] = await rate(cfg["calls"], bare, c)
            conc["read_file_calls_per_s_concurrent"] = await rate(cfg["calls"], read, c)
        await rate(min(10, cfg["edits"]), edit)  # warm-up (distinct call ids)
        run_id = secrets.token_hex(4)
        edits_per_s = await rate(cfg["edits"], edit)
        return {
            "bare_unary_calls_per_s": statistics.median(bare_rates),
            "read_file_calls_per_s": statistics.median(read_rates),
            "read_to_bare_ratio": statistics.median(ratios),
            "read_to_bare_ratio_min": min(ratios),
            "read_to_bare_ratio_max": max(ratios),
            "bare_unary_mean_ms": 1000 / statistics.median(bare_rates),
            "read_file_mean_ms": 1000 / statistics.median(read_rates),
            "edits_per_s": edits_per_s,
            **conc,
        }
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=None, help=f"calls per phase per round (default {DEFAULTS['calls']})")
    ap.add_argument("--rounds", type=int, default=None, help=f"interleaved rounds (default {DEFAULTS['rounds']})")
    ap.add_argument("--edits", type=int, default=None, help=f"edit_file calls (default {DEFAULTS['edits']})")
    ap.add_argument("--concurrency", type=int, default=None,
                    help=f"calls in flight for the concurrent phases; 1 skips them (default {DEFAULTS['concurrency']})")
    ap.add_argument("--quick", action="store_true", help=f"smoke size {QUICK}")
    ap.add_argument("--json", action="store_true", help="(kept for scripts) the last line is always JSON")
    args = ap.parse_args(argv)
    cfg = dict(QUICK if args.quick else DEFAULTS)
    for key in cfg:
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    token = secrets.token_urlsafe(32)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lens-executor-bench-") as tmp:
        proc, address = start_executor(Path(tmp), token)
        try:
            figures = trio.run(measure, address, token, cfg)
            figures["plain_sync_unary_calls_per_s"] = sync_loop(address, token, cfg["calls"])
        finally:
            stop(proc)
    figures["bridge_to_sync_ratio"] = figures["bare_unary_calls_per_s"] / figures["plain_sync_unary_calls_per_s"]
    met = figures["read_to_bare_ratio"] >= TARGET_RATIO

    rows = [
        ("read_file, Core path (ExecutorClient.call, trio bridge)", f"{figures['read_file_calls_per_s']:,.0f} calls/s",
         f"mean {figures['read_file_mean_ms']:.2f} ms"),
        ("bare unary Hello, same bridge and channel", f"{figures['bare_unary_calls_per_s']:,.0f} calls/s",
         f"{figures['bare_unary_mean_ms']:.2f} ms"),
        ("plain sync grpc loop, Hello (reference, no trio)", f"{figures['plain_sync_unary_calls_per_s']:,.0f} calls/s",
         f"bridge/sync {figures['bridge_to_sync_ratio']:.2f}"),
        ("**read_file / bare unary** (median of rounds)", f"**{figures['read_to_bare_ratio']:.2f}**",
         f"min–max {figures['read_to_bare_ratio_min']:.2f}–{figures['read_to_bare_ratio_max']:.2f}; target ≥ {TARGET_RATIO} "
         f"({'met' if met else 'NOT met'})"),
        ("edit_file rewrite of the small file (call_id, fsync)", f"{figures['edits_per_s']:,.0f} edits/s", ""),
    ]
    if "read_file_calls_per_s_concurrent" in figures:
        c = cfg["concurrency"]
        rows += [
            (f"read_file, {c} in flight", f"{figures['read_file_calls_per_s_concurrent']:,.0f} calls/s", ""),
            (f"bare unary, {c} in flight", f"{figures['bare_unary_calls_per_s_concurrent']:,.0f} calls/s",
             f"ratio {figures['read_file_calls_per_s_concurrent'] / figures['bare_unary_calls_per_s_concurrent']:.2f}"),
        ]
    print(f"executor round trip: {cfg['rounds']} rounds × {cfg['calls']} sequential calls, {cfg['edits']} edits; "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, grpcio {grpc.__version__}")
    print()
    print("| figure | value | note |")
    print("| --- | --- | --- |")
    for name, value, note in rows:
        print(f"| {name} | {value} | {note} |")
    print()
    out = {
        **figures,
        "target_ratio": TARGET_RATIO,
        "target_met": met,
        "calls": cfg["calls"],
        "rounds": cfg["rounds"],
        "edits": cfg["edits"],
        "concurrency": cfg["concurrency"],
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "total_seconds": time.perf_counter() - t0,
    }
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
