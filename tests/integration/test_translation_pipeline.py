"""The pipeline's side of translation, whatever the translator: which API an upstream is asked
in, what happens when none fits, how an upstream error on a translated request reads, model
mapping, and the passthrough paths of an API the upstream does not speak.

A deliberately tiny Messages → chat translator stands in for the real ones here (text only),
so that these tests pin the pipeline's mechanics; the real translators have their own tables
and their own end-to-end tests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.live import LIVE
from gateway.translate import Translations
from gateway.translate.base import Context, Refusal, StreamTranslator, Target
from tests.fakeupstream import Reply, anthropic_error

MESSAGES_REQ = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


class _TextOnly:
    client, upstream = "messages", "chat"

    def request(self, payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
        if any(not isinstance(m.get("content"), str) for m in payload["messages"]):
            return Refusal("only text content in this test translator")
        return {"model": target.model, "messages": list(payload["messages"]), "max_tokens": payload["max_tokens"]}

    def dropped(self, payload: Mapping[str, Any]) -> tuple[str, ...]:
        return ()

    def answer(self, doc: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
        text = doc["choices"][0]["message"]["content"]
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": ctx.requested_model,
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 1, "output_tokens": 1}}

    def stream(self, ctx: Context) -> StreamTranslator:
        raise AssertionError("not streamed in these tests")

    def held(self, ctx: Context) -> Context:
        return ctx  # its answers read nothing of the request: what is kept does not matter here


def _use_text_only(gw: Any) -> None:
    gw.app[LIVE].services.translations = Translations({("messages", "chat"): _TextOnly()})


async def test_no_translation_is_a_clear_error_in_the_clients_envelope(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    gw.app[LIVE].services.translations = Translations({})
    status, headers, body = await gw.messages(MESSAGES_REQ)
    doc = json.loads(body)
    assert status == 400 and doc["type"] == "error"
    assert "upstream 'primary' speaks chat" in doc["error"]["message"] and "'apis'" in doc["error"]["message"]
    assert gw.fake.requests == [] and headers["x-llm-error-type"] == "unknown"


async def test_a_translated_request_goes_out_in_the_upstreams_api_and_comes_back_in_the_clients(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat], model_map: {'claude-*': qwen}")
    _use_text_only(gw)
    status, headers, body = await gw.messages(MESSAGES_REQ, query="?beta=true")
    doc = json.loads(body)
    assert status == 200 and doc["content"][0]["text"] == "Hello from the fake upstream."
    assert doc["model"] == "claude-sonnet-4-5"  # what the client asked for
    [sent] = gw.fake.requests
    assert sent.path == "/v1/chat/completions" and sent.query == "" and sent.json()["model"] == "qwen"
    assert headers["x-llm-translated"] == "messages->chat"


async def test_a_translated_answers_usage_is_counted_from_the_document_it_was_written_from(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    _use_text_only(gw)
    status, _, _ = await gw.messages(MESSAGES_REQ)
    assert status == 200
    # The upstream's own counts (12 and 7), not the translated body's (1 and 1): the client's API
    # may have no field for a count the provider made (Anthropic's cache writes in chat's usage).
    for kind, n in (("prompt", 12), ("completion", 7)):
        assert gw.metric("llm_gateway_tokens_total", upstream="primary", model="claude-sonnet-4-5", kind=kind) == n


async def test_a_request_the_translator_refuses_is_a_400_never_sent(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    _use_text_only(gw)
    req = {**MESSAGES_REQ, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    status, _, body = await gw.messages(req)
    assert status == 400 and "only text content" in json.loads(body)["error"]["message"]
    assert gw.fake.requests == []


async def test_an_upstream_overflow_reads_as_anthropics_own_overflow(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]", extra_yaml="compression: {enabled: false}\n")
    _use_text_only(gw)
    overflow = {"error": {"message": "This model's maximum context length is 4096 tokens. However, your "
                          "messages resulted in 5000 tokens.", "type": "invalid_request_error",
                          "param": "messages", "code": "context_length_exceeded"}}
    gw.fake.script(Reply(400, overflow))
    status, headers, body = await gw.messages(MESSAGES_REQ)
    doc = json.loads(body)
    assert status == 400 and headers["x-llm-error-type"] == "context_overflow"
    assert doc["error"]["type"] == "invalid_request_error"
    assert doc["error"]["message"] == "prompt is too long: 5000 tokens > 4096 maximum"
    assert doc["error"]["x_llm_upstream"]["body"] == overflow  # the provider's words are kept


async def test_an_upstream_outage_reads_as_overloaded_for_claude_code(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]",
                            extra_yaml="retry: {provider_unavailable: {max_retries: 0, base_delay_s: 1, max_delay_s: 1}}\n")
    _use_text_only(gw)
    gw.fake.script(Reply(503, {"error": {"message": "down", "type": "server_error"}}))
    status, headers, body = await gw.messages(MESSAGES_REQ)
    assert status == 529 and json.loads(body)["error"]["type"] == "overloaded_error"
    assert headers["x-llm-error-type"] == "provider_unavailable"


async def test_a_chain_crosses_apis_an_anthropic_primary_falls_back_to_a_chat_upstream(make_gateway) -> None:
    from tests.fakeupstream import FakeUpstream

    backup, fake = await FakeUpstream().start(), await FakeUpstream().start()
    try:
        gw = await make_gateway(fake=fake, upstreams=(
            f"  - {{name: claude, base_url: '{fake.url}', apis: [messages], fallbacks: [local]}}\n"
            f"  - {{name: local, base_url: '{backup.url}', apis: [chat], model_map: {{'*': qwen}}}}\n"
        ))
        _use_text_only(gw)
        fake.script(*[anthropic_error(529, "overloaded_error", "Overloaded")] * 2)
        status, headers, body = await gw.messages(MESSAGES_REQ)
        assert status == 200 and json.loads(body)["content"][0]["text"] == "Hello from the fake upstream."
        assert headers["x-llm-upstream"] == "local" and headers["x-llm-translated"] == "messages->chat"
        assert [r.path for r in fake.requests] == ["/v1/messages"] * 2
        assert [(r.path, r.json()["model"]) for r in backup.requests] == [("/v1/chat/completions", "qwen")]
    finally:
        await backup.close()
        await fake.close()


async def test_count_tokens_on_a_chat_upstream_is_the_gateways_estimate_marked_as_such(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    async with gw.session.post(gw.base + "/v1/messages/count_tokens", json={
            "model": "claude-sonnet-4-5", "system": "be brief", "messages": [{"role": "user", "content": "hi " * 70}]},
            headers={"anthropic-version": "2023-06-01"}) as r:
        doc = await r.json()
        assert r.status == 200 and r.headers["x-llm-estimated"] == "true"
    assert 50 < doc["input_tokens"] < 100 and gw.fake.requests == []


async def test_other_paths_of_an_api_the_upstream_does_not_speak_are_refused_in_words(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    async with gw.session.get(gw.base + "/v1/responses/resp_123") as r:
        doc = await r.json()
        assert r.status == 404 and "speaks chat, not responses" in doc["error"]["message"]
    assert gw.fake.requests == []


async def test_same_api_model_map_renames_the_model_on_the_wire(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", model_map: {'gpt-*': local-model}")
    status, headers, _ = await gw.chat()
    [sent] = gw.fake.requests
    assert status == 200 and sent.json()["model"] == "local-model" and "x-llm-translated" not in headers


async def test_an_upstream_that_cannot_carry_the_request_is_passed_over_for_the_next(make_gateway) -> None:
    from tests.fakeupstream import FakeUpstream

    local, claude = await FakeUpstream().start(), await FakeUpstream().start()
    try:
        gw = await make_gateway(fake=local, upstreams=(
            f"  - {{name: local, base_url: '{local.url}', apis: [chat], fallbacks: [claude]}}\n"
            f"  - {{name: claude, base_url: '{claude.url}', apis: [messages]}}\n"
        ))
        _use_text_only(gw)  # refuses block content: the chat upstream cannot take this request
        req = {**MESSAGES_REQ, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
        status, headers, body = await gw.messages(req)
        assert status == 200 and headers["x-llm-upstream"] == "claude" and "x-llm-translated" not in headers
        assert local.requests == [] and [r.path for r in claude.requests] == ["/v1/messages"]
    finally:
        await local.close()
        await claude.close()
