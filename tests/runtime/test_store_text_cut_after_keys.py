"""Text of the store (an append it refused, a storage fault) quoted cut to a limit is cut after the
daemon's keys are replaced in it (docs/decisions.md, "Caller text against whole keys, daemon text
against pieces"): a cut made first leaves a key's first characters, which the store's scrub of
whole keys does not find."""

from __future__ import annotations

from events import types as t
from events.errors import AppendRejected
from events.secrets import Secrets
from events.store import StoreWriteFailed
from runtime.skill_loads import SkillLoads
from runtime.supervisor import _storage_fault
from tools.base import ToolRegistry
from tools.skills import Skill, SkillSizes, too_large_for_the_log

KEY = "sk-store-text-Q7mZ4kT1vB8nR3wY6pJ0dF5h"  # (a canary: any 8 characters of it shown is a leak)
SECRETS = Secrets({KEY: "LENS_TEST_STORE_KEY"})


def leaked(text: str) -> list[str]:
    return [KEY[i:i + 8] for i in range(len(KEY) - 7) if KEY[i:i + 8] in text]


def refuse(message: str):  # type: ignore[no-untyped-def]
    def recordable(ev: t._Event) -> None:
        raise AppendRejected(message)
    return recordable


def test_the_stores_refusal_of_a_skill_load_is_cut_after_the_keys() -> None:
    message = "r" * 290 + KEY  # (the cut at 300 falls inside the key)
    skill = Skill("s", "skills/s", "d", body="steps", digest="0" * 64)
    for why in (too_large_for_the_log(refuse(message), skill, SECRETS),
                SkillSizes().verdict(refuse(message), skill, SECRETS)):
        assert why is not None and "rrrr" in why, why
        assert leaked(why) == [], why
    loads = SkillLoads(ToolRegistry(), "ses_1", refuse(message), SECRETS)
    why = loads._unrecordable(t.SkillLoaded(name="s", instructions="i", base_dir="skills/s", digest="0" * 64))
    assert why is not None and "rrrr" in why and leaked(why) == [], why
    # (without the keys, the cut shows the key's first characters: the check can fail)
    assert leaked(too_large_for_the_log(refuse(message), skill) or "") != []


def test_a_storage_fault_is_cut_after_the_keys() -> None:
    exc = StoreWriteFailed("f" * 270 + KEY)
    exc.storage = True
    fault = _storage_fault(exc, SECRETS)
    assert fault is not None and fault.startswith("StoreWriteFailed: fff"), fault
    assert leaked(fault) == [], fault
    grouped = _storage_fault(BaseExceptionGroup("g", [exc]), SECRETS)
    assert grouped == fault
    assert leaked(_storage_fault(exc) or "") != []
