"""F-TOOL-9: ``get_system_time`` and ``sleep_milliseconds``, through the tool registry (the way
the actor calls them: JSON argument text in, a result or an error result out)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from datetime import datetime, timezone

import pytest
import trio

from conftest import one
from runtime.providers.faux import FauxToolCall, FauxTurn
from tools.base import ToolContext
from tools.registry import builtin_tools
from tools.time import MAX_SLEEP_MS, time_fields

UTC_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
LOCAL_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$")
CTX = ToolContext("p1", "ses_1", "main", "task_1", "call_1", True)


async def run(name: str, arguments: str):
    return await builtin_tools().run(name, arguments, CTX)


def check_one_instant(fields: dict) -> None:
    assert UTC_RE.match(fields["utc"]), fields
    assert LOCAL_RE.match(fields["local"]), fields
    seconds = fields["unix_ms"] // 1000
    utc = datetime.strptime(fields["utc"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    local = datetime.fromisoformat(fields["local"])
    assert int(utc.timestamp()) == seconds
    assert int(local.timestamp()) == seconds


@pytest.fixture
def zone(monkeypatch):
    """Sets the process's time zone (``TZ``) for one test and puts it back after."""
    import time

    def set_zone(tz: str) -> None:
        monkeypatch.setenv("TZ", tz)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


async def test_get_system_time_renders_one_instant():
    res = await run("get_system_time", "{}")
    assert not res.is_error
    fields = res.structured_content
    assert set(fields) == {"unix_ms", "utc", "local"}
    assert isinstance(fields["unix_ms"], int)
    check_one_instant(fields)
    assert fields["utc"] in res.content[0].text


@pytest.mark.parametrize("unix_ms", [0, 999, 1_700_000_000_123, 4_102_444_799_999, 951_782_400_000])
def test_time_fields_agree_at_fixed_instants(unix_ms):
    fields = time_fields(unix_ms * 1_000_000)
    assert fields["unix_ms"] == unix_ms
    check_one_instant(fields)


async def test_get_system_time_refuses_arguments():
    for arguments in ('{"tz": "UTC"}', '{"x": 1}'):
        res = await run("get_system_time", arguments)
        assert res.is_error and res.error_code == "INVALID_ARGUMENT"


async def test_sleep_zero_returns_start_and_end(autojump_clock):
    res = await run("sleep_milliseconds", '{"milliseconds": 0}')
    assert not res.is_error
    s = res.structured_content
    assert set(s) == {"start_unix_ms", "end_unix_ms"} and s["start_unix_ms"] <= s["end_unix_ms"]


async def test_sleep_waits_virtual_time(autojump_clock):
    before = trio.current_time()
    res = await run("sleep_milliseconds", '{"milliseconds": 1500}')
    assert trio.current_time() - before == pytest.approx(1.5)
    assert res.structured_content["start_unix_ms"] <= res.structured_content["end_unix_ms"]


async def test_sleep_at_the_maximum_is_accepted_and_cancellable(autojump_clock):
    before = trio.current_time()
    with trio.move_on_after(60) as scope:
        await run("sleep_milliseconds", json.dumps({"milliseconds": MAX_SLEEP_MS}))
    assert scope.cancelled_caught
    assert trio.current_time() - before == pytest.approx(60)


async def test_sleep_is_cancellable_from_outside(autojump_clock):
    async with trio.open_nursery() as nursery:
        done = []

        async def sleeper():
            await run("sleep_milliseconds", '{"milliseconds": 100000}')
            done.append(True)

        nursery.start_soon(sleeper)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert done == [] and trio.current_time() == pytest.approx(1)


@pytest.mark.parametrize("arguments", [
    '{"milliseconds": -1}',
    '{"milliseconds": 2147483648}',
    '{"milliseconds": "5"}',
    '{"milliseconds": 5.5}',
    '{"milliseconds": true}',
    '{"milliseconds": null}',
    '{}',
    '{"milliseconds": 5, "extra": 1}',
    '{"milliseconds": [5]}',
])
async def test_sleep_refuses_bad_arguments(arguments, autojump_clock):
    before = trio.current_time()
    res = await run("sleep_milliseconds", arguments)
    assert res.is_error and res.error_code == "INVALID_ARGUMENT", arguments
    assert res.structured_content["error"]["code"] == "INVALID_ARGUMENT"
    assert trio.current_time() == before  # refused before sleeping


async def test_time_tools_in_a_session(rt, autojump_clock):
    rt.faux.script = [FauxTurn(when="time please", tool_calls=[
        FauxToolCall("get_system_time"), FauxToolCall("sleep_milliseconds", {"milliseconds": 250})])]
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "time please")
    evs = await rt.events(sid)
    clock = one(evs, "tool.finished", name="get_system_time").event
    check_one_instant(clock.structured_content)
    nap = one(evs, "tool.finished", name="sleep_milliseconds").event
    assert nap.status == "ok"
    assert nap.structured_content["start_unix_ms"] <= nap.structured_content["end_unix_ms"]
    assert one(evs, "tool.started", name="sleep_milliseconds").event.replay_safe is True


@pytest.mark.parametrize("tz, offset", [("Asia/Kolkata", "+05:30"), ("America/St_Johns", "-03:30"), ("UTC", "+00:00")])
def test_local_time_carries_the_zone_offset(tz, offset, zone):
    zone(tz)
    fields = time_fields(1_700_000_000_123 * 1_000_000)  # November: no daylight saving
    assert fields["local"].endswith(offset)
    check_one_instant(fields)


@pytest.mark.parametrize("tool, arguments", [
    ("sleep_milliseconds", json.dumps({"milliseconds": "9" * 5000})),
    ("sleep_milliseconds", json.dumps({"milliseconds": ["x" * 5000]})),
    ("sleep_milliseconds", json.dumps({"milliseconds": 5, "x" * 5000: 1})),
    ("get_system_time", json.dumps({"y" * 5000: 1})),
])
async def test_a_long_bad_value_is_named_short(tool, arguments, autojump_clock):
    # The message names the argument and the rule and quotes the value cut short: a model's
    # 5,000-character string is not echoed whole into its context and the log.
    res = await run(tool, arguments)
    assert res.is_error and res.error_code == "INVALID_ARGUMENT"
    message = res.structured_content["error"]["message"]
    assert len(message) < 300, len(message)
    assert ("milliseconds" in message) if tool == "sleep_milliseconds" else ("does not take" in message)
    assert "…" in message


@pytest.mark.parametrize("as_float", [False, True])
@pytest.mark.parametrize("ms", [0, 1, MAX_SLEEP_MS - 1, MAX_SLEEP_MS])
async def test_sleep_accepts_every_edge_and_waits_that_long(ms, as_float, autojump_clock):
    # (as a float too: 5.0 is an integer to JSON Schema, and models send such numbers)
    before = trio.current_time()
    with trio.move_on_after(10) as scope:
        res = await run("sleep_milliseconds", json.dumps({"milliseconds": float(ms) if as_float else ms}))
    waited = trio.current_time() - before
    if ms <= 10_000:
        assert not res.is_error and not scope.cancelled_caught
        assert waited == pytest.approx(ms / 1000)
    else:  # (cut off by the caller: accepted, and sleeping)
        assert scope.cancelled_caught and waited == pytest.approx(10)


@pytest.mark.parametrize("arguments", ['{"milliseconds": 1.5}', '{"milliseconds": -2147483648}',
                                       '{"milliseconds": 4294967296}', '{"milliseconds": {"ms": 5}}',
                                       '{"milliseconds": -1.0}', '{"milliseconds": 2147483648.0}',
                                       '{"milliseconds": 2.147483648e9}', '{"milliseconds": 0.5}',
                                       '{"milliseconds": 1e999}', '{"milliseconds": -1e999}',
                                       '{"milliseconds": 1e20}', '{"milliseconds": 1e300}'])
async def test_sleep_refuses_more_non_integers_and_out_of_range_values_naming_the_range(arguments, autojump_clock):
    res = await run("sleep_milliseconds", arguments)
    assert res.is_error and res.error_code == "INVALID_ARGUMENT"
    assert f"from 0 to {MAX_SLEEP_MS}" in res.structured_content["error"]["message"]


@pytest.mark.parametrize("arguments, ms", [('{"milliseconds": 5.0}', 5), ('{"milliseconds": -0.0}', 0),
                                           ('{"milliseconds": 1e3}', 1000), ('{"milliseconds": 2.5E1}', 25)])
async def test_sleep_takes_a_number_with_a_zero_fraction_as_its_integer(arguments, ms, autojump_clock):
    before = trio.current_time()
    res = await run("sleep_milliseconds", arguments)
    assert not res.is_error, res.content
    assert res.content[0].text == f"slept {ms} ms"
    assert trio.current_time() - before == pytest.approx(ms / 1000)


@pytest.mark.parametrize("tz, unix_ms, local", [
    ("Africa/Monrovia", 0, "1969-12-31T23:16:00-00:44"),  # -00:44:30 until 1972: to the nearest minute
    ("Europe/Amsterdam", -1_000_000_000_000, "1938-04-24T22:33:20+00:20"),  # +00:19:32 then
    ("ABC-5:30:15", 1_700_000_000_123, "2023-11-15T03:43:20+05:30"),  # a POSIX TZ naming seconds
    ("UTC", -1_000_000_000_000, "1938-04-24T22:13:20+00:00"),
])
def test_an_offset_with_seconds_is_rendered_to_its_minute_and_still_one_instant(tz, unix_ms, local, zone):
    # ±HH:mm cannot carry an offset's seconds (it was "-00:4430"): the offset is rounded to the
    # minute and the wall-clock time is the instant's at that offset.
    zone(tz)
    fields = time_fields(unix_ms * 1_000_000)
    assert fields["local"] == local
    check_one_instant(fields)


@pytest.mark.parametrize("tz, local", [
    ("ABC-23:59:29", "2023-11-15T22:12:20+23:59"),  # the largest offset ±HH:mm carries, to its minute
    ("ABC-23:59:59", "2023-11-15T22:12:20+23:59"),  # (rounded down: +24:00 is no offset)
    ("ABC+23:59:59", "2023-11-13T22:14:20-23:59"),
])
async def test_an_offset_just_under_a_day_is_rendered_within_it(tz, local, zone):
    zone(tz)
    fields = time_fields(1_700_000_000_123 * 1_000_000)
    assert fields["local"] == local
    check_one_instant(fields)


@pytest.mark.parametrize("tz, shown", [("ABC-24", "+24:00:00"), ("ABC+24", "-24:00:00"),
                                       ("ABC-24:59:59", "+24:59:59"), ("ABC+167", "-24:00:00")])
async def test_an_offset_of_a_day_or_more_is_refused_with_its_code(tz, shown, zone):
    # POSIX lets TZ name offsets up to 24 hours (glibc reads 167 as 24): ±HH:mm cannot carry one
    # of 24 hours or more, and datetime raised ValueError (a crash of the session's actor).
    zone(tz)
    res = await run("get_system_time", "{}")
    assert res.is_error and res.error_code == "SYSTEM_TIME_UNREPRESENTABLE"
    message = res.structured_content["error"]["message"]
    assert "TZ" in message and "24 hours" in message and f" {shown} " in message, message


async def test_an_offset_of_a_day_in_a_session_answers_the_model(rt, zone, autojump_clock):
    zone("ABC-24")
    rt.faux.script = [FauxTurn(when="time please", tool_calls=[FauxToolCall("get_system_time")])]
    sid = await rt.session()
    await rt.run_to_idle(sid, "r1", "time please")
    finished = one(await rt.events(sid), "tool.finished", name="get_system_time").event
    assert finished.status == "error" and finished.error_code == "SYSTEM_TIME_UNREPRESENTABLE"


@pytest.mark.parametrize("unix_ms, utc", [
    (-62_135_596_800_000, "0001-01-01T00:00:00Z"),  # the first second datetime holds
    (-30_610_224_000_000, "1000-01-01T00:00:00Z"),
    (-30_610_224_000_001, "0999-12-31T23:59:59Z"),  # four digits, as YYYY says (strftime wrote "999")
    (253_402_300_799_999, "9999-12-31T23:59:59Z"),
    (951_782_400_000, "2000-02-29T00:00:00Z"),  # a leap day
])
def test_every_year_datetime_holds_is_written_in_four_digits(unix_ms, utc, zone):
    zone("UTC")
    fields = time_fields(unix_ms * 1_000_000)
    assert fields["utc"] == utc and fields["local"] == utc[:-1] + "+00:00"


@pytest.mark.parametrize("unix_ms", [253_402_300_800_000, -62_135_596_800_001])
async def test_a_clock_past_year_9999_or_before_year_1_is_refused_with_its_code(unix_ms, zone, monkeypatch):
    import time

    zone("UTC")
    monkeypatch.setattr(time, "time_ns", lambda: unix_ms * 1_000_000)
    res = await run("get_system_time", "{}")
    assert res.is_error and res.error_code == "SYSTEM_TIME_UNREPRESENTABLE"
    assert "year" in res.structured_content["error"]["message"]


@pytest.mark.skipif(not Path("/usr/share/zoneinfo/right/UTC").exists(), reason="no leap-second zones installed")
@pytest.mark.parametrize("tz, offset", [("right/UTC", "+00:00"), ("right/Europe/Paris", "+01:00")])
def test_a_zone_counting_leap_seconds_still_names_the_instant_of_unix_ms(tz, offset, zone):
    # glibc's gmtime under a right/ zone counts leap seconds: utc was 2023-11-14T22:12:53Z for
    # unix_ms 1700000000123 (27 seconds behind), so utc and unix_ms named two instants.
    zone(tz)
    fields = time_fields(1_700_000_000_123 * 1_000_000)
    assert fields["utc"] == "2023-11-14T22:13:20Z" and fields["local"].endswith(offset)
    check_one_instant(fields)


@pytest.mark.parametrize("tz, utc, local", [
    ("America/New_York", "2024-03-10T06:59:59Z", "2024-03-10T01:59:59-05:00"),  # the last second before the gap
    ("America/New_York", "2024-03-10T07:00:00Z", "2024-03-10T03:00:00-04:00"),  # 02:xx is never shown
    ("America/New_York", "2024-11-03T05:59:59Z", "2024-11-03T01:59:59-04:00"),  # the fold: 01:xx twice,
    ("America/New_York", "2024-11-03T06:00:00Z", "2024-11-03T01:00:00-05:00"),  # told apart by the offset
    ("Australia/Lord_Howe", "2024-04-06T14:59:59Z", "2024-04-07T01:59:59+11:00"),  # a half-hour change
    ("Australia/Lord_Howe", "2024-04-06T15:00:00Z", "2024-04-07T01:30:00+10:30"),
    ("Pacific/Chatham", "2024-02-29T00:00:00Z", "2024-02-29T13:45:00+13:45"),  # a leap day, at +13:45
    ("Pacific/Apia", "2011-12-30T10:00:00Z", "2011-12-31T00:00:00+14:00"),  # the day Samoa skipped
    ("Pacific/Apia", "2011-12-30T09:59:59Z", "2011-12-29T23:59:59-10:00"),
])
def test_daylight_saving_edges_and_a_leap_day_are_one_instant(tz, utc, local, zone):
    zone(tz)
    unix_ms = int(datetime.strptime(utc, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()) * 1000 + 999
    fields = time_fields(unix_ms * 1_000_000)
    assert (fields["utc"], fields["local"]) == (utc, local)
    check_one_instant(fields)


@pytest.mark.skipif(not Path("/usr/share/zoneinfo/right/Europe/Paris").exists(), reason="no leap-second zones installed")
@pytest.mark.parametrize("utc, local", [
    ("2024-03-31T00:59:59Z", "2024-03-31T01:59:59+01:00"),  # the last second before spring's gap
    ("2024-03-31T01:00:00Z", "2024-03-31T03:00:00+02:00"),  # the change instant
    ("2024-03-31T01:00:26Z", "2024-03-31T03:00:26+02:00"),  # 26 s after (it answered 02:00:26+01:00)
    ("2024-03-31T01:00:27Z", "2024-03-31T03:00:27+02:00"),
    ("2024-10-27T00:59:59Z", "2024-10-27T02:59:59+02:00"),  # the last second before autumn's fold
    ("2024-10-27T01:00:00Z", "2024-10-27T02:00:00+01:00"),
    ("2024-10-27T01:00:26Z", "2024-10-27T02:00:26+01:00"),
    ("2024-10-27T01:00:27Z", "2024-10-27T02:00:27+01:00"),
])
@pytest.mark.parametrize("tz", ["Europe/Paris", "right/Europe/Paris"])
def test_a_zone_counting_leap_seconds_changes_its_offset_at_the_instant_its_rules_say(tz, utc, local, zone):
    # time.localtime reads its argument under a right/ zone as a count that includes leap
    # seconds: local kept the old offset for the 27 seconds after each change (02:00:xx+01:00,
    # inside spring's gap). A right/ zone answers as its plain zone does.
    zone(tz)
    unix_ms = int(datetime.strptime(utc, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()) * 1000 + 999
    fields = time_fields(unix_ms * 1_000_000)
    assert (fields["utc"], fields["local"]) == (utc, local)
    check_one_instant(fields)


@pytest.mark.parametrize("sent, shown", [("null", "null"), ('"5"', '"5"'), ("true", "true"), ("[5]", "[5]"),
                                         ('{"ms": 5}', '{"ms": 5}'), ("5.5", "5.5"), ('"a\\u00e9"', '"aé"')])
async def test_sleep_quotes_a_value_it_refuses_as_json(sent, shown, autojump_clock):
    # The model reads and writes JSON: "got NoneType None", "got str '5'" and "got bool True"
    # were Python's spellings, as run_command, skill, web_search and web_fetch no longer write.
    res = await run("sleep_milliseconds", f'{{"milliseconds": {sent}}}')
    assert res.is_error and res.error_code == "INVALID_ARGUMENT"
    assert res.structured_content["error"]["message"] == f"milliseconds must be an integer from 0 to {MAX_SLEEP_MS}, got {shown}"
