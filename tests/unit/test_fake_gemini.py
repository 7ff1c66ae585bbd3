"""The fake upstream's Gemini API over HTTP (gateway/fake/gemini.py, gemini_rules.py,
gemini_tool.py): Google's shapes buffered, as SSE and as a JSON-array stream; every scenario;
the refusals the real API makes (the key's place, unknown fields, unpaired function responses,
a replayed call without its thoughtSignature, out-of-bounds fields, roles, image types); per-key
limits in Google's words."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.fake import ScenarioUpstream, gemini_rules
from gateway.fake.gemini import RETRY

ROOT = Path(__file__).resolve().parents[2]
KEY = {"x-goog-api-key": "k1"}
SAY_HI = {"contents": [{"role": "user", "parts": [{"text": "say hi"}]}]}
SHELL = {"functionDeclarations": [{"name": "run_shell_command", "description": "Runs a command",
                                   "parametersJsonSchema": {"type": "object", "properties": {
                                       "command": {"type": "string"}}, "required": ["command"]}}]}  # fmt: skip


@pytest.fixture
async def fake() -> AsyncIterator[tuple[ScenarioUpstream, list[str], aiohttp.ClientSession]]:
    lines: list[str] = []
    f = ScenarioUpstream(log=lines.append, context_window=200)
    await f.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield f, lines, http
    finally:
        await f.close()


def root(f: ScenarioUpstream) -> str:
    return f.url.removesuffix("/v1")


async def call(http: aiohttp.ClientSession, f: ScenarioUpstream, model: str, method: str = "generateContent",
               body: dict[str, Any] | None = None, headers: dict[str, str] | None = None, query: str = "",
               version: str = "v1beta") -> tuple[int, str, Any]:  # fmt: skip
    """(status, content type, the JSON answer, or a stream's chunks as a list)."""
    url = f"{root(f)}/{version}/models/{model}:{method}{query}"
    async with http.post(url, json=SAY_HI if body is None else body, headers=KEY if headers is None else headers) as r:
        text = await r.text()
        ctype = r.headers.get("Content-Type", "")
    if "event-stream" in ctype:
        assert "\r\n\r\n" in text or not text  # Google separates its events with CRLF pairs
        return r.status, ctype, [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    return r.status, ctype, json.loads(text)


async def test_a_buffered_answer_in_googles_shape(fake: Any) -> None:
    f, _, http = fake
    status, _, doc = await call(http, f, "gemini-2.5-flash")
    assert status == 200
    [candidate] = doc["candidates"]
    assert candidate["content"]["role"] == "model" and candidate["content"]["parts"][0]["text"]
    assert candidate["finishReason"] == "STOP"
    u = doc["usageMetadata"]
    assert u["totalTokenCount"] == u["promptTokenCount"] + u["candidatesTokenCount"]
    assert doc["modelVersion"] == "gemini-2.5-flash" and doc["responseId"]
    assert f.gemini_requests()[0].path == "/v1beta/models/gemini-2.5-flash:generateContent"


async def test_an_sse_stream_has_usage_and_finish_on_its_last_chunk_only(fake: Any) -> None:
    f, _, http = fake
    status, ctype, chunks = await call(http, f, "gemini-2.5-flash", "streamGenerateContent", query="?alt=sse")
    assert status == 200 and ctype.startswith("text/event-stream") and len(chunks) == 3
    assert all("usageMetadata" not in c and "finishReason" not in c["candidates"][0] for c in chunks[:-1])
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP" and chunks[-1]["usageMetadata"]["totalTokenCount"]
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks) == "Hello from fake."


async def test_without_alt_sse_the_stream_is_one_json_array_written_as_it_grows(fake: Any) -> None:
    f, _, http = fake
    url = f"{root(f)}/v1/models/gemini-2.5-flash:streamGenerateContent"
    async with http.post(url, json=SAY_HI, headers=KEY) as r:
        raw = await r.read()
        assert r.headers["Content-Type"].startswith("application/json")
    assert raw.startswith(b"[{") and b"\r\n,{" in raw and raw.endswith(b"]")
    chunks = json.loads(raw)
    assert len(chunks) == 3 and chunks[-1]["usageMetadata"]["promptTokenCount"] > 0


async def test_count_tokens(fake: Any) -> None:
    f, _, http = fake
    status, _, doc = await call(http, f, "gemini-2.5-flash", "countTokens")
    assert status == 200 and doc["totalTokens"] > 0
    status, _, doc = await call(http, f, "gemini-2.5-flash", "countTokens", {"generateContentRequest": {
        "model": "models/gemini-2.5-flash", **SAY_HI}})  # fmt: skip
    assert status == 200 and doc["totalTokens"] > 0


@pytest.mark.parametrize("headers", [{"Authorization": "Bearer k1"}, {"Authorization": "Bearer k1", **KEY}])
async def test_a_key_as_a_bearer_token_is_refused_as_google_refuses_it(fake: Any, headers: dict[str, str]) -> None:
    f, _, http = fake
    status, _, doc = await call(http, f, "gemini-2.5-flash", headers=headers)
    assert status == 401 and doc["error"]["status"] == "UNAUTHENTICATED"
    assert doc["error"]["message"].startswith("Request had invalid authentication credentials")


async def test_the_key_goes_in_the_header_or_the_query_and_none_is_refused(fake: Any) -> None:
    f, _, http = fake
    assert (await call(http, f, "gemini-2.5-flash", headers={}, query="?key=k1"))[0] == 200
    status, _, doc = await call(http, f, "gemini-2.5-flash", headers={})
    assert status == 403 and doc["error"]["status"] == "PERMISSION_DENIED"
    assert f.calls_by_key() == {"k1": 1, None: 1}


async def test_the_log_says_what_a_gemini_body_held_and_where_its_key_was(fake: Any) -> None:
    f, lines, http = fake
    body = {"systemInstruction": {"parts": [{"text": "Be brief."}]}, **turns(), "generationConfig": {}}
    await call(http, f, "gemini-2.5-flash", body=body, headers={}, query="?key=k1")
    await call(http, f, "gemini-2.5-flash", body=body, query="?key=k2")
    assert [line.rsplit(" [", 1)[1] for line in lines[-2:]] == [
        "sent: systemInstruction contents[1] tools[1] generationConfig; key in ?key=]",
        "sent: systemInstruction contents[1] tools[1] generationConfig; key in x-goog-api-key, ?key=]",
    ]


async def test_unknown_body_fields_are_refused_with_googles_words(fake: Any) -> None:
    f, _, http = fake
    status, _, doc = await call(http, f, "gemini-2.5-flash", body={**SAY_HI, "model": "gemini-2.5-flash",
                                                                   "stream": True})  # fmt: skip
    assert status == 400 and doc["error"]["status"] == "INVALID_ARGUMENT"
    assert doc["error"]["message"].split("\n")[0] == 'Invalid JSON payload received. Unknown name "model": Cannot find field.'
    assert doc["error"]["details"][0]["@type"].endswith("google.rpc.BadRequest")
    # Both spellings of a real field are taken, as Google's JSON parser takes them.
    both = {**SAY_HI, "system_instruction": {"parts": [{"text": "Be brief."}]}, "generationConfig": {}}
    assert (await call(http, f, "gemini-2.5-flash", body=both))[0] == 200


async def test_a_refusal_on_a_json_array_stream_is_wrapped_in_an_array(fake: Any) -> None:
    f, _, http = fake
    status, _, doc = await call(http, f, "gemini-2.5-flash", "streamGenerateContent", {**SAY_HI, "model": "x"})
    assert status == 400 and doc[0]["error"]["code"] == 400


def turns(*contents: dict[str, Any]) -> dict[str, Any]:
    return {"contents": [SAY_HI["contents"][0], *contents], "tools": [SHELL]}


async def test_a_function_response_must_answer_the_calls_just_before_it(fake: Any) -> None:
    f, _, http = fake
    answer = {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command", "response": {"output": "x"}}}]}
    status, _, doc = await call(http, f, "gemini-2.5-flash", body=turns(answer))
    assert status == 400 and "function response turn comes immediately after a function call turn" in doc["error"]["message"]
    asked = {"role": "model", "parts": [{"functionCall": {"name": "run_shell_command", "args": {}}}] * 2}
    status, _, doc = await call(http, f, "gemini-2.5-flash", body=turns(asked, answer))
    assert status == 400 and "number of function response parts is equal" in doc["error"]["message"]


COUNT = ("Please ensure that the number of function response parts is equal to the number of function call parts "
         "of the function call turn.")
CALL = {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}
ANSWER = {"functionResponse": {"name": "run_shell_command", "response": {"output": "x"}}}


@pytest.mark.parametrize("after", [
    {"role": "user", "parts": [{"text": "go on"}]},  # the results left out (microsoft/vscode#299295)
    {"role": "user", "parts": [ANSWER, {"text": "and then"}]},  # one answer for two calls
    {"role": "function", "parts": [ANSWER] * 3},
])  # fmt: skip
def test_a_call_turn_must_be_answered_by_as_many_responses_in_the_next_turn(after: dict[str, Any]) -> None:
    asked = {"role": "model", "parts": [CALL, CALL]}
    assert refused(turns(asked, after)) == COUNT


@pytest.mark.parametrize("contents", [
    [{"role": "model", "parts": [CALL, CALL]}, {"role": "user", "parts": [ANSWER, ANSWER]}],
    [{"role": "model", "parts": [{"text": "sure"}, CALL]}, {"role": "user", "parts": [ANSWER, {"text": "go"}]}],
    [{"role": "model", "parts": [{"text": "no calls"}]}, {"role": "user", "parts": [{"text": "ok"}]}],
    [{"role": "model", "parts": [CALL]}],  # the last turn: nothing has answered it yet
])  # fmt: skip
def test_call_turns_answered_in_full_are_taken(contents: list[dict[str, Any]]) -> None:
    assert refused(turns(*contents)) is None


BAD_NAME = ("Invalid function name. Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), "
            "underscores (_), dots (.), colons (:), or dashes (-), with a maximum length of 64.")


def refused(body: dict[str, Any], model: str = "gemini-2.5-flash") -> str | None:
    """The message gemini_rules refuses ``body`` with (a 400 INVALID_ARGUMENT) on ``model``, or None."""
    reply = gemini_rules.refusal(body, model=model)
    if reply is None:
        return None
    assert reply.status == 400 and reply.body["error"]["status"] == "INVALID_ARGUMENT"
    return str(reply.body["error"]["message"])


def declared(*names: str, key: str = "functionDeclarations") -> dict[str, Any]:
    return {**SAY_HI, "tools": [{key: [{"name": n} for n in names]}]}


@pytest.mark.parametrize("contents", [None, []])
def test_no_contents_is_refused_as_not_specified(contents: Any) -> None:
    body = {} if contents is None else {"contents": contents}
    assert refused(body) == "* GenerateContentRequest.contents: contents is not specified\n"
    assert refused(SAY_HI) is None


def test_a_content_without_parts_is_refused() -> None:
    empty = {"contents": [SAY_HI["contents"][0], {"role": "model", "parts": []}, {"role": "user"}]}
    assert refused(empty) == ("* GenerateContentRequest.contents[1].parts: contents.parts must not be empty.\n"
                              "* GenerateContentRequest.contents[2].parts: contents.parts must not be empty.\n")
    assert refused({"contents": [SAY_HI["contents"][0], {"role": "model", "parts": [{"text": "hi"}]}]}) is None


@pytest.mark.parametrize("name", ["1st_tool", "mcp__server__read file", "tool/run", "-dash", "", "a" * 65])
def test_a_function_declared_under_a_name_google_refuses(name: str) -> None:
    assert refused(declared("run_shell_command", name)) == (
        f"* GenerateContentRequest.tools[0].function_declarations[1].name: {BAD_NAME}\n")


def test_every_refused_function_name_is_a_line_of_its_own() -> None:
    body = {**SAY_HI, "tools": [{"functionDeclarations": [{"name": "ok"}]},
                                {"function_declarations": [{"name": "9a"}, {"name": "b"}, {"name": "c d"}]}]}
    assert refused(body) == (f"* GenerateContentRequest.tools[1].function_declarations[0].name: {BAD_NAME}\n"
                             f"* GenerateContentRequest.tools[1].function_declarations[2].name: {BAD_NAME}\n")


@pytest.mark.parametrize("name", ["_private", "files.read", "default_api:run", "mcp-server-tool", "a" * 64])
def test_function_names_google_takes(name: str) -> None:
    assert refused(declared(name)) is None
    assert refused(declared(name, key="function_declarations")) is None


def test_a_refused_name_in_the_history_alone_is_not_held_to_the_rule() -> None:
    """Only declarations are: no report shows Google refusing a functionCall's name."""
    asked = {"role": "model", "parts": [{"functionCall": {"name": "1st tool", "args": {}}}]}
    answer = {"role": "user", "parts": [{"functionResponse": {"name": "1st tool", "response": {}}}]}
    assert refused({"contents": [SAY_HI["contents"][0], asked, answer]}) is None


def test_more_than_five_stop_sequences_are_refused() -> None:
    six = {**SAY_HI, "generationConfig": {"stopSequences": list("abcdef")}}
    assert refused(six) == ("* GenerateContentRequest.generation_config.stop_sequences: the number of "
                            "stop_sequences must not exceed 5.\n")
    assert refused({**SAY_HI, "generation_config": {"stop_sequences": list("abcdef")}}) == refused(six)
    assert refused({**SAY_HI, "generationConfig": {"stopSequences": list("abcde")}}) is None


@pytest.mark.parametrize("mode", [None, "AUTO", "NONE"])
def test_allowed_function_names_are_refused_outside_any_and_validated(mode: str | None) -> None:
    calling: dict[str, Any] = {"allowedFunctionNames": ["run_shell_command"]}
    if mode is not None:
        calling["mode"] = mode
    body = {**declared("run_shell_command"), "toolConfig": {"functionCallingConfig": calling}}
    assert refused(body) == ("* GenerateContentRequest.tool_config.function_calling_config.allowed_function_names: "
                             "allowed_function_names should only be set when the Mode is ANY or VALIDATED.\n")


@pytest.mark.parametrize("calling", [{"mode": "ANY", "allowedFunctionNames": ["run_shell_command"]},
                                     {"mode": "VALIDATED", "allowed_function_names": ["run_shell_command"]},
                                     {"mode": "AUTO"}, {"mode": "AUTO", "allowedFunctionNames": []}])
def test_allowed_function_names_google_takes(calling: dict[str, Any]) -> None:
    assert refused({**declared("run_shell_command"), "tool_config": {"function_calling_config": calling}}) is None


def test_all_out_of_bounds_fields_are_listed_in_one_message() -> None:
    body = {"contents": [{"role": "user", "parts": []}], "tools": [{"functionDeclarations": [{"name": "a b"}]}],
            "generationConfig": {"stopSequences": list("abcdef")}}
    assert refused(body) == ("* GenerateContentRequest.contents[0].parts: contents.parts must not be empty.\n"
                             f"* GenerateContentRequest.tools[0].function_declarations[0].name: {BAD_NAME}\n"
                             "* GenerateContentRequest.generation_config.stop_sequences: the number of "
                             "stop_sequences must not exceed 5.\n")


@pytest.mark.parametrize("role", ["assistant", "system", "phase", "USER"])
def test_a_role_gemini_does_not_take_is_refused(role: str) -> None:
    body = {"contents": [SAY_HI["contents"][0], {"role": role, "parts": [{"text": "hi"}]}]}
    assert refused(body) == "Please use a valid role: user, model."


@pytest.mark.parametrize("role", ["user", "model", "function", "tool", None, ""])
def test_roles_gemini_takes(role: str | None) -> None:
    content: dict[str, Any] = {"parts": [{"text": "hi"}]}
    if role is not None:
        content["role"] = role
    assert refused({"contents": [content]}) is None


@pytest.mark.parametrize("mime", ["image/gif", "image/jpg", "image/bmp", "image/tiff"])
def test_an_image_type_gemini_does_not_read_is_refused(mime: str) -> None:
    image = {"inlineData": {"mimeType": mime, "data": "R0lGODlh"}}
    assert refused({"contents": [{"role": "user", "parts": [{"text": "what is this?"}, image]}]}) == (
        f"Unsupported MIME type: {mime}")
    snake = {"inline_data": {"mime_type": mime, "data": "R0lGODlh"}}
    assert refused({"contents": [{"role": "user", "parts": [snake]}]}) == f"Unsupported MIME type: {mime}"


@pytest.mark.parametrize("mime", ["image/png", "image/jpeg", "image/webp", "image/heic", "image/heif",
                                  "application/pdf", "audio/wav", "video/mp4", "text/plain"])
def test_image_types_gemini_reads_and_other_media_are_taken(mime: str) -> None:
    part = {"inlineData": {"mimeType": mime, "data": "AAAA"}}
    assert refused({"contents": [{"role": "user", "parts": [part]}]}) is None


async def test_a_refused_function_name_over_http(fake: Any) -> None:
    f, lines, http = fake
    status, _, doc = await call(http, f, "gemini-2.5-flash", body=declared("mcp__github__create issue"))
    assert status == 400 and doc["error"] == {
        "code": 400, "status": "INVALID_ARGUMENT",
        "message": f"* GenerateContentRequest.tools[0].function_declarations[0].name: {BAD_NAME}\n"}  # fmt: skip
    assert (await call(http, f, "gemini-2.5-flash", body=declared("mcp__github__create_issue")))[0] == 200


@pytest.mark.parametrize("stream", [False, True])
async def test_the_tool_scenario_calls_then_answers_and_holds_the_replay_to_its_signature(
    fake: Any, stream: bool
) -> None:
    f, lines, http = fake
    method, query = ("streamGenerateContent", "?alt=sse") if stream else ("generateContent", "")
    status, _, got = await call(http, f, "gemini-2.5-flash-tool", method, turns(), query=query)
    doc = got[-1] if stream else got
    [part] = doc["candidates"][0]["content"]["parts"]
    fc = part["functionCall"]
    assert status == 200 and fc["name"] == "run_shell_command" and fc["id"] and part["thoughtSignature"]
    assert fc["args"]["command"].startswith("echo")
    answer = {"role": "user", "parts": [{"functionResponse": {"id": fc["id"], "name": fc["name"],
                                                              "response": {"output": "hello from a shell tool"}}}]}  # fmt: skip
    unsigned = {"role": "model", "parts": [{"functionCall": fc}]}
    status, _, refused = await call(http, f, "gemini-2.5-flash-tool", body=turns(unsigned, answer))
    assert status == 400
    assert refused["error"]["message"].startswith("Function call is missing a thought_signature in functionCall parts.")
    assert "`default_api:run_shell_command` , position 2." in refused["error"]["message"]
    # Replayed as Gemini CLI does (its placeholder signature): accepted, and the result quoted.
    placeholder = {"role": "model", "parts": [{"functionCall": fc, "thoughtSignature": "skip_thought_signature_validator"}]}
    status, _, done = await call(http, f, "gemini-2.5-flash-tool", body=turns(placeholder, answer))
    assert status == 200 and "hello from a shell tool" in done["candidates"][0]["content"]["parts"][0]["text"]
    assert any(f"tool call run_shell_command {fc['id']} [sent:" in line for line in lines)
    assert any(f"to call {fc['id']} [sent:" in line for line in lines)  # the result, to the call it answers


@pytest.mark.parametrize(("name", "args"), [("Bash", {"command": "echo hello from a shell tool",
                                                       "description": "Print a greeting"}),
                                             ("exec_command", {"cmd": "echo hello from a shell tool"})])
async def test_the_tool_scenario_calls_a_translated_agents_shell_not_its_first_tool(
    fake: Any, name: str, args: dict[str, Any]
) -> None:
    """Claude Code and Codex on a Gemini upstream declare their shells among others (Claude
    Code's first is ``Agent``): the shell is called, as on the other APIs."""
    f, _, http = fake
    tools = [{"functionDeclarations": [{"name": n, "parametersJsonSchema": {"type": "object"}}
                                       for n in ("Agent", "list_directory", name)]}]  # fmt: skip
    status, _, doc = await call(http, f, "gemini-2.5-flash-tool", body={**SAY_HI, "tools": tools})
    fc = doc["candidates"][0]["content"]["parts"][0]["functionCall"]
    assert status == 200 and (fc["name"], fc["args"]) == (name, args)


async def test_429_says_its_wait_in_retry_info_then_answers(fake: Any) -> None:
    f, lines, http = fake
    status, _, doc = await call(http, f, "gemini-2.5-flash-429")
    assert status == 429 and doc["error"]["status"] == "RESOURCE_EXHAUSTED"
    retry = [d for d in doc["error"]["details"] if d["@type"] == RETRY]
    assert retry == [{"@type": RETRY, "retryDelay": "2s"}]
    assert "PerMinute" in doc["error"]["details"][0]["violations"][0]["quotaId"]  # a rate limit, not a budget
    assert (await call(http, f, "gemini-2.5-flash-429"))[0] == 200
    assert ("gemini key=*** model=gemini-2.5-flash-429 scenario=429 -> 429 (retryDelay: 2s) "
            "[sent: contents[1]; key in x-goog-api-key]") in lines  # fmt: skip


@pytest.mark.parametrize(("scenario", "retries"), [("503", True), ("529", True), ("down", False)])
async def test_unavailable_scenarios_answer_googles_503(fake: Any, scenario: str, retries: bool) -> None:
    f, _, http = fake
    status, _, doc = await call(http, f, f"gemini-2.5-flash-{scenario}")
    assert status == 503 and doc["error"] == {"code": 503, "message": "The model is overloaded. Please try again later.",
                                               "status": "UNAVAILABLE"}  # fmt: skip
    assert (await call(http, f, f"gemini-2.5-flash-{scenario}"))[0] == (200 if retries else 503)


async def test_overflow_answers_googles_400_over_the_window_only(fake: Any) -> None:
    f, _, http = fake
    assert (await call(http, f, "gemini-2.5-flash-overflow"))[0] == 200
    long = {"contents": [{"role": "user", "parts": [{"text": "word " * 400}]}]}
    status, _, doc = await call(http, f, "gemini-2.5-flash-overflow", body=long)
    assert status == 400 and doc["error"]["status"] == "INVALID_ARGUMENT"
    assert doc["error"]["message"].endswith("exceeds the maximum number of tokens allowed (200).")


@pytest.mark.parametrize("query", ["?alt=sse", ""])
async def test_cut_shows_first_words_then_drops_the_connection(fake: Any, query: str) -> None:
    f, _, http = fake
    url = f"{root(f)}/v1beta/models/gemini-2.5-flash-cut:streamGenerateContent{query}"
    got = b""
    with pytest.raises(aiohttp.ClientPayloadError):
        async with http.post(url, json=SAY_HI, headers=KEY) as r:
            async for piece in r.content.iter_any():
                got += piece
    assert b"The answer" in got and b"finishReason" not in got and not got.rstrip().endswith(b"]")


async def test_empty_is_an_empty_200_stream(fake: Any) -> None:
    f, _, http = fake
    status, _, chunks = await call(http, f, "gemini-2.5-flash-empty", "streamGenerateContent", query="?alt=sse")
    assert status == 200 and chunks == []


async def test_per_key_limits_in_googles_words(fake: Any) -> None:
    f, _, http = fake
    f.keys.limit("k1", rpm=1)
    assert (await call(http, f, "gemini-2.5-flash"))[0] == 200
    status, _, doc = await call(http, f, "gemini-2.5-flash")
    assert status == 429 and doc["error"]["status"] == "RESOURCE_EXHAUSTED"
    [retry] = [d for d in doc["error"]["details"] if d["@type"] == RETRY]
    assert retry["retryDelay"].endswith("s") and int(retry["retryDelay"][:-1]) >= 1
    f.keys.revoke("k2")
    status, _, doc = await call(http, f, "gemini-2.5-flash", headers={"x-goog-api-key": "k2"})
    assert status == 400 and doc["error"]["message"] == "API key not valid. Please pass a valid API key."
    f.keys.exhaust("k3")
    status, _, doc = await call(http, f, "gemini-2.5-flash", headers={"x-goog-api-key": "k3"})
    assert status == 429 and "PerDay" in doc["error"]["details"][0]["violations"][0]["quotaId"]


async def test_the_model_list_in_googles_shape_for_a_google_caller(fake: Any) -> None:
    f, _, http = fake
    async with http.get(f"{root(f)}/v1beta/models", headers=KEY) as r:
        listed = await r.json()
    assert listed["models"][0]["name"] == "models/gemini-2.5-flash"
    async with http.get(f"{root(f)}/v1/models") as r:  # no Google key: OpenAI's list
        assert (await r.json())["object"] == "list"


async def test_a_request_for_json_gets_the_smallest_document_its_schema_allows(fake: Any) -> None:
    """As Gemini CLI's model router asks (responseJsonSchema), and google-genai's responseSchema."""
    f, _, http = fake
    router = {"type": "object", "properties": {"reasoning": {"type": "string"},
                                               "model_choice": {"type": "string", "enum": ["flash", "pro"]}},
              "required": ["reasoning", "model_choice"]}  # fmt: skip
    body = {**SAY_HI, "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": router}}
    status, _, doc = await call(http, f, "gemini-2.5-flash-lite", body=body)
    assert status == 200 and json.loads(doc["candidates"][0]["content"]["parts"][0]["text"]) == {
        "reasoning": "fake", "model_choice": "flash"}  # fmt: skip
    listed = {"type": "ARRAY", "items": {"type": "STRING"}}
    body = {**SAY_HI, "generation_config": {"response_mime_type": "application/json", "response_schema": listed}}
    _, _, chunks = await call(http, f, "gemini-2.5-flash", "streamGenerateContent", body, query="?alt=sse")
    assert json.loads(chunks[-1]["candidates"][0]["content"]["parts"][0]["text"]) == []


JSON_MODE = {"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}}
NO_JSON_WITH_TOOLS = "Function calling with a response mime type: 'application/json' is unsupported"


@pytest.mark.parametrize("model", ["gemini-2.5-flash", "gemini-2.5-pro", "gemini-2.5-flash-lite", "gemini-2.0-flash",
                                   "gemini-1.5-pro-latest"])
def test_json_mode_beside_function_declarations_is_refused_by_gemini_2_and_older(model: str) -> None:
    body = {**declared("run_shell_command"), "generationConfig": JSON_MODE}
    assert refused(body, model) == NO_JSON_WITH_TOOLS
    snake = {**declared("run_shell_command"), "generation_config": {"response_mime_type": "application/json"}}
    assert refused(snake, model) == NO_JSON_WITH_TOOLS


@pytest.mark.parametrize(("model", "body"), [
    ("gemini-3.1-pro-preview", {**declared("run_shell_command"), "generationConfig": JSON_MODE}),  # Gemini 3 takes both
    ("gemini-3-flash-preview", {**declared("run_shell_command"), "generationConfig": JSON_MODE}),
    ("gemini-2.5-flash", {**SAY_HI, "generationConfig": JSON_MODE}),  # no functions
    ("gemini-2.5-flash", {**declared(), "generationConfig": JSON_MODE}),
    ("gemini-2.5-flash", {**declared("run_shell_command"), "generationConfig": {"responseMimeType": "text/plain"}}),
    # Function calling off (mode NONE): google/adk-python#5735 reports it taken.
    ("gemini-2.5-pro", {**declared("run_shell_command"), "generationConfig": JSON_MODE,
                        "toolConfig": {"functionCallingConfig": {"mode": "NONE"}}}),
])  # fmt: skip
def test_json_mode_google_takes(model: str, body: dict[str, Any]) -> None:
    assert refused(body, model) is None


async def test_the_models_own_rules_are_held_to_the_model_in_the_url(fake: Any) -> None:
    f, _, http = fake
    body = {**turns(), "generationConfig": JSON_MODE}
    status, _, doc = await call(http, f, "gemini-2.5-flash", body=body)
    assert status == 400 and doc["error"] == {"code": 400, "message": NO_JSON_WITH_TOOLS, "status": "INVALID_ARGUMENT"}
    assert (await call(http, f, "gemini-3.1-pro-preview", body=body))[0] == 200
    penalised = {**SAY_HI, "generationConfig": {"presencePenalty": 0.4}}
    status, _, doc = await call(http, f, "gemini-2.5-pro", body=penalised)
    assert status == 400 and doc["error"]["message"] == "Penalty is not enabled for models/gemini-2.5-pro"


TARGET = {"type": "object", "properties": {"x": {"type": "integer"}}}


def with_ref(node: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"target": node}, "$defs": {"Target": TARGET}}


@pytest.mark.parametrize("sibling", [{"title": "Target object"}, {"examples": [{"x": 1}]}, {"type": "object"},
                                     {"description": "d", "nullable": True}])
def test_a_ref_beside_other_fields_is_refused_in_a_tool_and_a_response_schema(sibling: dict[str, Any]) -> None:
    node = {"$ref": "#/$defs/Target", **sibling}
    says = ("$ref 'Target' was set alongside unsupported fields. If a schema node has $ref set, then only "
            "description and default can be set alongside it")  # fmt: skip
    tool = {**SAY_HI, "tools": [{"functionDeclarations": [{"name": "pick", "parametersJsonSchema": with_ref(node)}]}]}
    assert refused(tool) == says
    nested = {"type": "object", "properties": {"all": {"type": "array", "items": {"anyOf": [node, {"type": "null"}]}}},
              "$defs": {"Target": TARGET}}  # fmt: skip
    assert refused({**SAY_HI, "generationConfig": {"responseMimeType": "application/json",
                                                   "responseJsonSchema": nested}}) == says  # fmt: skip
    snake = {**SAY_HI, "tools": [{"function_declarations": [{"name": "pick", "parameters_json_schema": with_ref(node)}]}]}
    assert refused(snake) == says


@pytest.mark.parametrize("node", [{"$ref": "#/$defs/Target"}, {"$ref": "#/$defs/Target", "description": "d"},
                                  {"$ref": "#/$defs/Target", "default": {"x": 1}, "$comment": "c"}])
def test_a_ref_beside_what_google_takes(node: dict[str, Any]) -> None:
    tool = {**SAY_HI, "tools": [{"functionDeclarations": [{"name": "pick", "parametersJsonSchema": with_ref(node)}]}]}
    assert refused(tool) is None
    # A property named "$ref" is no reference.
    named = {"type": "object", "properties": {"$ref": {"type": "string"}, "title": {"type": "string"}}}
    assert refused({**SAY_HI, "tools": [{"functionDeclarations": [{"name": "p", "parametersJsonSchema": named}]}]}) is None


@pytest.mark.parametrize("model", ["gemini-2.5-flash", "gemini-2.5-pro", "gemini-2.5-flash-lite"])
def test_a_penalty_is_refused_by_gemini_2_5(model: str) -> None:
    for penalty in ({"presencePenalty": 0.5}, {"frequencyPenalty": -0.2}, {"frequency_penalty": 1}):
        body = {**SAY_HI, "generationConfig": {"temperature": 1, **penalty}}
        assert refused(body, model) == f"Penalty is not enabled for models/{model}"


@pytest.mark.parametrize(("model", "config"), [
    ("gemini-2.5-flash", {"presencePenalty": 0, "frequencyPenalty": 0.0}),  # the default: not validated
    ("gemini-2.0-flash", {"presencePenalty": 0.5, "frequencyPenalty": 0.5}),
])  # fmt: skip
def test_penalties_google_takes(model: str, config: dict[str, Any]) -> None:
    assert refused({**SAY_HI, "generationConfig": config}, model) is None


def test_a_thought_signature_holds_only_for_the_organization_whose_key_got_it() -> None:
    from gateway.fake.gemini_rules import refusal, signed_for

    call = {"functionCall": {"id": "fc_1", "name": "ls", "args": {}}, "thoughtSignature": signed_for("org-a")}
    body = {"contents": [{"role": "user", "parts": [{"text": "ls"}]}, {"role": "model", "parts": [call]},
                         {"role": "user", "parts": [{"functionResponse": {"id": "fc_1", "name": "ls",
                                                                          "response": {}}}]}]}  # fmt: skip
    assert refusal(body, org="org-a") is None
    for org in ("org-b", None):
        reply = refusal(body, org=org)
        assert reply is not None and reply.body["error"]["message"] == "Corrupted thought signature."


def test_json_schemas_fields_in_a_functions_parameters_are_refused_at_any_depth() -> None:
    """``parameters`` is Google's Schema: an MCP tool's JSON Schema there is refused field by
    field, every one in one message (openswarm-ai/openswarm#24)."""
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {
        "path": {"type": "string"},
        "edits": {"type": "array", "items": {"type": "object", "additionalProperties": False,
                                             "properties": {"mode": {"anyOf": [{"const": "a"}, {"type": "string"}]}}}}}}
    body = {**SAY_HI, "tools": [{"functionDeclarations": [{"name": "edit", "parameters": schema}]}]}
    reply = gemini_rules.refusal(body, model="gemini-2.5-flash")
    assert reply is not None and reply.status == 400
    at = "tools[0].function_declarations[0].parameters"
    lines = [f"Invalid JSON payload received. Unknown name \"$schema\" at '{at}': Cannot find field.",
             f"Invalid JSON payload received. Unknown name \"additionalProperties\" at "
             f"'{at}.properties[1].value.items': Cannot find field.",
             f"Invalid JSON payload received. Unknown name \"const\" at "
             f"'{at}.properties[1].value.items.properties[0].value.any_of[0]': Cannot find field."]  # fmt: skip
    assert reply.body["error"]["message"] == "\n".join(lines)
    [details] = reply.body["error"]["details"]
    assert [v["field"] for v in details["fieldViolations"]] == [at, f"{at}.properties[1].value.items",
                                                                f"{at}.properties[1].value.items.properties[0].value.any_of[0]"]
    # The same schema as parametersJsonSchema is JSON Schema, taken.
    body = {**SAY_HI, "tools": [{"functionDeclarations": [{"name": "edit", "parametersJsonSchema": schema}]}]}
    assert refused(body) is None


def test_googles_own_schema_fields_are_taken_in_either_spelling() -> None:
    schema = {"type": "OBJECT", "nullable": True, "propertyOrdering": ["a"], "required": ["a"], "properties": {
        "a": {"type": "ARRAY", "max_items": "3", "items": {"type": "STRING", "enum": ["x"], "format": "enum"}},
        "b": {"any_of": [{"type": "INTEGER", "minimum": 0}], "description": "d", "example": 1, "default": 0}}}
    assert refused({**SAY_HI, "tools": [{"functionDeclarations": [{"name": "f", "parameters": schema}]}]}) is None


@pytest.mark.parametrize(("model", "budget", "says"), [
    ("gemini-2.5-pro", 52428, "The thinking budget (52428) is invalid."),  # RooCodeInc/Roo-Code#4399
    ("gemini-2.5-pro", 0, "Budget 0 is invalid. This model only works in thinking mode."),
    ("gemini-2.5-pro", 100, "The thinking budget (100) is invalid."),
    ("gemini-2.5-flash", 24577, "The thinking budget (24577) is invalid."),
    ("gemini-2.5-flash-lite", 100, "The thinking budget (100) is invalid."),
    ("gemini-2.5-pro", 32768, None), ("gemini-2.5-pro", 128, None), ("gemini-2.5-pro", -1, None),
    ("gemini-2.5-flash", 0, None), ("gemini-2.5-flash-preview-05-20", 24576, None),
    ("gemini-2.5-flash-lite", 0, None), ("gemini-2.5-flash-lite", 512, None),
])  # fmt: skip
def test_a_thinking_budget_outside_the_models_range_is_refused(model: str, budget: int, says: str | None) -> None:
    body = {**SAY_HI, "generationConfig": {"thinkingConfig": {"thinkingBudget": budget}}}
    assert refused(body, model) == says
    snake = {**SAY_HI, "generation_config": {"thinking_config": {"thinking_budget": budget}}}
    assert refused(snake, model) == says


async def test_the_tool_scenario_calls_with_arguments_in_the_schema_and_answers_in_the_asked_one(fake: Any) -> None:
    """The OpenAI Agents SDK's strict schemas (tests/corpus/requests/agents-sdk-0.24-forecast-first.json)
    as the gateway hands them to Gemini: the call's arguments are in the tool's schema, and the
    answer after its result in ``responseJsonSchema``, as the SDK validates both (Gemini 3: 2.x
    refuses JSON mode beside functions)."""
    f, lines, http = fake
    sdk = json.loads((ROOT / "tests/corpus/requests/agents-sdk-0.24-forecast-first.json").read_text())["body"]
    tools = [{"functionDeclarations": [{"name": "forecast", "parametersJsonSchema": sdk["tools"][0]["parameters"]}]}]
    config = {"responseMimeType": "application/json", "responseJsonSchema": sdk["text"]["format"]["schema"]}
    asked = {**SAY_HI, "tools": tools, "generationConfig": config}
    status, _, doc = await call(http, f, "gemini-3-flash-preview-tool", body=asked)
    assert status == 200, doc
    part = doc["candidates"][0]["content"]["parts"][0]
    assert status == 200 and part["functionCall"]["args"] == {"place": {"city": "fake", "country": "fake"}, "unit": "c"}
    answered = {"role": "user", "parts": [{"functionResponse": {"id": part["functionCall"]["id"], "name": "forecast",
                                                                "response": {"result": "sunny"}}}]}  # fmt: skip
    for method in ("generateContent", "streamGenerateContent"):
        body = {**asked, "contents": [*SAY_HI["contents"], {"role": "model", "parts": [part]}, answered]}
        status, _, done = await call(http, f, "gemini-3-flash-preview-tool", method, body,
                                     query="?alt=sse" if "stream" in method else "")  # fmt: skip
        chunks = done if isinstance(done, list) else [done]
        text = "".join(p.get("text", "") for c in chunks for p in c["candidates"][0]["content"]["parts"])
        assert status == 200 and json.loads(text) == {"city": "fake", "sunny": False}
    assert lines[-1].startswith("gemini") and "answer (tool result came back: 'sunny') in JSON to call" in lines[-1]
