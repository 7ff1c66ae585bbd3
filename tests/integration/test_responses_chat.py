"""Responses clients on a chat-only upstream through the whole pipeline (app in-process, fake
upstream): Codex's real requests (tests/corpus/requests/) go out as chat completions, the
fake's chat answers come back as Responses objects and streams the openai SDK reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from openai.types.responses import ResponseFailedEvent

from tests.corpus_cases import IN_SAMPLE
from tests.fakeupstream import Reply, Stream, anthropic_head, chunk, named_events, text_delta
from tests.unit.translate.test_responses_chat import check_grammar, codex_reads, sdk_final

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "requests"
CHAT_ONLY = ", apis: [chat], model_map: {'gpt-*': qwen}"
MESSAGES_ONLY = ", apis: [messages], model_map: {'gpt-*': claude-sonnet-4-5}"


def codex(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text())["body"]
    return body


def tool_call_stream(call_id: str, name: str, args: str) -> list[Any]:
    return [chunk({"role": "assistant", "content": None, "tool_calls": [
                {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[:4]}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[4:]}}]}),
            chunk({}, "tool_calls"),
            {"id": "chatcmpl-fake123", "object": "chat.completion.chunk", "created": 1, "model": "qwen",
             "choices": [], "usage": {"prompt_tokens": 900, "completion_tokens": 12, "total_tokens": 912,
                                      "prompt_tokens_details": {"cached_tokens": 512}}}]  # fmt: skip


async def test_buffered_request_is_answered_as_a_response_object(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    status, headers, body = await gw.responses(
        {"model": "gpt-5-codex", "instructions": "Be brief.", "input": "hi"}
    )
    doc = json.loads(body)
    assert status == 200 and headers["x-llm-translated"] == "responses->chat"
    assert doc["object"] == "response" and doc["model"] == "gpt-5-codex" and doc["status"] == "completed"
    assert doc["output"][0]["content"][0]["text"] == "Hello from the fake upstream."
    assert doc["usage"]["input_tokens"] == 12 and doc["usage"]["output_tokens"] == 7
    [sent] = gw.fake.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.json() == {"model": "qwen", "messages": [{"role": "system", "content": "Be brief."},
                                                         {"role": "user", "content": "hi"}]}  # fmt: skip


async def test_codex_turn_with_a_tool_call_then_its_result(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.script(Stream(tool_call_stream("call_1", "exec_command", '{"cmd":"echo hi"}')))
    first = codex("codex-0.169-first")
    status, headers, body = await gw.responses(first)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    check_grammar(body, named_events(body)[0][1]["response"]["id"])
    _, items, completed = codex_reads(body)
    assert [(i["type"], i["name"], i["arguments"], i["call_id"]) for i in items] == [
        ("function_call", "exec_command", '{"cmd":"echo hi"}', "call_1")]  # fmt: skip
    assert (
        completed["usage"]["input_tokens_details"]["cached_tokens"] == 512
    )  # the usage chunk the gateway asked for
    sent = gw.fake.requests[0].json()
    assert (
        sent["model"] == "qwen"
        and sent["stream"] is True
        and sent["stream_options"] == {"include_usage": True}
    )
    assert len(sent["tools"]) == 12 and sent["messages"][0]["role"] == "system"

    # Codex's next request carries the call and its output back: a chat tool round.
    status, _, body = await gw.responses(codex("codex-0.169-exec-result"))
    assert status == 200
    text, _, _ = codex_reads(body)
    assert text == "Hello from fake."
    sent = gw.fake.requests[1].json()
    assert [m["role"] for m in sent["messages"][-2:]] == ["assistant", "tool"]


async def test_openai_sdk_stream_helper_reads_a_translated_stream(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    req = {"model": "gpt-5", "input": "hi", "stream": True}
    status, _, body = await gw.responses(req)
    assert status == 200
    final = sdk_final(body, req)
    assert final.output_text == "Hello from fake." and final.model == "gpt-5"


async def test_previous_response_id_is_a_400_in_the_responses_envelope_never_sent(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    status, _, body = await gw.responses(
        {"model": "gpt-5", "input": "go on", "previous_response_id": "resp_9"}
    )
    err = json.loads(body)["error"]
    assert status == 400 and "previous_response_id" in err["message"] and "chat completions" in err["message"]
    assert err["code"] == "untranslatable_request"
    assert gw.fake.requests == []


async def test_stream_cut_mid_answer_ends_in_one_response_failed(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    cut = Stream([chunk({"role": "assistant", "content": "Hel"}), chunk({"content": "lo"})], then="drop")
    gw.fake.script(*[cut] * 10)
    status, _, body = await gw.responses({"model": "gpt-5", "input": "hi", "stream": True})
    events = named_events(body)
    assert status == 200 and events[-1][0] == "response.failed"
    assert "".join(d["delta"] for n, d in events if n == "response.output_text.delta") == "Hello"
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert sum(n == "response.failed" for n, _ in events) == 1
    assert not any(n == "response.completed" for n, _ in events)


async def test_an_anthropic_error_event_mid_answer_ends_in_a_response_failed_typed_clients_read(
    make_gateway,
) -> None:
    """Audit: the response.failed said `overloaded_error`, a code outside the Responses
    schema's ResponseError set, which a typed client refuses."""
    gw = await make_gateway(upstream_yaml=MESSAGES_ONLY)
    overloaded = next(c for c in IN_SAMPLE if c["name"] == "anthropic-stream-event-error-overloaded")["body"]
    cut = Stream([*anthropic_head(), text_delta("Hel"), overloaded.encode()], then="eof")
    gw.fake.script(*[cut] * 10)
    status, _, body = await gw.responses({"model": "gpt-5", "input": "hi", "stream": True})
    name, failed = named_events(body)[-1]
    assert status == 200 and name == "response.failed"
    error = failed["response"]["error"]
    assert error["code"] == "server_error" and error["x_llm_code"] == "overloaded_error"
    assert error["x_llm_error_type"] == "provider_unavailable" and error["retryable"] is True
    ResponseFailedEvent.model_validate(failed)


async def test_store_is_echoed_false_since_nothing_is_stored(make_gateway) -> None:
    """Audit: `store: true` came back as true, yet GET /v1/responses/{id} found nothing and a
    previous_response_id naming it was refused."""
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    status, _, body = await gw.responses({"model": "gpt-5", "input": "hi", "store": True})
    assert status == 200 and json.loads(body)["store"] is False
    status, _, body = await gw.responses({"model": "gpt-5", "input": "hi", "store": True, "stream": True})
    echoed = [d["response"]["store"] for _, d in named_events(body) if "response" in d]
    assert status == 200 and echoed == [False, False, False]  # created, in_progress, completed


async def test_an_overflow_carries_context_length_exceeded_for_codex(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY, extra_yaml="compression: {enabled: false}\n")
    overflow = {"error": {"message": "This model's maximum context length is 4096 tokens. However, your "
                          "messages resulted in 5000 tokens.", "type": "invalid_request_error",
                          "param": "messages", "code": "context_length_exceeded"}}  # fmt: skip
    gw.fake.script(Reply(400, overflow))
    status, headers, body = await gw.responses({"model": "gpt-5", "input": "hi"})
    assert status == 400 and headers["x-llm-error-type"] == "context_overflow"
    error = json.loads(body)["error"]
    assert error["code"] == "context_length_exceeded"
    # Said once: the provider's own words are under x_llm_upstream, not repeated after it.
    assert error["message"] == "This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens."
    assert error["x_llm_upstream"]["body"] == overflow


async def test_responses_reach_a_messages_only_upstream_through_chat(make_gateway) -> None:
    """No Responses → Messages module: the registry composes this one with chat → Messages."""
    gw = await make_gateway(upstream_yaml=", apis: [messages], model_map: {'gpt-*': claude-sonnet-4-5}")
    status, headers, body = await gw.responses({"model": "gpt-5", "instructions": "Be brief.", "input": "hi"})
    doc = json.loads(body)
    assert status == 200 and headers["x-llm-translated"] == "responses->messages"
    assert (
        doc["model"] == "gpt-5" and doc["output"][0]["content"][0]["text"] == "Hello from the fake upstream."
    )
    [sent] = gw.fake.requests
    assert sent.path == "/v1/messages" and sent.json()["system"] in (
        "Be brief.",
        [{"type": "text", "text": "Be brief."}],
    )

    req = {"model": "gpt-5", "input": "hi", "stream": True}
    status, _, body = await gw.responses(req)
    assert status == 200
    check_grammar(body, named_events(body)[0][1]["response"]["id"])
    assert sdk_final(body, req).output_text == "Hello from fake."  # the fake's streamed Messages answer


async def test_an_empty_conversation_gets_the_providers_refusal_in_the_responses_shape(make_gateway) -> None:
    # input [] and no instructions become a chat request with no messages, which OpenAI (and
    # the fake, in its words) refuses; the client reads it as a Responses error, sent once.
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    status, headers, body = await gw.responses({"model": "gpt-5-codex", "input": []})
    err = json.loads(body)["error"]
    assert status == 400 and err["message"] == "[] is too short - 'messages'"
    assert headers["x-llm-error-type"] == "unknown" and headers["x-llm-attempts"] == "1"
    assert len(gw.fake.chat_requests()) == 1


async def test_codex_tool_search_round_then_a_call_of_the_tool_it_loaded(make_gateway) -> None:
    """Codex's captured request after its client tool search (gpt-5.5, an MCP server): the
    model calls the loaded tool by its chat name, and Codex gets it back by namespace and name;
    big enough that the request is held without its conversation while the upstream works."""
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.script(Stream(tool_call_stream("call_l1", "mcp__demo__lookup_ticket", '{"id": "42"}')))
    status, _, body = await gw.responses(codex("codex-0.169-tool-search-result"))
    assert status == 200
    _, items, _ = codex_reads(body)
    assert [(i["type"], i["namespace"], i["name"], i["arguments"]) for i in items] == [
        ("function_call", "mcp__demo", "lookup_ticket", '{"id": "42"}')]  # fmt: skip
    sent = gw.fake.requests[0].json()
    assert "mcp__demo__lookup_ticket" in [t["function"]["name"] for t in sent["tools"]]


async def test_a_client_tool_search_read_by_the_openai_sdk(make_gateway) -> None:
    """The model's search reaches the openai SDK (stock settings) as a ``tool_search_call``."""
    import openai

    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.script(Stream(tool_call_stream("call_s1", "tool_search", '{"query": "calendar"}')),
                   Reply(200, {"id": "c", "object": "chat.completion", "created": 1, "model": "qwen", "choices": [{
                       "index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [{
                           "id": "call_s2", "type": "function", "function": {
                               "name": "tool_search", "arguments": '{"query": "mail"}'}}]},
                       "finish_reason": "tool_calls"}]}))  # fmt: skip
    search: Any = {"type": "tool_search", "execution": "client", "description": "Find tools.",
                   "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}  # fmt: skip
    async with openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client") as client:
        async with client.responses.stream(model="gpt-5.5", input="Book a meeting.", tools=[search]) as s:
            streamed = await s.get_final_response()
        buffered = await client.responses.create(model="gpt-5.5", input="Mail Bob.", tools=[search])
    for response, query, call_id in ((streamed, "calendar", "call_s1"), (buffered, "mail", "call_s2")):
        [item] = response.output
        assert item.type == "tool_search_call" and item.execution == "client"
        assert item.call_id == call_id and item.arguments == {"query": query}


async def test_codexs_web_search_left_out_is_named_in_the_answers_headers(make_gateway) -> None:
    """Codex sends web_search on every request; a chat server cannot run it, so it is dropped,
    and was dropped silently. The stream's completed response echoes only the tools offered."""
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    async with gw.session.post(gw.base + "/v1/responses", json=codex("codex-0.169-first")) as r:
        assert r.status == 200
        assert r.headers["x-llm-params-dropped"] == "tools.web_search"
        events = named_events(await r.read())
    [done] = [doc for name, doc in events if name == "response.completed"]
    assert "web_search" not in {t["type"] for t in done["response"]["tools"]}
    status, headers, _ = await gw.responses({"model": "gpt-5-codex", "input": "hi", "tools": [
        {"type": "function", "name": "f", "parameters": {"type": "object"}}]})  # fmt: skip
    assert status == 200 and "x-llm-params-dropped" not in headers


async def test_hosted_tools_left_out_leave_the_parameter_rescues_whole(make_gateway) -> None:
    """The hosted tools a chat server cannot run are named in x-llm-params-dropped, but cost no
    call: they used up the three rescues, and a refused effort beside them came back as a 400."""
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    gw.fake.refused_params = frozenset({"reasoning_effort", "temperature", "parallel_tool_calls"})
    tools: list[dict[str, Any]] = [{"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["vs_1"]},
                                   {"type": "code_interpreter", "container": {"type": "auto"}},
                                   {"type": "function", "name": "f", "parameters": {"type": "object"}}]  # fmt: skip
    payload = {"model": "gpt-5.5", "input": "hi", "tools": tools, "reasoning": {"effort": "high"}}
    for attempts in ("2", "1"):  # the refusal learnt, then left out before the send
        status, headers, body = await gw.responses(payload)
        assert status == 200, body
        assert headers["x-llm-attempts"] == attempts
        assert set(headers["x-llm-params-dropped"].split(",")) == {
            "tools.web_search", "tools.file_search", "tools.code_interpreter", "reasoning_effort"}
    assert ["reasoning_effort" in r.json() for r in gw.fake.chat_requests()] == [True, False, False]


async def test_log_probabilities_are_a_400_never_sent_as_chats_own_are(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=CHAT_ONLY)
    status, _, body = await gw.responses({"model": "gpt-5-codex", "input": "hi", "top_logprobs": 5})
    assert status == 400 and "top_logprobs" in json.loads(body)["error"]["message"]
    assert gw.fake.requests == []
    # Refused before any provider saw it: the gateway's own refusal, which no upstream alert counts
    # (docs/operations/alerts.md), not a 400 of the upstream's.
    answered = {dict(k)["upstream"]: v for k, v in (await gw.scraped("llm_gateway_requests_total")).items()
                if dict(k)["status"] == "400"}  # fmt: skip
    assert answered == {"none": 1}
