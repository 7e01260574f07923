"""POST /history/search and GET /history/items/{id} through the real daemon, and the answer route."""

from __future__ import annotations

from .conftest import API, Daemon, awaiting_an_answer, error_of, raw_http, wait_until


async def test_history_search_and_read_over_http(daemon: Daemon, strong: str, reader: str) -> None:
    p1 = await daemon.project(strong, "one")
    p2 = await daemon.project(strong, "two")
    s1 = (await daemon.session(strong, p1["id"]))["id"]
    s2 = (await daemon.session(strong, p1["id"]))["id"]
    s3 = (await daemon.session(strong, p2["id"]))["id"]
    await daemon.submit(strong, s1, "r1", "the quokka lives in the garden ✓ ünï")
    await daemon.submit(strong, s2, "r1", "another quokka in session two")
    await daemon.submit(strong, s3, "r1", "secret quokka of project two")
    for sid in (s1, s2, s3):
        await daemon.wait_idle(strong, sid)

    resp = await daemon.post("/history/search", reader, {"projectId": p1["id"], "query": "quokka"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    results = body["results"]
    assert {r["sessionId"] for r in results} == {s1, s2}
    assert set(results[0]) >= {"contextItemId", "sessionId", "agentId", "taskId", "role", "snippet"}
    assert all("secret" not in r["snippet"] for r in results)
    assert body["nextAfterContextItemId"] is None

    # paging: limit 1, then after the first id
    page1 = (await daemon.post("/history/search", reader, {"projectId": p1["id"], "query": "quokka", "limit": 1})).json()
    assert len(page1["results"]) == 1 and page1["nextAfterContextItemId"] == page1["results"][0]["contextItemId"]
    page2 = (await daemon.post("/history/search", reader, {"projectId": p1["id"], "query": "quokka", "limit": 1,
                                                           "afterContextItemId": page1["nextAfterContextItemId"]})).json()
    assert page2["results"][0]["contextItemId"] != page1["results"][0]["contextItemId"]

    # filters
    only = (await daemon.post("/history/search", reader, {"projectId": p1["id"], "query": "quokka",
                                                          "sessionId": s2})).json()["results"]
    assert only and {r["sessionId"] for r in only} == {s2}

    # read one item in byte pages
    item = next(r for r in results if r["sessionId"] == s1 and r["role"] == "user")["contextItemId"]
    text, offset, digests = b"", 0, set()
    while True:
        resp = await daemon.get(f"/history/items/{item}?offset={offset}&limit=5", reader)
        assert resp.status_code == 200, resp.text
        page = resp.json()
        assert set(page) >= {"contextItemId", "text", "offset", "nextOffset", "eof", "digest"}
        text += page["text"].encode()
        digests.add(page["digest"])
        offset = page["nextOffset"]
        if page["eof"]:
            break
    assert text.decode() == "the quokka lives in the garden ✓ ünï"
    assert len(digests) == 1

    # bad input gets clear errors
    resp = await daemon.post("/history/search", reader, {"projectId": p1["id"], "query": "x" * 5000})
    assert resp.status_code == 400 and error_of(resp) == "QUERY_TOO_LONG"
    resp = await daemon.post("/history/search", reader, {"projectId": "nope", "query": "quokka"})
    assert resp.status_code == 404 and error_of(resp) == "PROJECT_NOT_FOUND"
    resp = await daemon.post("/history/search", reader, {"query": "quokka"})
    assert resp.status_code == 422 and error_of(resp) == "VALIDATION_FAILED"
    resp = await daemon.get("/history/items/c999999", reader)
    assert resp.status_code == 404 and error_of(resp) == "HISTORY_ITEM_NOT_FOUND"


async def test_a_search_filtered_by_a_session_the_project_does_not_have_is_refused(daemon: Daemon, strong: str,
                                                                                   reader: str) -> None:
    # It answered 200 and no results, as a search that found nothing: an unknown session, another
    # project's. Now as the other routes name a session, and as an unknown project is.
    p1 = await daemon.project(strong, "one")
    p2 = await daemon.project(strong, "two")
    s1 = (await daemon.session(strong, p1["id"]))["id"]
    gone = (await daemon.session(strong, p1["id"]))["id"]
    other = (await daemon.session(strong, p2["id"]))["id"]
    for sid in (s1, gone, other):
        await daemon.submit(strong, sid, "r1", "a wombat digs")
        await daemon.wait_idle(strong, sid)
    assert (await daemon.request("DELETE", f"/sessions/{gone}", strong)).status_code == 200

    async def search(session_id: str):
        return await daemon.post("/history/search", reader, {"projectId": p1["id"], "query": "wombat",
                                                             "sessionId": session_id})

    r = await search(s1)
    assert r.status_code == 200 and {x["sessionId"] for x in r.json()["results"]} == {s1}, r.text
    for sid in ("ses_nope", other):
        r = await search(sid)
        assert (r.status_code, error_of(r)) == (404, "SESSION_NOT_FOUND"), r.text
        assert r.json()["error"]["message"] == f"project {p1['id']!r} has no session {sid!r}"
    # a deleted session is one the project has: its items are left out of search, as always
    r = await search(gone)
    assert r.status_code == 200 and r.json()["results"] == [], r.text
    # the session read first: a bad project is still PROJECT_NOT_FOUND, a bad id still 400
    r = await daemon.post("/history/search", reader, {"projectId": "nope", "query": "wombat", "sessionId": "ses_nope"})
    assert (r.status_code, error_of(r)) == (404, "PROJECT_NOT_FOUND"), r.text
    r = await daemon.post("/history/search", reader, {"projectId": p1["id"], "query": "wombat", "sessionId": "a b"})
    assert (r.status_code, error_of(r)) == (400, "INVALID_ARGUMENT"), r.text


async def test_answering_a_question_over_http(daemon_factory) -> None:
    config = {"providers": [{"id": "faux", "protocol": "faux", "script": [
        {"when": "ask me", "toolCalls": [{"name": "ask_user", "arguments": {"questions": [
            {"id": "q", "text": "Which colour?", "options": [{"id": "r", "label": "red"}, {"id": "b", "label": "blue"}]}]}}]}]}]}
    daemon = await daemon_factory(config)
    strong = await daemon.pair("answerer", strong=True)
    reader = await daemon.pair("watcher")
    sid, view = await awaiting_an_answer(daemon, strong, "please ask me")
    qid = view["questions"][0]["questionId"]

    async def listed(status: str):
        rows = (await daemon.get("/sessions", reader, params={"project": view["projectId"]})).json()["sessions"]
        return rows if [r["status"] for r in rows] == [status] else None

    await wait_until(lambda: listed("awaiting_answer"), what="the list saying awaiting_answer too")
    path = f"/sessions/{sid}/questions/{qid}/answer"
    resp = await daemon.post(path, reader, {"kind": "skip"})
    assert resp.status_code == 403
    for empty in [{"kind": "answer", "optionIds": ["zz"]}, {"kind": "answer", "optionIds": []},
                  {"kind": "answer", "optionIds": [], "text": "  "}, {"kind": "answer"}]:
        resp = await daemon.post(path, strong, empty)  # unknown, or nothing said at all
        assert resp.status_code == 422 and error_of(resp) == "ANSWER_INVALID", (empty, resp.text)
    resp = await daemon.post(path, strong, {"kind": "answer", "optionIds": ["b", "r"]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["answer"] == {"kind": "answer", "optionIds": ["r", "b"]}
    again = await daemon.post(path, strong, {"kind": "skip"})  # the first valid answer wins
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert again.json()["answer"]["optionIds"] == ["r", "b"]
    # An invalid body is 422 after the answer too (it was 200 "duplicate"; audit C, defect 6).
    for invalid in [{"kind": "answer", "text": ""}, {"kind": "skip", "text": "why"},
                    {"kind": "skip", "optionIds": ["r"]}, {"kind": "answer", "optionIds": ["zz"]}]:
        resp = await daemon.post(path, strong, invalid)
        assert resp.status_code == 422 and error_of(resp) == "ANSWER_INVALID", (invalid, resp.text)
    view = await daemon.wait_idle(strong, sid)
    texts = [i.get("text", "") for i in view["items"]]
    assert any("red (r), blue (b)" in t for t in texts)
    await wait_until(lambda: listed("idle"), what="the list saying idle once answered")
    resp = await daemon.post(f"/sessions/{sid}/questions/nope/answer", strong, {"kind": "skip"})
    assert resp.status_code == 404 and error_of(resp) == "QUESTION_NOT_FOUND"


async def test_concurrent_history_searches_and_reads_all_answer(daemon: Daemon, strong: str, reader: str) -> None:
    # Each request made a HistoryIndex, which registered its rank function on the shared read
    # connection while a worker thread was reading through it: 500 INTERNAL (ThreadingViolation).
    import trio

    p = await daemon.project(strong, "one")
    sid = (await daemon.session(strong, p["id"]))["id"]
    for i in range(3):
        await daemon.submit(strong, sid, f"r{i}", f"the quokka number {i} lives in the garden")
    await daemon.wait_idle(strong, sid)
    first = (await daemon.post("/history/search", reader, {"projectId": p["id"], "query": "quokka"})).json()
    item = first["results"][0]["contextItemId"]
    statuses: list[int] = []

    async def search(i: int) -> None:
        resp = await daemon.post("/history/search", reader, {"projectId": p["id"], "query": f"quokka {i % 3}"})
        statuses.append(resp.status_code)

    async def read() -> None:
        statuses.append((await daemon.get(f"/history/items/{item}?offset=0&limit=8", reader)).status_code)

    async with trio.open_nursery() as nursery:
        for i in range(40):
            nursery.start_soon(search, i)
            nursery.start_soon(read)
    assert statuses.count(200) == 80, sorted(set(statuses))


async def test_chinese_text_is_found_by_a_word_inside_it_over_http(daemon: Daemon, strong: str, reader: str) -> None:
    p = await daemon.project(strong, "one")
    sid = (await daemon.session(strong, p["id"]))["id"]
    await daemon.submit(strong, sid, "r1", "我们使用数据库存储事件，然后重建投影。")
    await daemon.wait_idle(strong, sid)
    resp = await daemon.post("/history/search", reader, {"projectId": p["id"], "query": "数据库"})
    assert resp.status_code == 200, resp.text
    user = [r for r in resp.json()["results"] if r["role"] == "user"]
    assert [r["snippet"] for r in user] == ["我们使用[数据库]存储事件，然后重建投影。"]
    resp = await daemon.post("/history/search", reader, {"projectId": p["id"], "query": "据数"})
    assert [r for r in resp.json()["results"] if r["role"] == "user"] == []


# Thai, Lao, Khmer and Burmese are written without spaces between words, as Chinese: a sentence
# and a word inside it (each: "this system uses a database to store ...", "database").
UNSPACED_SENTENCES = [
    ("ระบบนี้ใช้ฐานข้อมูลเพื่อเก็บเหตุการณ์ทั้งหมด", "ฐานข้อมูล"),
    ("ລະບົບນີ້ໃຊ້ຖານຂໍ້ມູນເພື່ອເກັບເຫດການ", "ຖານຂໍ້ມູນ"),
    ("ប្រព័ន្ធនេះប្រើមូលដ្ឋានទិន្នន័យដើម្បីរក្សាទុកព្រឹត្តិការណ៍", "មូលដ្ឋានទិន្នន័យ"),
    ("ဤစနစ်သည်ဒေတာဘေ့စ်ကိုအသုံးပြုသည်", "ဒေတာဘေ့စ်"),
]


async def test_thai_lao_khmer_and_burmese_text_is_found_by_a_word_inside_it_over_http(
        daemon: Daemon, strong: str, reader: str) -> None:
    # Each run of these scripts was one word of the index: a word inside it found nothing.
    p = await daemon.project(strong, "one")
    sid = (await daemon.session(strong, p["id"]))["id"]
    for i, (sentence, _word) in enumerate(UNSPACED_SENTENCES):
        await daemon.submit(strong, sid, f"r{i}", sentence)
        await daemon.wait_idle(strong, sid)

    async def user_snippets(query: str) -> list[str]:
        resp = await daemon.post("/history/search", reader, {"projectId": p["id"], "query": query})
        assert resp.status_code == 200, resp.text
        return [r["snippet"] for r in resp.json()["results"] if r["role"] == "user"]

    for sentence, word in UNSPACED_SENTENCES:
        start = sentence.index(word)
        marked = f"{sentence[:start]}[{word}]{sentence[start + len(word):]}"
        assert await user_snippets(word) == [marked], word
        assert await user_snippets(word[::-1]) == []  # (its letters in another order)
    assert len(await user_snippets("ฐ")) == 1  # one letter finds the text holding it


async def test_an_input_of_several_text_parts_keeps_them_apart(daemon: Daemon, strong: str, reader: str) -> None:
    """Audit C, defect 2: the view and the history joined the parts with nothing ("helloworld"):
    the view now joins them with a newline and shows ``parts``; history finds a word of any part."""
    p = await daemon.project(strong, "parts")
    sid = (await daemon.session(strong, p["id"]))["id"]
    content = [{"type": "text", "text": "hello"}, {"type": "text", "text": "world"}]
    await daemon.submit(strong, sid, "tp", content)
    view = await daemon.wait_idle(strong, sid)
    user = view["items"][0]
    assert user["role"] == "user"
    assert user["text"] == "hello\nworld"
    assert user["parts"] == content

    found = (await daemon.post("/history/search", reader,
                               {"projectId": p["id"], "query": "world", "sessionId": sid})).json()["results"]
    assert [r["contextItemId"] for r in found if r["role"] == "user"] == [user["id"]]
    page = (await daemon.get(f"/history/items/{user['id']}", reader)).json()
    assert page["text"] == "hello\nworld" and page["eof"] is True
    glued = (await daemon.post("/history/search", reader,
                               {"projectId": p["id"], "query": "helloworld", "sessionId": sid})).json()["results"]
    assert glued == []


async def test_malformed_ids_of_history_and_artifacts_are_invalid_arguments(daemon: Daemon, strong: str,
                                                                             reader: str) -> None:
    # docs/decisions.md "Which 4xx": a malformed id in a path, a query or a body is 400
    # INVALID_ARGUMENT. Search filters answered 200 with nothing, a malformed cursor said "is not
    # an item of this project" (echoing 5,000 characters), item and artifact paths said 404.
    p = (await daemon.project(strong, "ids"))["id"]
    long_id = "x" * 5000
    for field in ("sessionId", "agentId", "taskId", "afterContextItemId"):
        for bad in ("", "a b", "c1!", long_id):
            resp = await daemon.post("/history/search", reader, {"projectId": p, "query": "quokka", field: bad})
            assert resp.status_code == 400 and error_of(resp) == "INVALID_ARGUMENT", (field, bad[:10], resp.text[:300])
            message = resp.json()["error"]["message"]
            assert field in message and len(message) < 400, (field, message[:300])
    # well-formed ids that name nothing: a session the project does not have is 404, as on every
    # session route; an agent or task, no results; a cursor that is no item (named as sent), 400
    resp = await daemon.post("/history/search", reader, {"projectId": p, "query": "quokka", "sessionId": "s_nope",
                                                         "agentId": "main", "taskId": "t_nope"})
    assert resp.status_code == 404 and error_of(resp) == "SESSION_NOT_FOUND", resp.text
    resp = await daemon.post("/history/search", reader, {"projectId": p, "query": "quokka", "agentId": "a_nope",
                                                         "taskId": "t_nope"})
    assert resp.status_code == 200 and resp.json()["results"] == [], resp.text
    resp = await daemon.post("/history/search", reader, {"projectId": p, "query": "quokka",
                                                         "afterContextItemId": "c" + "9" * 199})
    assert resp.status_code == 400 and error_of(resp) == "INVALID_ARGUMENT"
    message = resp.json()["error"]["message"]
    assert "afterContextItemId" in message and "after_context_item_id" not in message and len(message) < 300, message

    headers = {"Authorization": f"Bearer {reader}"}
    for path in ("/history/items/", "/artifacts/"):
        for bad in ("c1!", "%20", "c1%00", "%FF", "abc!", "y" * 300, long_id):
            resp = await raw_http(daemon.port, "GET", API + path + bad, headers)
            assert resp.status == 400 and resp.code == "INVALID_ARGUMENT", (path, bad[:10], resp.status, resp.body[:300])
            assert len(resp.body) < 500, (path, bad[:10], resp.body[:300])
    # well-formed unknown ids stay 404
    resp = await daemon.get("/history/items/c424242", reader)
    assert resp.status_code == 404 and error_of(resp) == "HISTORY_ITEM_NOT_FOUND"
    resp = await daemon.get("/artifacts/" + "0" * 64, reader)
    assert resp.status_code == 404 and error_of(resp) == "ARTIFACT_NOT_FOUND"
    resp = await daemon.get("/artifacts/abc", reader)  # (no SHA-256: malformed)
    assert resp.status_code == 400 and error_of(resp) == "INVALID_ARGUMENT"
