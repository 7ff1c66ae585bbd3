"""chat completions → Responses (``translate/chat_responses``): requests are the real ones the
openai SDK, opencode and the Vercel AI SDK sent (tests/corpus/requests/chat-*.json); the
Responses answers and streams are built here in the API's shapes (the corpus has no real one),
and every translated stream is read back by the openai SDK's own ``chat.completions.stream()``
accumulator, which must agree with the buffered translation of the same response."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from gateway.apis.base import Ending
from gateway.errors import Classification, ErrorType
from gateway.fake import responses_rules
from gateway.fake.responses import Seq, response_object
from gateway.sse import EventSplitter, parse_event
from gateway.translate import default_translations
from gateway.translate.base import Context, Refusal, Target
from gateway.translate.chat_responses import ChatToResponses
from tests.unit.translate.schemas import NO_PROPERTIES

CORPUS = Path(__file__).parents[2] / "corpus"
T = ChatToResponses(clock=lambda: 1_764_000_000)
TARGET = Target(model="gpt-5-codex")
CHAT_REQUESTS = sorted(p.stem for p in (CORPUS / "requests").glob("chat-*.json"))


def client_request(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CORPUS / "requests" / f"{name}.json").read_text())
    assert doc["source"]
    return doc["body"]


def req(payload: dict[str, Any]) -> dict[str, Any]:
    out = T.request(payload, TARGET)
    assert not isinstance(out, Refusal), out
    return out


def ctx(request: dict[str, Any] | None = None) -> Context:
    return Context("gpt-4o-mini", request or {"model": "gpt-4o-mini", "messages": []}, "req1")


# --- request ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in CHAT_REQUESTS if n != "chat-openai-python-uncarried"])
def test_real_chat_requests_become_requests_the_responses_api_takes(name: str) -> None:
    body = client_request(name)
    out = req(body)
    # Judged on a model that takes any temperature: a reasoning model's refusal of the client's
    # own setting is the pipeline's to answer (policy/refused_param.py), not the translation's.
    assert responses_rules.refusal("/v1/responses", {**out, "model": "gpt-4.1"}) is None
    assert out["model"] == "gpt-5-codex" and out["store"] is False
    assert "messages" not in out and isinstance(out["input"], list) and out["input"]
    for tool in out.get("tools", []):
        assert tool["type"] == "function" and isinstance(tool["name"], str) and "function" not in tool
        assert tool["strict"] is False and isinstance(tool["parameters"], dict)
    calls = [i["call_id"] for i in out["input"] if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in out["input"] if i.get("type") == "function_call_output"]
    assert calls == outputs


def test_system_messages_open_as_instructions_and_a_later_one_keeps_its_place() -> None:
    out = req({"model": "m", "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
        {"role": "user", "content": "hi"}, {"role": "system", "content": "Now in French."}]})  # fmt: skip
    assert out["instructions"] == "Be brief.\n\nUse tools."
    assert out["input"] == [{"type": "message", "role": "user", "content": "hi"},
                            {"type": "message", "role": "system", "content": "Now in French."}]  # fmt: skip


def test_a_tool_round_becomes_call_and_output_items_with_the_call_ids() -> None:
    out = req({"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "weather?"},
                                     {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}]},
        {"role": "assistant", "content": "Looking.", "reasoning_content": "think",
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"c":"P"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "sunny"}]}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
                                                    "parameters": {"type": "object"}, "strict": True}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})  # fmt: skip
    assert out["input"] == [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "weather?"},
            {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"}]},
        {"type": "message", "role": "assistant", "content": "Looking."},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"c":"P"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]  # fmt: skip
    # OpenAI refuses an object schema without properties: it gets an empty one.
    assert out["tools"] == [{"type": "function", "name": "get_weather", "description": "d",
                             "parameters": {"type": "object", "properties": {}}, "strict": True}]  # fmt: skip
    assert out["tool_choice"] == {"type": "function", "name": "get_weather"}


@pytest.mark.parametrize(("given", "sent"), NO_PROPERTIES)
def test_an_object_schema_without_properties_gets_an_empty_one(given: dict[str, Any], sent: dict[str, Any]) -> None:
    """A chat client's own schema: OpenAI's chat API would refuse it too, but a translated
    request is the gateway's to send as the Responses API takes it."""
    out = req({"model": "m", "messages": [{"role": "user", "content": "hi"}],
               "tools": [{"type": "function", "function": {"name": "list_things", "parameters": given}}]})  # fmt: skip
    assert out["tools"][0]["parameters"] == sent
    assert responses_rules.refusal("/v1/responses", out) is None


def test_a_call_id_longer_than_openai_takes_goes_as_a_digest_for_the_call_and_its_output() -> None:
    """A conversation that went through a Gemini 3 upstream holds the gateway's own long ids
    (a thought signature rides in them); another provider's may be long too. OpenAI refuses
    a call_id over 64 characters, so every later turn on a Responses upstream was a 400."""
    long_id = "fc_a27fe116ca0b__gsig_" + "c2lnbmF0dXJl" * 8
    out = req({"model": "m", "messages": [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "tool_calls": [{"id": long_id, "type": "function",
                                              "function": {"name": "Bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": long_id, "content": "done"}]})  # fmt: skip
    call, output = out["input"][1], out["input"][2]
    assert call["call_id"] == output["call_id"] and len(call["call_id"]) <= 64
    assert responses_rules.refusal("/v1/responses", out) is None
    as_sent = copy.deepcopy(out)
    as_sent["input"][1]["call_id"] = as_sent["input"][2]["call_id"] = long_id
    refused = responses_rules.refusal("/v1/responses", as_sent)
    assert refused is not None and "string too long" in json.dumps(refused.body)


def test_knobs_are_carried_and_what_responses_lacks_is_dropped() -> None:
    out = req(client_request("chat-openai-python-stream-knobs"))
    assert out["max_output_tokens"] == 256 and out["reasoning"] == {"effort": "low"}
    assert out["temperature"] == 1.5 and out["top_p"] == 0.9 and out["user"] == "user-42"
    assert out["stream"] is True and "stream_options" not in out
    for gone in ("stop", "seed", "frequency_penalty", "presence_penalty", "max_completion_tokens"):
        assert gone not in out


def test_budgets_store_and_formats() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    out = req({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "store": True,
               "parallel_tool_calls": False, "verbosity": "low",
               "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema, "strict": True}}})  # fmt: skip
    assert out["max_output_tokens"] == 16  # the API's minimum
    assert out["store"] is True and out["parallel_tool_calls"] is False
    assert out["text"] == {"format": {"type": "json_schema", "name": "n", "schema": schema, "strict": True},
                           "verbosity": "low"}  # fmt: skip
    assert req({"model": "m", "messages": [], "response_format": {"type": "json_object"}})["text"] == {
        "format": {"type": "json_object"}}
    allowed = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "f"}}]}}  # fmt: skip
    tools = [{"type": "function", "function": {"name": "f"}}]
    out = req({"model": "m", "messages": [], "tools": tools, "tool_choice": allowed})
    assert out["tool_choice"] == {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]}
    assert out["tools"][0]["parameters"] == {"type": "object", "properties": {}}


def test_what_would_change_the_answer_is_refused() -> None:
    out = T.request(client_request("chat-openai-python-uncarried"), TARGET)
    assert isinstance(out, Refusal) and out.code == "untranslatable_request" and "'n'" in out.message
    base = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    for extra in ({"logprobs": True}, {"modalities": ["text", "audio"]}, {"functions": [{"name": "f"}]},
                  {"tools": [{"type": "custom", "custom": {"name": "f"}}]}):  # fmt: skip
        assert isinstance(T.request({**base, **extra}, TARGET), Refusal), extra


def test_the_fake_refuses_chat_shapes_as_the_responses_api_does() -> None:
    nested = {"model": "m", "input": "x", "tools": [{"type": "function", "function": {"name": "f"}}]}
    reply = responses_rules.refusal("/v1/responses", nested)
    assert reply is not None and reply.body["error"]["message"] == "Missing required parameter: 'tools[0].name'."
    reply = responses_rules.refusal("/v1/responses", {"model": "m", "input": "x", "stop": ["\n"]})
    assert reply is not None and reply.body["error"]["code"] == "unknown_parameter"


def test_composed_directions_reach_responses_through_chat() -> None:
    table = default_translations().table
    assert {("chat", "responses"), ("messages", "responses"), ("gemini", "responses")} <= set(table)
    claude = json.loads((CORPUS / "requests" / "claude-code-2.1.197-bash-result.json").read_text())["body"]
    out = table["messages", "responses"].request(claude, TARGET)
    assert not isinstance(out, Refusal), out
    assert responses_rules.refusal("/v1/responses", out) is None
    assert out["instructions"] and out["store"] is False


def test_a_gemini_pdf_goes_on_to_a_responses_upstream_as_an_input_file() -> None:
    pdf = {"model": "m", "contents": [{"role": "user", "parts": [
        {"text": "Summarise."}, {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}}]}]}  # fmt: skip
    out = default_translations().table["gemini", "responses"].request(pdf, TARGET)
    assert not isinstance(out, Refusal), out
    [message] = out["input"]
    assert message["content"][-1] == {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=",
                                      "filename": "document.pdf"}  # fmt: skip


@pytest.mark.parametrize(("mime", "name"), [("text/plain", "document.txt"), ("text/markdown", "document.md"),
                                           ("application/json", "document.json"), ("text/x-unheard-of", "file")])
def test_a_gemini_text_file_goes_on_to_a_responses_upstream_named_by_its_type(mime: str, name: str) -> None:
    """OpenAI reads inline file data by its name's extension (.txt, .md, .json among the types it
    reads: the file-inputs guide); Gemini's files come unnamed."""
    text = {"model": "m", "contents": [{"role": "user", "parts": [
        {"text": "Summarise."}, {"inlineData": {"mimeType": mime, "data": "aGk="}}]}]}  # fmt: skip
    out = default_translations().table["gemini", "responses"].request(text, TARGET)
    assert not isinstance(out, Refusal), out
    [message] = out["input"]
    assert message["content"][-1] == {"type": "input_file", "file_data": f"data:{mime};base64,aGk=", "filename": name}


def test_a_claude_clients_pdf_goes_on_to_a_responses_upstream_as_an_input_file() -> None:
    """It became "[document … left out: this model cannot read it]" on the way through chat,
    though OpenAI reads PDFs; a chat upstream still gets the note."""
    doc = {"type": "document", "title": "report", "source": {"type": "base64", "media_type": "application/pdf",
                                                            "data": "JVBERi0="}}  # fmt: skip
    asked = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Summarise."}, doc]}]}  # fmt: skip
    out = default_translations().table["messages", "responses"].request(asked, TARGET)
    assert not isinstance(out, Refusal), out
    [message] = out["input"]
    assert message["content"][-1] == {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=",
                                      "filename": "report.pdf"}  # fmt: skip
    chat = default_translations().table["messages", "chat"].request(asked, TARGET)
    assert not isinstance(chat, Refusal) and "left out" in json.dumps(chat["messages"])


# --- answer -------------------------------------------------------------------------------


def _reasoning_call_response() -> dict[str, Any]:
    doc = response_object("gpt-5-codex", "Let me check.")
    doc["id"] = "resp_abc"
    doc["output"] = [
        {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Need weather."}]},
        doc["output"][0],
        {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_A", "name": "get_weather",
         "arguments": '{"city":"Paris"}'},
        {"id": "fc_2", "type": "function_call", "status": "completed", "call_id": "call_B", "name": "now",
         "arguments": ""},
    ]  # fmt: skip
    doc["usage"] = {"input_tokens": 40, "input_tokens_details": {"cached_tokens": 32}, "output_tokens": 12,
                    "output_tokens_details": {"reasoning_tokens": 7}, "total_tokens": 52}  # fmt: skip
    return doc


def test_a_buffered_answer_becomes_a_chat_completion() -> None:
    out = T.answer(_reasoning_call_response(), ctx())
    assert out["id"] == "chatcmpl-resp_abc" and out["model"] == "gpt-4o-mini"
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "Let me check." and message["reasoning_content"] == "Need weather."
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("call_A", "get_weather", '{"city":"Paris"}'), ("call_B", "now", "{}")]
    assert out["usage"] == {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52,
                            "prompt_tokens_details": {"cached_tokens": 32},
                            "completion_tokens_details": {"reasoning_tokens": 7}}  # fmt: skip
    openai.types.chat.ChatCompletion.model_validate(out)


@pytest.mark.parametrize(("reason", "finish"), [("max_output_tokens", "length"), ("content_filter", "content_filter")])
def test_an_incomplete_answer_says_why_it_stopped(reason: str, finish: str) -> None:
    doc = response_object("gpt-5-codex", "Par", status="incomplete")
    doc["incomplete_details"] = {"reason": reason}
    assert T.answer(doc, ctx())["choices"][0]["finish_reason"] == finish
    assert T.answer(response_object(), ctx())["choices"][0]["finish_reason"] == "stop"


# --- stream -------------------------------------------------------------------------------


def _stream_of(doc: dict[str, Any], status_event: str = "response.completed") -> list[bytes]:
    """The events a Responses server streams for ``doc``: each item added, its deltas, done."""
    seq = Seq()
    shell = {**doc, "status": "in_progress", "output": [], "usage": None}
    events = [seq("response.created", response=shell), seq("response.in_progress", response=shell)]
    for n, item in enumerate(doc["output"]):
        where = {"item_id": item["id"], "output_index": n}
        if item["type"] == "function_call":
            events.append(seq("response.output_item.added", output_index=n, item={**item, "arguments": ""}))
            args = item["arguments"]
            for piece in (args[: len(args) // 2], args[len(args) // 2 :]) if args else ():
                events.append(seq("response.function_call_arguments.delta", **where, delta=piece))
            events.append(seq("response.function_call_arguments.done", **where, arguments=args))
        elif item["type"] == "message":
            events.append(seq("response.output_item.added", output_index=n, item={**item, "content": []}))
            text = item["content"][0]["text"]
            for word in text.split(" "):
                events.append(seq("response.output_text.delta", **where, content_index=0,
                                  delta=word if word == text.split(" ")[0] else " " + word))  # fmt: skip
        elif item["type"] == "reasoning":
            events.append(seq("response.output_item.added", output_index=n, item={**item, "summary": []}))
            for k, s in enumerate(item["summary"]):
                events.append(seq("response.reasoning_summary_text.delta", **where, summary_index=k, delta=s["text"]))
        events.append(seq("response.output_item.done", output_index=n, item=item))
    events.append(seq(status_event, response=doc))
    return events


def _serving(body: bytes) -> httpx2.Client:
    def reply(_: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx2.Client(transport=httpx2.MockTransport(reply))


def _sdk_final(body: bytes) -> Any:
    client = openai.OpenAI(api_key="k", base_url="http://gateway/v1", http_client=_serving(body), max_retries=0)
    with client.chat.completions.stream(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                        stream_options={"include_usage": True}) as stream:  # fmt: skip
        return stream.get_final_completion()


def _translated(events: list[bytes], c: Context) -> list[bytes]:
    s = T.stream(c)
    return [s.event(e) for e in events] + [s.close()]


@pytest.mark.parametrize("doc", [_reasoning_call_response(), response_object("gpt-5-codex", "Hello there, friend.")],
                         ids=["reasoning-text-calls", "text"])  # fmt: skip
def test_a_stream_read_by_the_openai_sdk_matches_the_buffered_answer(doc: dict[str, Any]) -> None:
    c = ctx({"model": "gpt-4o-mini", "messages": [], "stream_options": {"include_usage": True}})
    body = b"".join(_translated(_stream_of(doc), c))
    final = _sdk_final(body)
    buffered = T.answer(doc, ctx())
    got, want = final.choices[0], buffered["choices"][0]
    assert got.finish_reason == want["finish_reason"]
    assert (got.message.content or None) == (want["message"]["content"] or None)
    calls = [(t.id, t.function.name, t.function.arguments) for t in got.message.tool_calls or ()]
    assert calls == [(t["id"], t["function"]["name"], t["function"]["arguments"])
                     for t in want["message"].get("tool_calls", ())]  # fmt: skip
    assert final.usage is not None and final.usage.model_dump(exclude_none=True) == buffered["usage"]
    chunks = [parse_event(e) for e in EventSplitter().feed(body)]
    reasoning = "".join(ch.json()["choices"][0]["delta"].get("reasoning_content", "")
                        for ch in chunks if ch.data != "[DONE]" and ch.json()["choices"])  # fmt: skip
    assert reasoning == want["message"].get("reasoning_content", "")
    assert chunks[-1].data == "[DONE]" and chunks[0].json()["choices"][0]["delta"]["role"] == "assistant"
    assert c.notes["usage"] == {"prompt": buffered["usage"]["prompt_tokens"],
                                "completion": buffered["usage"]["completion_tokens"]}  # fmt: skip


def test_tool_call_ids_and_names_come_on_a_calls_first_delta_only() -> None:
    body = b"".join(_translated(_stream_of(_reasoning_call_response()), ctx()))
    deltas = [parse_event(e).json()["choices"][0]["delta"] for e in EventSplitter().feed(body)
              if parse_event(e).data != "[DONE]"]  # fmt: skip
    calls = [t for d in deltas for t in d.get("tool_calls", ())]
    firsts = [t for t in calls if "id" in t]
    assert [(t["index"], t["id"], t["function"]["name"]) for t in firsts] == [(0, "call_A", "get_weather"),
                                                                               (1, "call_B", "now")]
    assert all("name" not in t["function"] for t in calls if "id" not in t)
    assert "".join(t["function"]["arguments"] for t in calls if t["index"] == 1) == "{}"
    assert b'"usage"' not in body  # not asked for


def test_an_incomplete_stream_ends_with_length() -> None:
    doc = response_object("gpt-5-codex", "Partial answer", status="incomplete")
    doc["incomplete_details"] = {"reason": "max_output_tokens"}
    body = b"".join(_translated(_stream_of(doc, "response.incomplete"), ctx()))
    finishes = [parse_event(e).json()["choices"][0]["finish_reason"] for e in EventSplitter().feed(body)
                if parse_event(e).data != "[DONE]"]  # fmt: skip
    assert finishes[-1] == "length" and finishes.count("length") == 1


def test_a_broken_stream_ends_with_the_gateways_chat_error_chunk() -> None:
    s = T.stream(ctx())
    head = _stream_of(response_object())[:4]
    body = b"".join(s.event(e) for e in head)
    end = s.broken(Ending(Classification.of(ErrorType.PROVIDER_UNAVAILABLE), "upstream went away", "server_error"))
    last = parse_event(end).json()
    assert last["choices"][0]["finish_reason"] == "error" and last["id"] == parse_event(
        EventSplitter().feed(body)[0]).json()["id"]
    assert b"[DONE]" not in end and s.close() == b""


def test_the_translator_does_not_keep_the_conversation_while_the_upstream_works() -> None:
    request = copy.deepcopy(client_request("chat-opencode-agent-step2"))
    kept = T.held(Context("m", request, "r"))
    assert "messages" not in kept.request and "tools" not in kept.request
    assert kept.request["stream_options"] == {"include_usage": True}


# --- function names the Responses API refuses ----------------------------------------------

# (the client's name, whether it goes as it is): the Responses API takes ^[a-zA-Z0-9_-]{1,64}$
# (responses_rules.name_fault); chat servers take MCP tools' dotted and slashed names.
NAMES = [("github.create_issue", False), ("github/create_issue", False), ("run shell", False),
         ("mcp__" + "x" * 65, False), ("ls", True), ("y" * 64, True)]  # fmt: skip


def _named_request(**extra: Any) -> dict[str, Any]:
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
             for n, _ in NAMES]  # fmt: skip
    calls = [{"id": f"call_{k}", "type": "function", "function": {"name": n, "arguments": "{}"}}
             for k, (n, _) in enumerate(NAMES)]  # fmt: skip
    return {"model": "gpt-4o-mini", "tools": tools, "messages": [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls)], **extra}  # fmt: skip


@pytest.mark.parametrize("choice", NAMES, ids=[n[:20] for n, _ in NAMES])
def test_function_names_responses_refuses_go_as_valid_ones_everywhere_the_request_names_them(
    choice: tuple[str, bool],
) -> None:
    out = req(_named_request(tool_choice={"type": "function", "function": {"name": choice[0]}}))
    assert responses_rules.refusal("/v1/responses", {**out, "model": "gpt-4.1"}) is None
    sent = [t["name"] for t in out["tools"]]
    for (name, kept), upstream in zip(NAMES, sent, strict=True):
        assert (upstream == name) is kept and responses_rules.name_fault(upstream, "name") is None
    assert len(set(sent)) == len(NAMES)
    assert [i["name"] for i in out["input"] if i["type"] == "function_call"] == sent
    assert out["tool_choice"] == {"type": "function", "name": sent[[n for n, _ in NAMES].index(choice[0])]}
    allowed = req(_named_request(tool_choice={"type": "allowed_tools", "allowed_tools": {
        "mode": "required", "tools": [{"type": "function", "function": {"name": choice[0]}}]}}))  # fmt: skip
    assert allowed["tool_choice"]["tools"] == [{"type": "function", "name": out["tool_choice"]["name"]}]


def test_a_history_call_of_a_tool_no_longer_declared_goes_as_it_went_when_declared() -> None:
    declared = req(_named_request())
    summary = _named_request()
    summary["tools"] = []  # an agent's summary request declares none
    calls = [i["name"] for i in req(summary)["input"] if i["type"] == "function_call"]
    assert calls == [t["name"] for t in declared["tools"]]


def test_calls_under_the_names_sent_come_back_under_the_clients_buffered_and_streamed() -> None:
    request = _named_request()
    sent = [t["name"] for t in req(request)["tools"]]
    doc = response_object("gpt-5-codex", "Calling.")
    doc["output"] += [{"id": f"fc_{k}", "type": "function_call", "status": "completed", "call_id": f"call_{k}",
                       "name": name, "arguments": '{"n":1}'} for k, name in enumerate(sent)]  # fmt: skip
    held = T.held(ctx(request))
    assert "messages" not in held.request  # the tools stay: the answer names calls by them
    buffered = T.answer(doc, held)["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in buffered] == [n for n, _ in NAMES]
    final = _sdk_final(b"".join(_translated(_stream_of(doc), T.held(ctx(request)))))
    assert [t.function.name for t in final.choices[0].message.tool_calls or ()] == [n for n, _ in NAMES]
