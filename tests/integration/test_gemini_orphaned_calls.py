"""A Gemini client's request whose model turn has a functionCall no functionResponse answers
(the results dropped from its history: microsoft/vscode#299295) is refused by every upstream
kind, each in its provider's words (the fake's rules: gemini_rules.py, chat_rules.py,
messages_rules.py, responses_rules.py), and the refusal reaches the client in Google's envelope
as a 400 INVALID_ARGUMENT, which it does not retry. The gateway does not repair the history:
which call was meant to have which result is the client's to say."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_gemini_on_chat import post

LS = {"name": "list_directory", "parametersJsonSchema": {"type": "object", "properties": {"dir_path": {"type": "string"}}}}
ORPHANED = {
    "contents": [
        {"role": "user", "parts": [{"text": "list the files"}]},
        {"role": "model", "parts": [{"functionCall": {"id": "call_ls1", "name": "list_directory",
                                                      "args": {"dir_path": "/tmp"}}, "thoughtSignature": "c2ln"}]},
        {"role": "user", "parts": [{"text": "never mind, say hi"}]},
    ],
    "tools": [{"functionDeclarations": [LS]}],
}  # fmt: skip

KINDS = {
    "chat": (", apis: [chat], model_map: {'gemini-*': qwen}",
             "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
             "'tool_call_id'. The following tool_call_ids did not have response messages: call_ls1"),
    "messages": (", apis: [messages], model_map: {'gemini-*': claude-sonnet-4-5}",
                 "`tool_use` ids were found without `tool_result` blocks immediately after: call_ls1"),
    "responses": (", apis: [responses], model_map: {'gemini-*': gpt-5-codex}",
                  "No tool output found for function call call_ls1."),
    "gemini": (", apis: [gemini]",
               "Please ensure that the number of function response parts is equal to the number of function "
               "call parts of the function call turn."),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(KINDS))
async def test_an_orphaned_function_call_is_refused_in_the_providers_words(make_gateway, kind: str) -> None:
    upstream_yaml, words = KINDS[kind]
    gw = await make_gateway(upstream_yaml=upstream_yaml)
    status, _, body = await post(gw, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", ORPHANED)
    assert status == 400, body
    error = json.loads(body)["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT", error
    assert words in error["message"], error
    assert len(gw.fake.requests) == 1  # refused once, not retried
