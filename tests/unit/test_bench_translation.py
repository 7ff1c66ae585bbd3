"""bench.translation's Gemini rows: each side asked at its own URL with its own key header, and
the native twin asking what the translated request asks."""

import json

from bench import load
from bench.translation import CASES, NATIVE, ON_CHAT, ON_GEMINI, Case
from gateway.translate.base import Target
from gateway.translate.gemini_chat import GeminiToChat


def _cli(upstream: str) -> Case:
    return next(c for c in CASES if c.client == "gemini" and c.corpus and c.upstream == upstream)


def test_a_gemini_request_names_model_and_method_in_its_url_and_sends_a_google_key() -> None:
    case = _cli("chat")
    assert case.url("http://gw", ON_CHAT, True) == "http://gw/v1beta/models/bench-on-chat:streamGenerateContent?alt=sse"
    assert case.url("http://gw", ON_CHAT, False) == "http://gw/v1beta/models/bench-on-chat:generateContent"
    assert case.credential(ON_CHAT) == load.GOOGLE and case.credential(NATIVE) == load.BEARER
    assert set(json.loads(case.body(ON_CHAT, True))) == {"contents", "systemInstruction", "tools", "generationConfig"}


def test_the_native_twin_is_the_chat_request_the_gateway_makes_of_the_gemini_one() -> None:
    case = _cli("chat")
    gemini = json.loads(case.body(ON_CHAT, True))
    native = json.loads(case.body(NATIVE, True))
    assert case.url("http://gw", NATIVE, True) == "http://gw/v1/chat/completions"
    assert native == GeminiToChat().request({**gemini, "model": NATIVE, "stream": True}, Target(NATIVE))
    assert native["stream"] is True and native["messages"][0]["role"] == "system"


def test_the_pass_through_row_expects_no_translation() -> None:
    passed, translated = _cli("gemini"), _cli("chat")
    assert passed.translated(ON_GEMINI) is None and passed.translated(NATIVE) is None
    assert translated.translated(ON_CHAT) == "gemini->chat"
