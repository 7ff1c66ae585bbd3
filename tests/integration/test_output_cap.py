"""An output budget above what the model writes in one answer: lowered once after the provider's
refusal states the limit, then before every send to that (upstream, model); or before any send
with ``max_output_tokens``. Claude Code's own first request (64000 tokens asked, adaptive
thinking) on a chat upstream whose model stops at 16384, as gpt-4o does."""

import json
import logging
from pathlib import Path
from typing import Any

import pytest

CORPUS = Path(__file__).parent.parent / "corpus" / "requests"
CHAT_ONLY = ", apis: [chat]"


def claude_code_first() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CORPUS / "claude-code-2.1.197-first.json").read_text())["body"]
    return {**doc, "stream": False}


def access(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]


async def test_a_refused_budget_is_lowered_once_then_remembered(make_gateway, caplog) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.output_limit = 16384
    caplog.set_level(logging.INFO, logger="gateway.access")
    status, headers, body = await gw.messages(claude_code_first())
    assert status == 200, body
    assert json.loads(body)["type"] == "message"
    assert headers["x-llm-output-capped"] == "16384" and headers["x-llm-attempts"] == "2"
    first, second = (r.json() for r in gw.fake.chat_requests())
    assert first["max_tokens"] == 64000 and second["max_tokens"] == 16384
    # The next request to that model is lowered before it is sent: one call.
    status, headers, _ = await gw.messages(claude_code_first())
    assert status == 200 and headers["x-llm-attempts"] == "1" and headers["x-llm-output-capped"] == "16384"
    assert [r.json()["max_tokens"] for r in gw.fake.chat_requests()] == [64000, 16384, 16384]
    logged = [line["output_capped"] for line in access(caplog) if "output_capped" in line]
    assert logged == [{"to": 16384, "asked": 64000, "source": "refused"},
                      {"to": 16384, "asked": 64000, "source": "learned"}]  # fmt: skip


async def test_streams_are_rescued_the_same_way(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.output_limit = 16384
    status, headers, body = await gw.messages({**claude_code_first(), "stream": True})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert b"event: message_stop" in body and headers["x-llm-output-capped"] == "16384"
    assert [r.json()["max_tokens"] for r in gw.fake.chat_requests()] == [64000, 16384]


async def test_native_messages_lower_the_thinking_budget_below_the_new_max(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.output_limit = 8192
    payload = {"model": "claude-3-7-sonnet-20250219", "max_tokens": 32000,
               "thinking": {"type": "enabled", "budget_tokens": 31999},
               "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    status, headers, body = await gw.messages(payload)
    assert status == 200, body
    first, second = (r.json() for r in gw.fake.messages_requests())
    assert first["max_tokens"] == 32000
    assert second["max_tokens"] == 8192 and second["thinking"] == {"type": "enabled", "budget_tokens": 8191}


async def test_the_configured_cap_applies_before_the_first_send(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", max_output_tokens: 4096")
    status, headers, _ = await gw.chat({"model": "gpt-4o", "max_completion_tokens": 30000,
                                        "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert status == 200 and headers["x-llm-output-capped"] == "4096" and headers["x-llm-attempts"] == "1"
    assert gw.fake.chat_requests()[0].json()["max_completion_tokens"] == 4096
    # A request that names no budget is held to the cap as well.
    status, headers, _ = await gw.responses({"model": "gpt-5-codex", "input": "hi"})
    assert status == 200 and headers["x-llm-output-capped"] == "4096"
    assert gw.fake.responses_requests()[0].json()["max_output_tokens"] == 4096


async def test_a_budget_within_the_limit_goes_byte_for_byte(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", max_output_tokens: 4096")
    body = json.dumps({"model": "gpt-4o", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]})
    status, headers, _ = await gw.chat(data=body.encode(), headers={"Content-Type": "application/json"})
    assert status == 200 and "x-llm-output-capped" not in headers
    assert gw.fake.chat_requests()[0].body == body.encode()


async def test_a_refusal_that_states_no_limit_is_relayed_as_it_came(make_gateway) -> None:
    from gateway.fake.steps import Reply

    gw = await make_gateway()
    refusal = {"error": {"message": "max_tokens must be at least 1, got -853.", "type": "BadRequestError"}}
    gw.fake.script(Reply(400, refusal))
    status, headers, body = await gw.chat({"model": "m", "max_tokens": -853,
                                           "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert status == 400 and headers["x-llm-error-type"] == "unknown" and headers["x-llm-attempts"] == "1"
    assert "x-llm-output-capped" not in headers and len(gw.fake.chat_requests()) == 1


async def test_a_second_refusal_is_answered_not_retried_again(make_gateway) -> None:
    from gateway.fake.steps import Reply

    gw = await make_gateway()
    message = ("max_tokens is too large: 64000. This model supports at most 16384 completion tokens, "
               "whereas you provided 64000.")  # fmt: skip
    refusal = Reply(400, {"error": {"message": message, "type": "invalid_request_error", "param": "max_tokens",
                                    "code": "invalid_value"}})  # fmt: skip
    gw.fake.always = refusal  # refuses whatever it is sent: the gateway's one retry is all there is
    status, headers, _ = await gw.chat({"model": "gpt-4o", "max_tokens": 64000,
                                        "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert status == 400 and headers["x-llm-attempts"] == "2" and len(gw.fake.chat_requests()) == 2


async def test_a_budget_the_window_cannot_hold_is_lowered_before_the_send(make_gateway, caplog) -> None:
    """Claude Code 2.1.332 asks ``max_tokens: 128000``; on a 128k-window chat server every turn
    was refused ("128000 in the completion") and sent again lowered. With the upstream's
    ``context_window`` known, the budget goes lowered to what fits beside the prompt: one call."""
    gw = await make_gateway(upstream_yaml=CHAT_ONLY + ", context_window: 131072")
    gw.fake.context_limit = 131072
    caplog.set_level(logging.INFO, logger="gateway.access")
    status, headers, body = await gw.messages({**claude_code_first(), "max_tokens": 128000})
    assert status == 200, body
    assert headers["x-llm-attempts"] == "1" and "x-llm-compressed" not in headers
    [sent] = [r.json() for r in gw.fake.chat_requests()]
    assert 90_000 < sent["max_tokens"] < 128000  # the 82 KB prompt's ~25k tokens left out
    assert int(headers["x-llm-output-capped"]) == sent["max_tokens"] < 128000
    [logged] = [line["output_capped"] for line in access(caplog) if "output_capped" in line]
    assert logged == {"to": sent["max_tokens"], "asked": 128000, "source": "context_window"}
    # A budget that fits goes as it came, and one far below the window is not even estimated.
    status, headers, _ = await gw.messages({**claude_code_first(), "max_tokens": 64000})
    assert status == 200 and "x-llm-output-capped" not in headers
    assert gw.fake.chat_requests()[-1].json()["max_tokens"] == 64000
