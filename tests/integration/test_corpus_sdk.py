"""Real SDKs at stock settings (their own retries on) against corpus bodies whose class #22
changed: a plan limit sent as a 429 reaches the client as a 402 it does not retry, and one
request bigger than the per-minute window as a 400 overflow, not as a 429 to hammer."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.corpus_cases import IN_SAMPLE
from tests.integration.test_corpus_gateway import _reply

CASES = {c["name"]: c for c in IN_SAMPLE}


async def test_openai_sdk_does_not_retry_a_plan_limit_sent_as_429(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.always = _reply(CASES["chatgpt-codex-429-usage-limit-free-plan-is-budget"])
    async with openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k") as client:  # stock: max_retries=2
        with pytest.raises(openai.APIStatusError) as caught:
            await client.responses.create(model="gpt-5-codex", input="hi")
    assert caught.value.status_code == 402
    assert caught.value.response.headers["x-llm-error-type"] == "budget"
    assert len(gw.fake.responses_requests()) == 1  # neither the gateway nor the SDK retried


async def test_anthropic_sdk_does_not_retry_extra_usage_required(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.always = _reply(CASES["anthropic-429-extra-usage-required-for-long-context-is-budget"])
    async with anthropic.AsyncAnthropic(base_url=gw.base, api_key="k") as client:  # stock: max_retries=2
        with pytest.raises(anthropic.APIStatusError) as caught:
            await client.messages.create(model="my-claude", max_tokens=64,
                                         messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    assert caught.value.status_code == 402
    assert caught.value.response.headers["x-llm-error-type"] == "budget"
    assert len(gw.fake.messages_requests()) == 1


async def test_openai_sdk_gets_an_overflow_for_a_request_bigger_than_the_window(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.always = _reply(CASES["groq-429-request-bigger-than-tpm-used-zero-is-overflow"])
    async with openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k") as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="llama3-70b-8192",
                                                 messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    assert caught.value.response.headers["x-llm-error-type"] == "context_overflow"
    assert len(gw.fake.chat_requests()) <= 2  # the one compress-and-retry at most, never a 429 loop
