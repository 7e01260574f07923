"""The faux provider's token figures: the words of the request and of a scripted answer, counted
off the event loop.

It counted them with one ``split`` per item on the loop: an 8 MB input held the loop 0.7 s, and
every later request of the session counted it again (the faux provider is the daemon's model on
embedded defaults); a scripted answer of 3.6 MB held it 30 to 65 ms at its end."""

from __future__ import annotations

from types import FrameType

from hypothesis import given
from hypothesis import strategies as st

from runtime.providers.faux import WORD_SLICE, WORDS_ON_LOOP_CHARS, FauxProvider, FauxTurn, words

from ..loop_profile import on_this_thread
from .conftest import Ctx, Deltas

TEXT = st.text(st.sampled_from("ab \n\t\u3000\u2028é"), max_size=60)


@given(TEXT, st.integers(1, 8))
def test_words_counted_a_slice_at_a_time_are_split_s(text: str, slice_chars: int) -> None:
    assert words(text, slice_chars) == len(text.split())


async def test_the_words_of_a_large_request_are_not_split_on_the_event_loop() -> None:
    big = ("word " * 7 + "\n") * (3 * WORD_SLICE // 8)  # (a text of several slices)
    ctx = Ctx().user(big).user("and a short one")

    def record(frame: FrameType, event: str, arg: object) -> int | None:  # (this thread: the loop's)
        whole = getattr(arg, "__self__", None) if event == "c_call" and getattr(arg, "__name__", None) == "split" else None
        return len(whole) if isinstance(whole, str) and len(whole) > WORD_SLICE else None

    provider = FauxProvider("faux", [])
    with on_this_thread(record) as long_splits:
        result = await provider.stream(ctx.request(), Deltas())
    assert long_splits == []
    assert result.usage.input_tokens == len(big.split()) + 4


async def test_the_words_of_a_large_scripted_answer_are_not_split_on_the_event_loop() -> None:
    chunks = [("word " * 7 + "\n") * 1024 for _ in range(40)]  # (the answer: several slices)
    text = "".join(chunks)
    assert len(text) > max(WORDS_ON_LOOP_CHARS, 4 * WORD_SLICE)

    def record(frame: FrameType, event: str, arg: object) -> int | None:  # (this thread: the loop's)
        whole = getattr(arg, "__self__", None) if event == "c_call" and getattr(arg, "__name__", None) == "split" else None
        return len(whole) if isinstance(whole, str) and len(whole) > WORD_SLICE else None

    provider = FauxProvider("faux", [FauxTurn(chunks=chunks)])
    deltas = Deltas()
    with on_this_thread(record) as long_splits:
        result = await provider.stream(Ctx().user("hi").request(), deltas)
    assert long_splits == []
    assert deltas.text() == result.text == text and result.usage.output_tokens == len(text.split())
