"""Gemini API clients on an Anthropic-only upstream through the whole app (Gemini → chat →
Messages): Gemini CLI's requests reach the fake's Messages endpoint, which refuses what
Anthropic refuses (gateway/fake/messages_rules.py), and its answers come back in Gemini's shape."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from gateway.fake.messages import anthropic_message, sign
from gateway.policy.tokens import PDF_PAGE_TOKENS
from gateway.translate import sealed_thinking
from tests.fakeupstream import Reply
from tests.integration.test_gemini_on_chat import corpus, post

ON_CLAUDE = ", apis: [messages], model_map: {'gemini-*': claude-sonnet-4-5}"


async def test_gemini_cli_routing_call_reaches_claude_with_json_schemas_type_names(make_gateway) -> None:
    """Every prompt on the stock model ("auto") starts with this call; with Google's OBJECT /
    STRING / INTEGER Anthropic refused it, so each prompt cost a failed call and never routed."""
    gw = await make_gateway(upstream_yaml=ON_CLAUDE)
    status, headers, body = await post(gw, "/v1beta/models/gemini-3.5-flash-lite:generateContent",
                                       corpus("gemini-cli-0.61-route"))  # fmt: skip
    assert status == 200, body
    assert headers["x-llm-translated"] == "gemini->messages"
    assert json.loads(body)["candidates"][0]["finishReason"] == "STOP"
    [sent] = gw.fake.messages_requests()
    schema = sent.json()["output_config"]["format"]["schema"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert {p["type"] for p in schema["properties"].values()} == {"string", "integer"}


def with_file_read(mime: str, data: str) -> dict[str, Any]:
    """Gemini CLI's tool-result request with a file its tool read after the functionResponse, in
    the same turn, as Gemini CLI 0.61 sends read_file's answer on a binary file."""
    body = corpus("gemini-cli-0.61-tool-result")
    last = body["contents"][-1]
    body["contents"][-1] = {**last, "parts": [*last["parts"], {"inlineData": {"mimeType": mime, "data": data}}]}
    return body


async def test_a_heic_photo_in_the_history_no_longer_fails_every_turn(make_gateway) -> None:
    """Gemini takes HEIC, Anthropic does not: the whole request was refused, then every later
    one, the photo staying in the history. It goes as a note; a JPEG named image/jpg as an image."""
    gw = await make_gateway(upstream_yaml=ON_CLAUDE)
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    status, _, body = await post(gw, path, with_file_read("image/heic", "AAAAGGZ0eXBoZWljAAAAAG1pZjFoZWlj"))
    assert status == 200, body
    status, _, body = await post(gw, path, with_file_read("image/jpg", "/9j/4AAQ"))
    assert status == 200, body
    heic, jpg = (r.json()["messages"][-1]["content"] for r in gw.fake.messages_requests())
    assert heic[-1] == {"type": "text", "text": "[image (image/heic) left out: this model cannot read it]"}
    assert jpg[-1]["type"] == "image" and jpg[-1]["source"]["media_type"] == "image/jpeg"


async def test_a_pdf_gemini_cli_read_reaches_claude_as_a_document(make_gateway) -> None:
    """It became "[inline data (application/pdf) left out: this model cannot read it]" whatever the
    upstream, though Claude reads PDFs."""
    gw = await make_gateway(upstream_yaml=ON_CLAUDE)
    pdf = "JVBERi0xLjQKMSAwIG9iajw8L1R5cGUvQ2F0YWxvZz4+ZW5kb2JqCnRyYWlsZXI8PC9Sb290IDEgMCBSPj4KJSVFT0YK"
    status, _, body = await post(gw, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
                                 with_file_read("application/pdf", pdf))  # fmt: skip
    assert status == 200, body
    [sent] = gw.fake.messages_requests()
    assert sent.json()["messages"][-1]["content"][-1] == {
        "type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}}


async def test_a_dotted_name_the_history_calls_reaches_claude_as_a_valid_one(make_gateway) -> None:
    """Gemini CLI keeps an MCP server's dots in its tools' names. A request calling one in its
    history without declaring it (a summary turn) was refused by Anthropic: "tools.0.custom.name:
    String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"."""
    gw = await make_gateway(upstream_yaml=ON_CLAUDE)
    body = {"contents": [
        {"role": "user", "parts": [{"text": "read it"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "files.read", "args": {"p": "a"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "files.read", "response": {"output": "abc"}}}]},
        {"role": "user", "parts": [{"text": "summarize"}]}]}  # fmt: skip
    status, _, answer = await post(gw, "/v1beta/models/gemini-2.5-flash:generateContent", body)
    assert status == 200, answer
    [sent] = gw.fake.messages_requests()
    [tool] = sent.json()["tools"]
    assert tool["name"].startswith("files_read_") and sent.json()["tool_choice"] == {"type": "none"}


async def test_dynamic_thinking_reaches_an_adaptive_claude_as_adaptive_thinking(make_gateway) -> None:
    """thinkingBudget -1 ("the model decides") went out with no thinking at all."""
    gw = await make_gateway(upstream_yaml=", apis: [messages], model_map: {'gemini-*': claude-sonnet-4-6}")
    body = {"contents": [{"role": "user", "parts": [{"text": "why is the sky blue?"}]}],
            "generationConfig": {"thinkingConfig": {"thinkingBudget": -1, "includeThoughts": True}}}  # fmt: skip
    status, _, answer = await post(gw, "/v1beta/models/gemini-2.5-pro:generateContent", body)
    assert status == 200, answer
    [sent] = gw.fake.messages_requests()
    assert sent.json()["thinking"] == {"type": "adaptive"}


def pdf_pages(pages: int, padding: int) -> str:
    raw = (b"%PDF-1.4\n" + b"<< /Type /Page /Parent 2 0 R >>\n" * pages
           + b"<< /Subtype /Image >> stream\n" + b"\xff" * padding + b"\nendstream\n%%EOF\n")  # fmt: skip
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize(("apis", "per_page"), [("messages", True), ("responses", True), ("chat", False)])
async def test_count_tokens_counts_a_pdf_as_the_routed_upstream_gets_it(make_gateway, apis: str,
                                                                         per_page: bool) -> None:  # fmt: skip
    """Gemini CLI asks countTokens for a file it read before sending it (ContextWindowWillOverflow).
    A PDF was counted as the note a chat server gets, 31 tokens whatever its size; Claude and
    OpenAI's Responses models read it, an image and the text of each page."""
    gw = await make_gateway(upstream_yaml=f", apis: [{apis}]")

    async def counted(data: str) -> int:
        body = {"contents": [{"role": "user", "parts": [
            {"inlineData": {"mimeType": "application/pdf", "data": data}}, {"text": "Summarise it."}]}]}  # fmt: skip
        status, headers, answer = await post(gw, "/v1beta/models/gemini-2.5-flash:countTokens", body)
        assert status == 200 and headers["x-llm-estimated"] == "true", answer
        total: int = json.loads(answer)["totalTokens"]
        return total

    small, long, heavy = await counted(pdf_pages(1, 0)), await counted(pdf_pages(5, 0)), await counted(
        pdf_pages(1, 500_000))
    if per_page:
        assert long - small == 4 * PDF_PAGE_TOKENS and heavy == small  # pages, not bytes
    else:
        assert small == long == heavy < 100  # the note the chat server is sent
    assert gw.fake.requests == []
async def test_a_text_file_and_a_mislabelled_photo_reach_claude_as_what_they_are(make_gateway) -> None:
    """A text file became "[inline data (text/plain) left out: this model cannot read it]", though
    Claude reads plain text documents; JPEG bytes said to be PNG were refused by Anthropic ("Image
    does not match the provided media type image/png", claude-code #15746), on every later turn."""
    gw = await make_gateway(upstream_yaml=ON_CLAUDE)
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    status, _, body = await post(gw, path, with_file_read("text/plain", base64.b64encode(b"TODO: ship it").decode()))
    assert status == 200, body
    jpeg = base64.b64encode(bytes.fromhex("ffd8ffe000104a464946000101")).decode()
    status, _, body = await post(gw, path, with_file_read("image/png", jpeg))
    assert status == 200, body
    text, photo = (r.json()["messages"][-1]["content"][-1] for r in gw.fake.messages_requests())
    assert text == {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "TODO: ship it"}}
    assert photo == {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": jpeg}}


def _thinking_then_read(thought: str) -> dict[str, Any]:
    """A Messages answer that thinks (signed by the fake) then calls read_file."""
    body = anthropic_message(text="")
    body["content"] = [{"type": "thinking", "thinking": thought, "signature": sign(thought)},
                       {"type": "tool_use", "id": "toolu_01R", "name": "read_file", "input": {"file_path": "a.txt"}}]  # fmt: skip
    body["stop_reason"] = "tool_use"
    return body


async def test_a_tool_loop_with_thinking_altered_in_its_signature_is_answered_without_it(make_gateway) -> None:
    """The sealed thinking is the client's to alter: one still well formed but changed reaches
    Claude, whose signature check refuses it (the fake as Anthropic); the gateway sends the turn
    again without it, thinking off, and the client gets its answer, not a 400."""
    gw = await make_gateway(upstream_yaml=ON_CLAUDE)
    thought = "The user wants a.txt read."
    gw.fake.script(Reply(200, _thinking_then_read(thought)), Reply(200, anthropic_message(text="It says hi.")))
    ask = corpus("gemini-cli-0.61-first")
    ask["generationConfig"] = {**ask.get("generationConfig", {}), "maxOutputTokens": 32000,
                               "thinkingConfig": {"includeThoughts": True, "thinkingLevel": "HIGH"}}  # fmt: skip
    path = "/v1beta/models/gemini-3-pro-preview:generateContent"
    status, _, body = await post(gw, path, ask)
    assert status == 200, body
    model_turn = json.loads(body)["candidates"][0]["content"]
    call_part = next(p for p in model_turn["parts"] if "functionCall" in p)
    [block] = sealed_thinking.unseal(call_part["thoughtSignature"])
    assert block == {"type": "thinking", "thinking": thought, "signature": sign(thought)}
    altered = sealed_thinking.seal([{**block, "thinking": "Something else entirely."}])
    call_part["thoughtSignature"] = altered
    answer = {"functionResponse": {"id": call_part["functionCall"]["id"], "name": "read_file",
                                   "response": {"output": "hi"}}}  # fmt: skip
    status, _, body = await post(gw, path, {**ask, "contents": [*ask["contents"], model_turn,
                                                                 {"role": "user", "parts": [answer]}]})  # fmt: skip
    assert status == 200, body
    assert "It says hi." in json.dumps(json.loads(body))
    first, refused, rescued = (r.json() for r in gw.fake.messages_requests())
    assert first["thinking"]["type"] == "enabled" and refused["thinking"]["type"] == "enabled"
    assert refused["messages"][1]["content"][0]["thinking"] == "Something else entirely."
    assert "thinking" not in rescued or rescued["thinking"]["type"] == "disabled"
    assert [b["type"] for b in rescued["messages"][1]["content"]] == ["tool_use"]


async def test_thinking_is_replayed_only_to_the_claude_model_that_made_it(make_gateway) -> None:
    """Gemini CLI's ``auto`` switches models between prompts; a route mapping each to another
    Claude model sent each one the other's thinking, which Anthropic refuses ("blocks generated
    by a different model": anthropic-sdk-python#1598): a refused call and a resend on every
    switch (review). The seal names the model that made it and goes back to that one only."""
    per_model = (", apis: [messages], model_map: {'gemini-3-pro-preview': claude-opus-4-5, "
                 "'gemini-*': claude-sonnet-4-5}")  # fmt: skip
    gw = await make_gateway(upstream_yaml=per_model)
    thought = "The user wants a.txt read."
    gw.fake.script(Reply(200, _thinking_then_read(thought)), Reply(200, anthropic_message(text="It says hi.")),
                   Reply(200, anthropic_message(text="It says hi.")))  # fmt: skip
    ask = corpus("gemini-cli-0.61-first")
    ask["generationConfig"] = {**ask.get("generationConfig", {}), "maxOutputTokens": 32000,
                               "thinkingConfig": {"includeThoughts": True, "thinkingLevel": "HIGH"}}  # fmt: skip
    status, _, body = await post(gw, "/v1beta/models/gemini-3-pro-preview:generateContent", ask)
    assert status == 200, body
    model_turn = json.loads(body)["candidates"][0]["content"]
    call_part = next(p for p in model_turn["parts"] if "functionCall" in p)
    answer = {"functionResponse": {"id": call_part["functionCall"]["id"], "name": "read_file",
                                   "response": {"output": "hi"}}}  # fmt: skip
    going_on = {**ask, "contents": [*ask["contents"], model_turn, {"role": "user", "parts": [answer]}]}
    for model in ("gemini-3-flash-preview", "gemini-3-pro-preview"):  # switched, then back
        status, _, body = await post(gw, f"/v1beta/models/{model}:generateContent", going_on)
        assert status == 200, body
    first, on_sonnet, on_opus = (r.json() for r in gw.fake.messages_requests())  # none refused, none resent
    assert [first["model"], on_sonnet["model"], on_opus["model"]] == ["claude-opus-4-5", "claude-sonnet-4-5",
                                                                     "claude-opus-4-5"]  # fmt: skip
    assert [b["type"] for b in on_sonnet["messages"][1]["content"]] == ["tool_use"]
    assert [b["type"] for b in on_opus["messages"][1]["content"]] == ["thinking", "tool_use"]


async def test_a_google_search_on_a_claude_route_is_a_request_error_never_sent(make_gateway) -> None:
    """Gemini CLI's ``google_web_search`` asks gemini-3-flash-preview with ``googleSearch``: refused
    in Google's envelope as a request the route cannot serve, class ``unknown`` (a 400 about the
    request, as every refusal the gateway makes of a request), not retryable, with what would serve it."""
    gw = await make_gateway(upstream_yaml=ON_CLAUDE)
    ask = {"contents": [{"role": "user", "parts": [{"text": "gateway news"}]}], "tools": [{"googleSearch": {}}]}
    status, headers, body = await post(gw, "/v1beta/models/gemini-3-flash-preview:generateContent", ask)
    error = json.loads(body)["error"]
    assert (status, error["code"], error["status"]) == (400, 400, "INVALID_ARGUMENT")
    assert error["message"] == ("tools[0].googleSearch runs inside Google's API; the gateway does not carry it "
                                "to Anthropic Messages (a model routed to a Gemini API upstream can run it)")  # fmt: skip
    assert {d.get("reason") for d in error["details"]} >= {"UNTRANSLATABLE_REQUEST"}
    assert headers["x-llm-error-type"] == "unknown" and headers["x-llm-error-retryable"] == "false"
    assert headers["x-should-retry"] == "false"
    assert gw.fake.requests == []
