"""The Gemini dialect (``apis/gemini``): admission from the path, Google's error envelope,
the SSE reader a Gemini-speaking upstream's stream would go through, and the tool-output
policy on ``functionResponse`` parts."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.apis import ANTHROPIC_MESSAGES, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES, dialect_for_errors
from gateway.apis.base import EventKind, ForeignError, Inbound, Rejection, Where
from gateway.apis.gemini.wire import GeminiStreamReader, sse_event
from gateway.auth import ClientAuth
from gateway.errors import Classification, ErrorType
from gateway.jsonbody import Lenient
from gateway.keys.registry import KeyRing, KeySpec, digest
from gateway.policy.tool_outputs import Stage, ToolOutputPolicy, ToolRule

BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def admit(method: str, query: dict[str, str] | None = None, body: Any = None) -> Inbound | Rejection:
    where = Where({"model": "gemini-2.5-flash", "method": method}, query or {})
    return GEMINI.admit(b"{}", body if body is not None else dict(BODY), where)


def test_the_model_and_the_stream_flag_come_from_the_path() -> None:
    got = admit("generateContent")
    assert isinstance(got, Inbound) and (got.model, got.stream) == ("gemini-2.5-flash", False)
    assert got.payload == {**BODY, "model": "gemini-2.5-flash", "stream": False}
    streamed = admit("streamGenerateContent", {"alt": "sse"})
    assert isinstance(streamed, Inbound) and streamed.stream and streamed.payload["stream"] is True
    # The path wins over a body that says otherwise.
    body = {**BODY, "model": "models/other", "stream": True}
    said = admit("generateContent", body=body)
    assert isinstance(said, Inbound) and (said.model, said.stream) == ("gemini-2.5-flash", False)


@pytest.mark.parametrize(("model", "stream", "path", "query"), [
    ("gemini-2.5-flash", False, "/v1/models/gemini-2.5-flash:generateContent", ""),
    ("gemini-2.5-flash", True, "/v1/models/gemini-2.5-flash:streamGenerateContent", "alt=sse"),
    ("models/gemini-2.5-pro", False, "/v1/models/gemini-2.5-pro:generateContent", ""),  # the resource name
    ("gemini 2?x", False, "/v1/models/gemini%202%3Fx:generateContent", ""),  # quoted, never a query
])  # fmt: skip
def test_an_upstream_is_addressed_by_model_and_method_without_the_gateways_fields(
    model: str, stream: bool, path: str, query: str
) -> None:
    address = GEMINI.address({**BODY, "model": model, "stream": stream})
    assert address is not None and (address.path, address.query) == (path, query)
    assert address.payload == BODY  # Google refuses unknown fields: model and stream stay here


def test_the_apis_that_say_everything_in_the_body_are_not_addressed() -> None:
    payload = {"model": "m", "stream": True, "messages": []}
    assert OPENAI_CHAT.address(payload) is None and ANTHROPIC_MESSAGES.address(payload) is None
    assert OPENAI_RESPONSES.address(payload) is None


def test_a_json_array_stream_is_admitted_as_a_stream_and_bad_contents_are_refused() -> None:
    # Without alt=sse: the same stream, framed as a JSON array on the way out (array.py).
    array = admit("streamGenerateContent")
    assert isinstance(array, Inbound) and array.stream
    bad = admit("generateContent", body={"contents": "hi"})
    assert isinstance(bad, Rejection) and bad.code == "invalid_contents"


def test_gateway_errors_take_googles_envelope_with_retry_info() -> None:
    c = Classification(ErrorType.RATE_LIMIT, True, 2.5, None, "rate_limit_exceeded")
    doc = json.loads(GEMINI.error_body(429, "slow down", "rate_limit_exceeded", c, "req1"))
    err = doc["error"]
    assert (err["code"], err["status"], err["message"]) == (429, "RESOURCE_EXHAUSTED", "slow down")
    info, retry = err["details"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" and info["reason"] == "RATE_LIMIT_EXCEEDED"
    assert retry == {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2.5s"}
    assert GEMINI.error_status(529, "circuit_open") == 503


# google/rpc/code.proto's HTTP mapping, which Google's own answers follow: code and status agree.
CANONICAL = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
             409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL",
             501: "UNIMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}  # fmt: skip


@pytest.mark.parametrize(("status", "code", "answer", "state"), [
    (400, "invalid_json", 400, "INVALID_ARGUMENT"),
    (401, "missing_client_key", 401, "UNAUTHENTICATED"),
    (403, "model_not_allowed", 403, "PERMISSION_DENIED"),
    (404, "model_not_found", 404, "NOT_FOUND"),
    (413, "request_too_large", 400, "INVALID_ARGUMENT"),  # Google: "Request payload size exceeds the limit"
    (415, "unsupported_content_encoding", 400, "INVALID_ARGUMENT"),
    (429, "key_requests_per_minute", 429, "RESOURCE_EXHAUSTED"),
    (500, "internal_error", 500, "INTERNAL"),
    (502, "upstream_unreachable", 503, "UNAVAILABLE"),
    (503, "circuit_open", 503, "UNAVAILABLE"),
    (504, "upstream_timeout", 504, "DEADLINE_EXCEEDED"),
    (529, "circuit_open", 503, "UNAVAILABLE"),
    # Kept on purpose (errors.py): a budget is not a 429 every Gemini client retries; no code maps to 408.
    (402, "budget_exhausted", 402, "RESOURCE_EXHAUSTED"),
    (408, "request_timeout", 408, "DEADLINE_EXCEEDED"),
])  # fmt: skip
def test_gateway_errors_pair_code_and_status_as_google_does(status: int, code: str, answer: int, state: str) -> None:
    assert GEMINI.error_status(status, code) == answer
    err = json.loads(GEMINI.error_body(answer, "why", code, Classification.of(ErrorType.UNKNOWN), "r"))["error"]
    assert (err["code"], err["status"]) == (answer, state)
    assert CANONICAL.get(answer, state) == state


DAILY = json.dumps({"error": {"code": 429, "message": "You exceeded your current quota", "status": "RESOURCE_EXHAUSTED"}})


@pytest.mark.parametrize(("status", "upstream", "body", "answer"), [
    (402, 429, DAILY, 429),  # a spent per-day quota: the 429 Google's body states, not a 402 beside it
    (402, 429, f"[{DAILY}]", 429),  # the JSON-array framing's error
    (402, 429, '{"error": {"message": "no code"}}', 402),  # no status stated: the gateway's stands
    (402, 402, '{"error": {"code": 402}}', 402),
    (429, 429, DAILY, 429),
    (402, None, DAILY, 402),  # replayed from memory, as rendered the first time
    (402, 429, "not json", 402),
])  # fmt: skip
def test_an_error_passed_through_keeps_the_status_googles_body_states(
    status: int, upstream: int | None, body: str, answer: int
) -> None:
    assert GEMINI.passed_status(status, upstream, body.encode()) == answer
    for other in (OPENAI_CHAT, ANTHROPIC_MESSAGES, OPENAI_RESPONSES):  # their SDKs retry any 429
        assert other.passed_status(status, upstream, body.encode()) == status


@pytest.mark.parametrize(("upstream", "answer", "state"), [
    (413, 400, "INVALID_ARGUMENT"), (422, 400, "INVALID_ARGUMENT"), (502, 503, "UNAVAILABLE"),
    (505, 500, "INTERNAL"), (404, 404, "NOT_FOUND"),
])  # fmt: skip
def test_a_translated_upstream_error_pairs_code_and_status_as_google_does(upstream: int, answer: int,
                                                                         state: str) -> None:  # fmt: skip
    e = ForeignError(upstream, Classification.of(ErrorType.UNKNOWN), "chat", upstream, b"{}", None, None)
    status, body = GEMINI.foreign_error(e, "req1")
    err = json.loads(body)["error"]
    assert (status, err["code"], err["status"]) == (answer, answer, state)


@pytest.mark.parametrize(("upstream", "answer", "state"), [
    # https://ai.google.dev/gemini-api/docs/troubleshooting: 500 INTERNAL "An unexpected error
    # occurred on Google's side"; 503 UNAVAILABLE "The service may be temporarily overloaded or down".
    (500, 500, "INTERNAL"), (501, 500, "INTERNAL"), (502, 503, "UNAVAILABLE"), (503, 503, "UNAVAILABLE"),
    (529, 503, "UNAVAILABLE"), (429, 503, "UNAVAILABLE"), (504, 504, "DEADLINE_EXCEEDED"),
    (408, 504, "DEADLINE_EXCEEDED"),
])  # fmt: skip
def test_a_translated_outage_takes_the_status_google_gives_what_the_upstream_said(
    upstream: int, answer: int, state: str
) -> None:
    """A chat upstream's 500 is INTERNAL, not UNAVAILABLE (audit E)."""
    c = Classification.of(ErrorType.PROVIDER_UNAVAILABLE, message="boom")
    status, body = GEMINI.foreign_error(ForeignError(upstream, c, "chat", upstream, b"{}", None, None), "req1")
    err = json.loads(body)["error"]
    assert (status, err["code"], err["status"], err["message"]) == (answer, answer, state, "boom")


def test_a_missing_key_tells_a_gemini_client_how_gemini_clients_send_one() -> None:
    ring = KeyRing({digest("gk-1"): KeySpec("k")})
    missing = ClientAuth(ring).check({})
    assert "x-goog-api-key" in missing.message_for("gemini") and "?key=" in missing.message_for("gemini")
    assert "Authorization" not in missing.message_for("gemini")
    assert "Authorization: Bearer" in missing.message_for("chat") and "x-api-key" in missing.message_for("messages")


def test_an_upstream_overflow_reads_as_geminis_own() -> None:
    c = Classification.of(ErrorType.CONTEXT_OVERFLOW)
    e = ForeignError(400, c, "chat", 400, b'{"error": {"message": "too long"}}', 150000, 131072)
    status, body = GEMINI.foreign_error(e, "req1")
    err = json.loads(body)["error"]
    assert status == 400 and err["status"] == "INVALID_ARGUMENT"
    assert err["message"] == "The input token count (150000) exceeds the maximum number of tokens allowed (131072)."
    assert err["x_llm_upstream"] == {"api": "chat", "status": 400, "body": {"error": {"message": "too long"}}}


def test_v1beta_and_gemini_callers_get_googles_envelope() -> None:
    assert dialect_for_errors("/v1beta/models/x:embedContent", False) is GEMINI
    assert dialect_for_errors("/v1/models", False, gemini_caller=True) is GEMINI
    assert dialect_for_errors("/v1/models", False) is not GEMINI


def test_reader_of_a_gemini_stream() -> None:
    r = GeminiStreamReader()
    r.track()
    first = b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":"Hi"}]},"index":0}]}\r\n\r\n'
    last = (b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":"!"}]},"finishReason":"STOP"}],'
            b'"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":3,"thoughtsTokenCount":2,'
            b'"cachedContentTokenCount":4,"totalTokenCount":15}}\r\n\r\n')  # fmt: skip
    assert r.kind(first, committed=False) is EventKind.VISIBLE
    assert r.kind(last, committed=True) is EventKind.FINAL
    assert r.usage == {"prompt": 10, "completion": 5, "cache_read": 4}
    assert r.partial() == "Hi!"
    error = b'data: {"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}\r\n\r\n'
    assert r.kind(error, committed=True) is EventKind.ERROR and r.error is not None
    assert r.kind(b"data: {not json\r\n\r\n", committed=True) is EventKind.ERROR


def test_an_error_google_wrote_bare_mid_stream_is_read_as_an_error() -> None:
    """Google writes a mid-stream error as bare, pretty-printed JSON with no ``data:``
    (googleapis/python-genai#1162): read as a comment, a 429's stream was retried as a broken
    connection six times and its words lost (audit)."""
    r = GeminiStreamReader()
    bare = (b'{\n  "error": {\n    "code": 429,\n    "message": "Resource exhausted. Please try again later.",\n'
            b'    "status": "RESOURCE_EXHAUSTED"\n  }\n}\r\n\r\n')  # fmt: skip
    assert r.kind(bare, committed=False) is EventKind.ERROR
    assert r.error is not None and r.error["error"]["code"] == 429
    # Comments and other bare lines stay what they were.
    r = GeminiStreamReader()
    assert r.kind(b": keep-alive\r\n\r\n", committed=False) is EventKind.CONTENTLESS
    assert r.kind(b'{"candidates": []}\r\n\r\n', committed=False) is EventKind.CONTENTLESS
    assert r.kind(b"{not json\r\n\r\n", committed=True) is EventKind.VISIBLE and r.error is None


def test_an_event_is_compact_utf8_json_between_crlf_pairs_whatever_its_text_holds() -> None:
    doc = {"candidates": [{"content": {"role": "model", "parts": [{"text": "héllo ✓"}]}, "index": 0}]}
    assert sse_event(doc) == b"data: " + json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode() + b"\r\n\r\n"
    # A lone surrogate (json reads "\ud800") has no UTF-8 form: written escaped, not a crash.
    odd = {"candidates": [{"content": {"parts": [{"text": "a\ud800"}]}}]}
    assert json.loads(sse_event(odd)[6:]) == odd
    # An answer only json could read (NaN) is written back as it was read, not as null.
    lenient = Lenient({"usageMetadata": {"x": float("nan")}})
    assert b"NaN" in sse_event(lenient)


def test_tool_output_cap_cuts_function_response_output_and_keeps_the_pair() -> None:
    big = "line\n" * 20000
    payload = {"contents": [
        {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "read_file", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "read_file", "response": {"output": big}}}]},
    ]}  # fmt: skip
    capped, count = GEMINI.cap_tool_outputs(payload, 500)
    assert count == 1 and capped is not None
    fr = capped["contents"][1]["parts"][0]["functionResponse"]
    assert (fr["id"], fr["name"]) == ("c1", "read_file") and len(fr["response"]["output"]) < len(big) // 5
    assert payload["contents"][1]["parts"][0]["functionResponse"]["response"]["output"] is big  # untouched


def test_tool_output_policy_excludes_by_the_responses_own_name() -> None:
    payload = {"contents": [{"role": "user", "parts": [
        {"functionResponse": {"name": "grep_search", "response": {"output": "x" * 40000}}}]}]}  # fmt: skip
    policy = ToolOutputPolicy((ToolRule.of("grep_search", max_tokens=100, oversized="exclude"),))
    out, tally = GEMINI.tool_outputs(payload, policy, Stage("upfront", project=True, cut=True, exclude=True, window=None))
    assert out is not None and tally.excluded == 1
    response = out["contents"][0]["parts"][0]["functionResponse"]["response"]
    assert list(response) == ["error"] and "grep_search" in response["error"]


def test_a_key_in_the_query_is_a_credential() -> None:
    ring = KeyRing({digest("gw-key"): KeySpec("team-a")})
    assert ring.identify({}, "gw-key").outcome == "ok"
    assert ring.identify({}, "other").outcome == "invalid"
    assert ring.identify({}).outcome == "missing"


def _loop(turns: int, output: str, ask: str = "fix the bug", first: int = 0) -> list[dict[str, Any]]:
    """A Gemini CLI-shaped tool loop: each step a signed call and its answered output."""
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": ask}]}]
    for i in range(first, first + turns):
        call = {"functionCall": {"name": "read_file", "args": {"path": f"f{i}.py"}, "id": f"c{i}"},
                "thoughtSignature": f"sig{i}"}  # fmt: skip
        answer = {"functionResponse": {"name": "read_file", "id": f"c{i}", "response": {"output": output}}}
        contents += [{"role": "model", "parts": [call]}, {"role": "user", "parts": [answer]}]
    return contents


def _pairs_valid(contents: list[dict[str, Any]]) -> bool:
    """Every functionCall turn is followed by the turn answering each of its ids, and back."""
    for i, content in enumerate(contents):
        calls = [p["functionCall"]["id"] for p in content["parts"] if "functionCall" in p]
        if calls:
            nxt = contents[i + 1]["parts"] if i + 1 < len(contents) else []
            if [p["functionResponse"]["id"] for p in nxt if "functionResponse" in p] != calls:
                return False
        answers = [p for p in content["parts"] if "functionResponse" in p]
        if answers and (i == 0 or not any("functionCall" in p for p in contents[i - 1]["parts"])):
            return False
    return True


def test_an_overflowing_gemini_request_is_compressed_in_its_own_shape() -> None:
    contents = _loop(12, "x" * 20000) + _loop(2, "ok", "now the tests", first=12)
    payload = {"systemInstruction": {"parts": [{"text": "You are Gemini CLI."}]}, "contents": contents,
               "generationConfig": {"temperature": 0}, "model": "gemini-2.5-pro", "stream": True}  # fmt: skip
    message = "The input token count (80000) exceeds the maximum number of tokens allowed (40000)."
    result = GEMINI.compress(payload, error_message=message, context_window=None)
    assert result.outcome == "applied" and result.payload is not None, result.report
    out = result.payload
    assert out["systemInstruction"] == payload["systemInstruction"]  # instructions untouched
    assert out["model"] == "gemini-2.5-pro" and out["stream"] is True and out["generationConfig"] == {"temperature": 0}
    kept = out["contents"]
    assert len(kept) < len(contents) and _pairs_valid(kept)
    assert kept[0]["role"] == "user"  # the note about what was removed opens the conversation
    # The current step comes back verbatim, its signature with it; the first request is left alone.
    assert kept[-5:] == contents[-5:] and contents[:25] == _loop(12, "x" * 20000)
    assert result.estimated_after < result.estimated_before


def test_one_huge_output_in_the_current_step_is_cut_not_dropped() -> None:
    contents = _loop(1, "line\n" * 60000)
    result = GEMINI.compress({"contents": contents}, error_message=None, context_window=20000)
    assert result.payload is not None, result.report
    kept = result.payload["contents"]
    assert _pairs_valid(kept)
    output = kept[-1]["parts"][0]["functionResponse"]["response"]["output"]
    assert "truncated by llm-gateway" in output and len(output) < 300000
    assert kept[-2] == contents[-2]  # the call, its args and its signature unchanged


REQUESTS = Path(__file__).resolve().parents[2] / "corpus" / "requests"


def _captured(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((REQUESTS / name).read_text())["body"]
    return body


def _parallel_reads(outputs: list[str]) -> dict[str, Any]:
    """Gemini CLI's captured tool round (tests/corpus/requests/gemini-cli-0.61-tool-result.json),
    its one call and answer made several in one turn, as the CLI sends parallel calls: the
    captured directory listing first, then ``outputs``."""
    body = _captured("gemini-cli-0.61-tool-result.json")
    [call] = body["contents"][1]["parts"]
    [answer] = body["contents"][2]["parts"]
    calls, answers = [call], [answer]
    for i, output in enumerate(outputs):
        fid = f"read_file_{i}"
        calls.append({**call, "functionCall": {"id": fid, "args": {"file_path": f"f{i}"}, "name": "read_file"}})
        answers.append({"functionResponse": {"name": "read_file", "response": {"output": output}, "id": fid}})
    body["contents"][1] = {**body["contents"][1], "parts": calls}
    body["contents"][2] = {**body["contents"][2], "parts": answers}
    return body


def test_parallel_outputs_in_one_turn_keep_the_small_ones_whole_beside_a_huge_one() -> None:
    log = "2026-11-30 log line with details\n" * 6000  # ~200 KB
    config = "".join(f"setting_{i} = value_{i}\n" for i in range(200))  # ~4.5 KB
    body = _parallel_reads([log, config])
    listing = body["contents"][2]["parts"][0]  # 72 bytes, as the CLI sent it
    result = GEMINI.compress(body, error_message=None, context_window=25000)
    assert result.payload is not None, result.report
    kept = result.payload["contents"]
    assert _pairs_valid(kept) and kept[:2] == body["contents"][:2]
    small_listing, big, small_config = kept[2]["parts"]
    # Split in proportion, the config lost 60 % of its lines and the listing came back longer,
    # its middle the marker; the room is shared as separate chat tool messages share it.
    assert small_listing == listing
    assert small_config["functionResponse"]["response"]["output"] == config
    cut = big["functionResponse"]["response"]["output"]
    assert "truncated by llm-gateway" in cut and len(cut) < len(log) // 2
    assert result.estimated_after <= result.target_tokens


def test_a_genai_result_is_cut_in_a_rescue_as_an_output_is() -> None:
    """google-genai's automatic function calling answers ``{"result": ...}``
    (tests/corpus/requests/genai-3.6-function-response.json); a string one is cut like
    Gemini CLI's ``output``, an object one as its JSON text, which goes as the ``output``
    text, and the pair stays whole."""
    body = _captured("genai-3.6-function-response.json")
    rows = {"rows": [{"id": n, "name": "x" * 30} for n in range(1500)]}
    for value in ("line of file content with some words\n" * 2000, rows):
        contents = copy.deepcopy(body["contents"])
        contents[2]["parts"][0]["functionResponse"]["response"] = {"result": value}
        payload = {**body, "contents": contents}
        result = GEMINI.compress(payload, error_message=None, context_window=8000)
        assert result.outcome == "applied" and result.payload is not None, result.report
        kept = result.payload["contents"]
        assert kept[:2] == contents[:2] and result.payload["generationConfig"] == body["generationConfig"]
        fr = kept[2]["parts"][0]["functionResponse"]
        slot = "result" if isinstance(value, str) else "output"
        assert fr["name"] == "get_weather" and list(fr["response"]) == [slot]
        text = fr["response"][slot]
        whole = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        assert isinstance(text, str) and "truncated by llm-gateway" in text and len(text) < len(whole) // 2
        assert text.startswith(whole[:200]) and text.endswith(whole[-200:])


def test_the_tool_policy_reads_a_genai_result_object_as_json() -> None:
    body = _captured("genai-3.6-function-response.json")
    rows = {"rows": [{"id": n, "name": "x" * 30} for n in range(1500)], "total": 1500}
    body["contents"][2]["parts"][0]["functionResponse"]["response"] = {"result": rows}
    upfront = Stage("upfront", project=True, cut=True, exclude=True, window=None)
    projecting = ToolOutputPolicy((ToolRule.of("get_weather", project="total"),))
    out, tally = GEMINI.tool_outputs(body, projecting, upfront)
    assert out is not None and tally.projected == 1
    assert out["contents"][2]["parts"][0]["functionResponse"]["response"] == {"result": 1500}  # JSON again
    excluding = ToolOutputPolicy((ToolRule.of("get_weather", max_tokens=100, oversized="exclude"),))
    out, tally = GEMINI.tool_outputs(body, excluding, upfront)
    assert out is not None and tally.excluded == 1
    response = out["contents"][2]["parts"][0]["functionResponse"]["response"]
    assert list(response) == ["error"] and "get_weather" in response["error"]
    capped, count = GEMINI.cap_tool_outputs(body, 500)  # cut, it is text: the function's output
    assert capped is not None and count == 1
    response = capped["contents"][2]["parts"][0]["functionResponse"]["response"]
    assert list(response) == ["output"] and "truncated by llm-gateway" in response["output"]
    assert body["contents"][2]["parts"][0]["functionResponse"]["response"] == {"result": rows}  # untouched
