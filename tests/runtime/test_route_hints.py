"""The route a misspelt path may have meant (runtime/route_hints.py), at the edges of its rule:
the fewest misspelt words win, a tie names none, and a path is only compared with routes of as
many words. A route table of werkzeug's own, as the daemon's is."""

from __future__ import annotations

from werkzeug.routing import Map, Rule

from runtime.route_hints import near_route

ROUTES = Map([Rule(r) for r in ("/api/v1/sessions", "/api/v1/sessions/<sid>", "/api/v1/sessions/<sid>/inputs",
                                "/api/v1/sessions/<sid>/events", "/api/v1/projects/<pid>/inputs",
                                "/api/v1/items/<iid>/stop", "/api/v1/items/<iid>/step", "/dashboard/page")])


def test_one_or_two_misspelt_words_are_mended() -> None:
    assert near_route(ROUTES, "/api/v1/sesions/s1/input") == "/api/v1/sessions/s1/inputs"
    assert near_route(ROUTES, "/api/v1/sesions/s1/evnts") == "/api/v1/sessions/s1/events"
    assert near_route(ROUTES, "/apii/v1/sesions") == "/api/v1/sessions"
    assert near_route(ROUTES, "/api/v1/projcts/p1/inptus") == "/api/v1/projects/p1/inputs"


def test_three_misspelt_words_or_another_length_name_none() -> None:
    assert near_route(ROUTES, "/apii/v1/sesions/s1/input") is None
    assert near_route(ROUTES, "/api/v1/sesions/s1/input/x") is None
    assert near_route(ROUTES, "/api/v1/sesions/s1/input/") is None
    assert near_route(ROUTES, "/api/v1/sesions//input") is None  # (an empty id is no word)


def test_a_word_far_from_the_route_is_not_mended_even_beside_one_that_is() -> None:
    assert near_route(ROUTES, "/api/v1/sesions/s1/xyzzy") is None
    assert near_route(ROUTES, "/api/v1/sessions/s1/evt") is None  # (3 letters of 6: past half)
    assert near_route(ROUTES, "/dashbord/pag") is None  # (outside the API: never named)


def test_the_fewest_misspelt_words_win_and_a_tie_names_none() -> None:
    # `items/i1/stpp` is one word from both `stop` and `step`: no hint; `itms/i1/stop` is
    # one word from `stop` and two from `step`: the nearer
    assert near_route(ROUTES, "/api/v1/items/i1/stpp") is None
    assert near_route(ROUTES, "/api/v1/itms/i1/stop") == "/api/v1/items/i1/stop"
    assert near_route(ROUTES, "/api/v1/sessions/s1/inputs") is None  # (no word misspelt: no hint)
