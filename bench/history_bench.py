"""History search at scale: the FTS5 projection vs a LIKE scan of the same rows, same run.

Builds ``--items`` context items of realistic text (user requests, assistant prose, tool calls,
tool output: code, logs, diffs; 5 % of the user and assistant messages in Chinese) through the
real history projection's ``apply`` (fed with decoded events, as the projector does), across
many sessions, agents and tasks of one project (plus a second project that must never show up).
Then times common, rare, phrase, prefix, filtered and Chinese queries through the real :class:`HistoryIndex.search`, and the same queries as
``LIKE '%term%'`` scans over the same rows (the approach several peers use).

Prints a table, then one JSON line: items, search_p50_ms, search_p99_ms, like_p50_ms,
index_bytes, text_bytes (and per-query figures).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import apsw  # noqa: E402

from events import types as t  # noqa: E402
from events.reader import StoredEvent  # noqa: E402
from projections.history import HistoryIndex, HistoryProjection  # noqa: E402
from projections.projector import open_projections_db  # noqa: E402

WORDS = (
    "the a to of and in is for that with this on it be as are was by not or at from but have an "
    "function return value error file path test build config session agent event log commit module "
    "import class def self async await trio nursery cancel scope import sqlite index query result "
    "update insert select where order limit offset stream request response model tool call output "
    "parse decode encode bytes string list dict set tuple int float none true false raise except "
    "try finally yield lambda python rust go typescript server client http json header status cache"
).split()
RARE = ["zanzibar", "quokka", "xylophone", "kumquat", "fjord", "mnemonic", "syzygy", "quixotic"]
CODE = [
    "def {w}_{v}(self, {w}):\n    return self.{v}[{w}]\n",
    "for {w} in {v}:\n    if not {w}:\n        continue\n",
    "ERROR {w}: cannot {v} the {w} ({v}=42)\n",
    "@@ -12,7 +12,8 @@ class {W}:\n-    {w} = None\n+    {w} = {v}()\n",
    "$ pytest tests/{w}_test.py -q\n3 passed, 1 failed in 0.42s\n",
    "import {w}\nfrom {v} import {W}\n",
]
ROLES = ["user", "assistant", "tool_call", "tool_result"]
# A share of user and assistant messages is Chinese (written without spaces: every character is
# a token of the index), drawn from a generator of its own so the other items stay the same.
CJK_SHARE = 0.05
CJK_WORDS = (
    "我们 你 的 了 是 在 和 有 这个 那个 然后 因为 所以 但是 如果 需要 可以 使用 修复 重建 投影 "
    "函数 返回 错误 文件 路径 测试 构建 配置 会话 代理 事件 日志 提交 模块 导入 异步 等待 取消 "
    "范围 索引 查询 结果 更新 插入 选择 排序 限制 偏移 请求 响应 模型 工具 调用 输出 解析 解码 "
    "编码 字节 字符串 列表 字典 集合 整数 服务器 客户端 缓存 状态 数据库 数据 存储 性能 问题"
).split()
CJK_RARE = ["鸭嘴兽", "袋鼠", "猕猴桃"]


def sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    if rng.random() < 0.002:
        words[rng.randrange(n)] = rng.choice(RARE)
    return " ".join(words)


def chinese(rng: random.Random, n: int) -> str:
    words = [rng.choice(CJK_WORDS) for _ in range(n)]
    if rng.random() < 0.02:
        words[rng.randrange(n)] = rng.choice(CJK_RARE)
    return "".join(w + ("，" if rng.random() < 0.15 else "") for w in words) + "。"


def item_text(rng: random.Random, role: str) -> str:
    if role == "tool_result":
        parts = []
        for _ in range(rng.randint(2, 6)):
            w, v = rng.choice(WORDS), rng.choice(WORDS)
            parts.append(rng.choice(CODE).format(w=w, v=v, W=w.capitalize()))
        return "".join(parts) + sentence(rng, rng.randint(5, 20))
    if role == "tool_call":
        return json.dumps({"path": f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py", "query": sentence(rng, 4)})
    return sentence(rng, rng.randint(8, 60))


def events(n_items: int, seed: int = 7):
    """Yield StoredEvents producing about ``n_items`` history items."""
    rng = random.Random(seed)
    cjk = random.Random(seed + 1)
    seq = 0
    made = 0
    sessions = max(4, n_items // 2000)
    for s in range(sessions):
        project = "prj_main" if s % 10 else "prj_other"
        sid = f"ses_{s:05d}"
        seq += 1
        yield StoredEvent(seq, seq, project, sid, 1, "main", None, "session.created", None, t.SessionCreated())
        task = f"task_{s}_0"
        agent = "main"
        while made < n_items * (s + 1) // sessions:
            role = rng.choice(ROLES)
            seq += 1
            if role in ("user", "assistant"):
                text = item_text(rng, role)
                if cjk.random() < CJK_SHARE:
                    text = chinese(cjk, cjk.randint(8, 60))
            if role == "user":
                rid = f"r{seq}"
                yield StoredEvent(seq, seq, project, sid, None, agent, None, "input.submitted", rid,
                                  t.InputSubmitted(content=[t.TextPart(text)]))
                seq += 1
                ev: t._Event = t.InputPlaced(input_request_id=rid)
                if rng.random() < 0.2:
                    task = f"task_{s}_{seq}"
            elif role == "assistant":
                ev = t.ModelResponded(text=text)
            elif role == "tool_call":
                ev = t.ModelResponded(tool_calls=[t.ToolCall(f"call{seq}", "read_file", item_text(rng, role))])
            else:
                ev = t.ToolFinished(call_id=f"call{seq - 1}", name="read_file", content=[t.TextPart(item_text(rng, role))])
            if rng.random() < 0.05:
                agent = "main" if agent != "main" else f"sub_{seq}"
            yield StoredEvent(seq, seq, project, sid, None, agent, task, t.kind_of(ev), None, ev)
            made += 1


def build(conn: apsw.Connection, n_items: int) -> float:
    proj = HistoryProjection()
    with conn:
        proj.drop(conn)
        proj.create(conn)
    start = time.perf_counter()
    batch: list[StoredEvent] = []
    for se in events(n_items):
        batch.append(se)
        if len(batch) >= 5000:
            with conn:
                proj.apply(conn, [], batch)
            batch = []
    if batch:
        with conn:
            proj.apply(conn, [], batch)
    with conn:
        conn.execute("INSERT INTO history_fts(history_fts) VALUES('optimize')")
    return time.perf_counter() - start


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=60, help="timed runs per query")
    ap.add_argument("--like-runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="20k items, few runs")
    ap.add_argument("--json", action="store_true", help="(the JSON line is always printed last)")
    ap.add_argument("--data", default=None, help="directory for projections.db (default: a temp dir)")
    args = ap.parse_args()
    if args.quick:
        args.items, args.runs, args.like_runs = 20_000, 10, 2
    data = Path(args.data) if args.data else Path(tempfile.mkdtemp(prefix="lens-history-bench-"))
    data.mkdir(parents=True, exist_ok=True)
    conn = open_projections_db(data)
    build_s = build(conn, args.items)
    n = conn.execute("SELECT count(*) FROM history_items").fetchall()[0][0]
    text_bytes = conn.execute("SELECT sum(length(CAST(text AS BLOB))) FROM history_items").fetchall()[0][0]
    index_bytes = conn.execute(
        "SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'history_fts%'").fetchall()[0][0]
    sample_session = conn.execute("SELECT session_id FROM history_items WHERE project_id='prj_main' LIMIT 1").fetchall()[0][0]
    index = HistoryIndex(conn)
    queries = {
        "common": ("function return", {}),
        "rare": ("quokka", {}),
        "phrase": ('"cannot update the"', {}),
        "prefix": ("nurs* cancel", {}),
        "filtered": ("error file", {"session_id": sample_session}),
        "chinese": ("数据库 错误", {}),
        "chinese rare": ("鸭嘴兽", {}),
    }
    like_terms = {"common": ["function", "return"], "rare": ["quokka"], "phrase": ["cannot update the"],
                  "prefix": ["nurs", "cancel"], "filtered": ["error", "file"],
                  "chinese": ["数据库", "错误"], "chinese rare": ["鸭嘴兽"]}
    rows: list[dict] = []
    all_fts: list[float] = []
    all_like: list[float] = []
    for name, (q, filters) in queries.items():
        index.search("prj_main", q, limit=20, **filters)  # warm
        times = []
        hits = 0
        for _ in range(args.runs):
            t0 = time.perf_counter()
            res, _nxt = index.search("prj_main", q, limit=20, **filters)
            times.append((time.perf_counter() - t0) * 1000)
            hits = len(res)
        like_sql = "SELECT item_id FROM history_items WHERE project_id = ? AND hidden = 0" + "".join(
            " AND text LIKE ?" for _ in like_terms[name])
        like_args: list = ["prj_main", *[f"%{w}%" for w in like_terms[name]]]
        if "session_id" in filters:
            like_sql += " AND session_id = ?"
            like_args.append(filters["session_id"])
        like_sql += " ORDER BY seq DESC LIMIT 20"
        like_times = []
        for _ in range(args.like_runs):
            t0 = time.perf_counter()
            list(conn.execute(like_sql, like_args))
            like_times.append((time.perf_counter() - t0) * 1000)
        all_fts += times
        all_like += like_times
        rows.append({"query": name, "text": q, "hits": hits, "p50_ms": statistics.median(times),
                     "p99_ms": pct(times, 99), "like_p50_ms": statistics.median(like_times)})
    out = {
        "items": n,
        "build_s": round(build_s, 1),
        "search_p50_ms": round(statistics.median(all_fts), 3),
        "search_p99_ms": round(pct(all_fts, 99), 3),
        "like_p50_ms": round(statistics.median(all_like), 3),
        "speedup_p50": round(statistics.median(all_like) / max(statistics.median(all_fts), 1e-6), 1),
        "index_bytes": index_bytes,
        "text_bytes": text_bytes,
        "index_to_text": round(index_bytes / text_bytes, 3),
        "queries": rows,
    }
    print(f"history search, {n} items ({text_bytes / 1e6:.1f} MB text), SQLite {apsw.sqlite_lib_version()}, built in {build_s:.1f} s\n")
    print("| query | hits | p50 ms | p99 ms | LIKE p50 ms | LIKE / FTS |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['query']} `{r['text']}` | {r['hits']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
              f"{r['like_p50_ms']:.1f} | {r['like_p50_ms'] / max(r['p50_ms'], 1e-6):.0f}× |")
    print(f"\nall queries: p50 {out['search_p50_ms']} ms (target < 5), p99 {out['search_p99_ms']} ms (target < 50); "
          f"LIKE p50 {out['like_p50_ms']} ms → {out['speedup_p50']}× (target ≥ 50×); "
          f"index {index_bytes / 1e6:.1f} MB = {out['index_to_text']} × text (target ≤ 1)")
    conn.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
