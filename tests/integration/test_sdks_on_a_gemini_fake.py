"""The real openai and anthropic SDKs on a Gemini API upstream played by the fake
(``gateway/fake/gemini_rules.py``), which refuses what Google refuses for the model in the URL:
what agents ask of the models they were made for reaches Gemini 2.5 in a shape it takes."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai

from tests.integration.conftest import Gateway, MakeGateway

ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
          "additionalProperties": False}  # fmt: skip
SHELL = {"type": "function", "name": "shell", "description": "Runs a command",
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"],
                        "additionalProperties": False}, "strict": True}  # fmt: skip


async def on_gemini(make_gateway: MakeGateway, model: str = "gemini-2.5-flash") -> Gateway:
    return await make_gateway(upstream_yaml=f", apis: [gemini], api_key: k-gemini, model_map: {{'*': {model}}}")


def sent(gw: Gateway) -> list[dict[str, Any]]:
    return [r.json() for r in gw.fake.gemini_requests()]


async def test_codexs_output_schema_beside_its_tools_reaches_gemini_2_5_as_an_instruction(make_gateway) -> None:
    """``codex exec --output-schema`` (and the Agents SDK's output_type with tools): a
    Responses ``text.format`` json_schema beside function tools, which Gemini 2.5 refuses as
    JSON mode ("Function calling with a response mime type: 'application/json' is unsupported")."""
    gw = await on_gemini(make_gateway)
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
    try:
        response = await client.responses.create(
            model="gpt-5-codex", instructions="You are Codex.", input="What is in notes.txt?", tools=[SHELL],  # type: ignore[list-item]
            text={"format": {"type": "json_schema", "name": "codex_output_schema", "schema": ANSWER, "strict": True}})
        assert response.status == "completed" and response.output_text
        chat = await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "function", "function": {"name": "shell", "parameters": SHELL["parameters"]}}],
            response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER}})
        assert chat.choices[0].message.content
    finally:
        await client.close()
    for body in sent(gw):
        assert "responseMimeType" not in body.get("generationConfig", {})
        assert body["tools"][0]["functionDeclarations"][0]["name"] == "shell"
        said = body["systemInstruction"]["parts"][-1]["text"]
        assert json.loads(said.removeprefix("Answer in JSON that matches this JSON Schema: ")) == ANSWER


async def test_gemini_3_gets_the_schema_as_json_mode_beside_the_tools(make_gateway) -> None:
    gw = await on_gemini(make_gateway, "gemini-3.1-pro-preview")
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
    try:
        response = await client.responses.create(
            model="gpt-5-codex", input="What is in notes.txt?", tools=[SHELL],  # type: ignore[list-item]
            text={"format": {"type": "json_schema", "name": "codex_output_schema", "schema": ANSWER, "strict": True}})
        assert json.loads(response.output_text) == {"answer": "fake"}  # the fake answers to the schema
    finally:
        await client.close()
    [body] = sent(gw)
    assert body["generationConfig"] == {"responseMimeType": "application/json", "responseJsonSchema": ANSWER}


# An MCP tool's input schema as pydantic writes it (a nested model: a $ref beside its title).
MOVE = {"type": "object", "required": ["target"], "properties": {
    "target": {"$ref": "#/$defs/Target", "title": "Target object", "examples": [{"x": 1}]}},
    "$defs": {"Target": {"type": "object", "properties": {"x": {"type": "integer"}}}}}  # fmt: skip


async def test_an_mcp_tools_ref_beside_a_title_reaches_gemini_as_google_takes_it(make_gateway) -> None:
    gw = await on_gemini(make_gateway)
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="sk-ant-client", max_retries=0)
    try:
        message = await client.messages.create(
            model="claude-sonnet-4-6", max_tokens=256, messages=[{"role": "user", "content": "Move to x=1."}],
            tools=[{"name": "mcp__robot__move", "input_schema": MOVE}])  # fmt: skip
        assert message.stop_reason == "end_turn"
    finally:
        await client.close()
    [body] = sent(gw)
    [declared] = body["tools"][0]["functionDeclarations"]
    target = declared["parametersJsonSchema"]["properties"]["target"]
    assert target == {"$ref": "#/$defs/Target", "description": "Target object"}


PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDwvVHlwZS9DYXRhbG9nPj4KZW5kb2JqCg=="
INLINE_PDF = {"inlineData": {"mimeType": "application/pdf", "data": PDF}}


async def test_a_pdf_from_the_anthropic_and_the_openai_sdks_reaches_gemini_inline(make_gateway) -> None:
    """Gemini reads PDFs: a Messages ``document`` reached it as "[document … left out: this
    model cannot read it]", a Responses ``input_file`` was refused (400 untranslatable_request)."""
    gw = await on_gemini(make_gateway)
    claude = anthropic.AsyncAnthropic(base_url=gw.base, api_key="sk-ant-client", max_retries=0)
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
    try:
        message = await claude.messages.create(model="claude-sonnet-4-6", max_tokens=256, messages=[{
            "role": "user", "content": [
                {"type": "document", "title": "report", "source": {"type": "base64", "media_type": "application/pdf",
                                                                  "data": PDF}},
                {"type": "text", "text": "Summarise it."}]}])  # fmt: skip
        assert message.content[0].type == "text"
        response = await client.responses.create(model="gpt-5-codex", input=[{"role": "user", "content": [
            {"type": "input_file", "filename": "report.pdf", "file_data": f"data:application/pdf;base64,{PDF}"},
            {"type": "input_text", "text": "Summarise it."}]}])  # fmt: skip
        assert response.output_text
    finally:
        await claude.close()
        await client.close()
    for body in sent(gw):
        assert body["contents"] == [{"role": "user", "parts": [INLINE_PDF, {"text": "Summarise it."}]}]
