"""Errors in OpenAI's envelope (chat completions and Responses): the gateway's own, a translated
upstream's, and the chunk that ends a broken chat stream, each with the ``type`` OpenAI gives
that class of error (its 429s in tests/corpus/openai.json: ``requests`` / ``tokens`` with code
``rate_limit_exceeded``, ``insufficient_quota``; 401 ``invalid_request_error``; 5xx
``server_error``), and every member OpenAI's envelope has."""

from __future__ import annotations

import json

import pytest

from gateway.apis import OPENAI_CHAT, OPENAI_RESPONSES
from gateway.apis.base import Ending, ForeignError
from gateway.errors import Classification, ErrorType
from gateway.translate.base import Context
from gateway.translate.chat_gemini.answer import ChatStream as FromGemini
from gateway.translate.chat_messages.answer import ChatStream as FromMessages
from gateway.translate.chat_responses.stream import ChatStream as FromResponses

RATE, BUDGET, AUTH = ErrorType.RATE_LIMIT, ErrorType.BUDGET, ErrorType.AUTH
DOWN, OVERFLOW, UNKNOWN = ErrorType.PROVIDER_UNAVAILABLE, ErrorType.CONTEXT_OVERFLOW, ErrorType.UNKNOWN

# (status, class, the gateway's code, the message) -> OpenAI's type; the code is kept as made.
GATEWAY_MADE = [
    (400, UNKNOWN, "invalid_json", "the request body is not valid JSON", "invalid_request_error"),
    (401, AUTH, "missing_client_key", "this gateway requires a key", "invalid_request_error"),
    (401, AUTH, "invalid_client_key", "the gateway key is not valid", "invalid_request_error"),
    (402, BUDGET, "budget_exhausted", "key 'k' spent its budget", "insufficient_quota"),
    (402, BUDGET, "pool_budget", "every deployment of pool 'p' is out of credit", "insufficient_quota"),
    (403, AUTH, "model_not_allowed", "key 'k' may not use model 'm'", "invalid_request_error"),
    (404, UNKNOWN, "model_not_found", "no upstream is configured for model 'm'", "invalid_request_error"),
    (408, UNKNOWN, "request_timeout", "the request body did not arrive within 1s", "invalid_request_error"),
    (413, UNKNOWN, "request_too_large", "request body is larger than the limit", "invalid_request_error"),
    (415, UNKNOWN, "unsupported_content_encoding", "unsupported Content-Encoding 'br'", "invalid_request_error"),
    (429, RATE, "key_requests_per_minute", "key 'k' sent its 3 requests of this minute", "requests"),
    (429, RATE, "key_tokens_per_minute", "key 'k' used its tokens of this minute", "tokens"),
    (429, RATE, "key_parallel_limit", "key 'k' has 2 requests in flight", "requests"),
    (429, RATE, "key_budget_held", "requests in flight hold the rest of the budget", "requests"),
    (429, RATE, "pool_rate_limited", "every deployment of pool 'p' is rate limited", "requests"),
    # An upstream's error event answered in the envelope: the code says nothing, the words do.
    (429, RATE, "rate_limit_exceeded", "Rate limit reached on tokens per min (TPM): Limit 30000", "tokens"),
    (429, RATE, "rate_limit_exceeded", "Rate limit reached on requests per min (RPM): Limit 3", "requests"),
    (500, UNKNOWN, "internal_error", "internal gateway error", "server_error"),
    (502, DOWN, "upstream_unreachable", "could not connect to the upstream", "server_error"),
    (502, AUTH, "upstream_auth", "the provider refused the gateway's key", "server_error"),
    (502, AUTH, "pool_auth", "every deployment of pool 'p' is refused", "server_error"),
    (503, DOWN, "circuit_open", "upstream 'u' is failing; its circuit is open", "server_error"),
    (504, DOWN, "upstream_timeout", "the upstream did not respond in time", "server_error"),
]  # fmt: skip


@pytest.mark.parametrize("dialect", [OPENAI_CHAT, OPENAI_RESPONSES], ids=["chat", "responses"])
@pytest.mark.parametrize(("status", "kind", "code", "message", "type_"), GATEWAY_MADE)
def test_gateway_made_errors_take_openais_type_and_keep_the_gateways_code(
    dialect: object, status: int, kind: ErrorType, code: str, message: str, type_: str
) -> None:
    c = Classification.of(kind)
    assert dialect.error_status(status, code) == status  # type: ignore[attr-defined]
    doc = json.loads(dialect.error_body(status, message, code, c, "req-1"))  # type: ignore[attr-defined]
    assert doc == {"error": {"message": message, "type": type_, "param": None, "code": code,
                             "x_llm_error_type": kind.value, "retryable": kind.retryable}}  # fmt: skip


def _foreign(status: int, kind: ErrorType, message: str) -> ForeignError:
    c = Classification.of(kind, message=message)
    return ForeignError(status, c, "messages", status, b"{}", None, None)


@pytest.mark.parametrize(("status", "kind", "message", "answer", "type_", "code"), [
    (429, RATE, "This request would exceed your organization's rate limit of 50,000 input tokens per minute",
     429, "tokens", "rate_limit_exceeded"),
    (429, RATE, "Number of requests has exceeded your per-minute rate limit", 429, "requests", "rate_limit_exceeded"),
    (402, BUDGET, "Your credit balance is too low", 402, "insufficient_quota", "insufficient_quota"),
    (401, AUTH, "invalid x-api-key", 401, "invalid_request_error", "invalid_api_key"),
    (529, DOWN, "Overloaded", 529, "server_error", "server_error"),
    # Capacity said on a 429 (classification.md): a provider's trouble, not the caller's rate.
    (429, DOWN, "Service tier capacity exceeded for this model", 429, "server_error", "server_error"),
    (404, UNKNOWN, "model: claude-x", 404, "invalid_request_error", "invalid_request_error"),
])  # fmt: skip
def test_translated_upstream_errors_take_openais_type_for_their_class(
    status: int, kind: ErrorType, message: str, answer: int, type_: str, code: str
) -> None:
    got_status, body = OPENAI_CHAT.foreign_error(_foreign(status, kind, message), "req-1")
    err = json.loads(body)["error"]
    assert (got_status, err["type"], err["code"], err["param"]) == (answer, type_, code, None)


@pytest.mark.parametrize(("kind", "code", "type_"), [
    (DOWN, "stream_broken", "server_error"),
    (UNKNOWN, "server_error", "server_error"),
    (RATE, "rate_limit_exceeded", "requests"),
    (BUDGET, "insufficient_quota", "insufficient_quota"),
    (OVERFLOW, "context_length_exceeded", "invalid_request_error"),
    (AUTH, "invalid_api_key", "invalid_request_error"),
])  # fmt: skip
def test_the_chunk_ending_a_broken_chat_stream_takes_openais_type(kind: ErrorType, code: str, type_: str) -> None:
    raw = OPENAI_CHAT.reader(False).broken(Ending(Classification.of(kind), "it broke", code), "rid", "m")
    doc = json.loads(raw.split(b"data: ", 1)[1])
    assert doc["error"]["type"] == type_ and doc["error"]["code"] == code
    assert doc["choices"] == [{"index": 0, "delta": {}, "finish_reason": "error"}]


def _chunk_doc(raw: bytes) -> dict:
    return json.loads(raw.split(b"data: ", 1)[1])


def test_the_chunk_ending_a_relayed_chat_stream_keeps_the_streams_created() -> None:
    """OpenAI's chunk object: "Each chunk has the same timestamp"; the gateway's last chunk
    too, however long after the stream's first it is written."""
    reader = OPENAI_CHAT.reader(False)
    first = (b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m",'
             b'"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n')
    reader.kind(first, committed=False)
    end = _chunk_doc(reader.broken(Ending(Classification.of(DOWN), "stalled", "idle_timeout"), "rid", "m"))
    assert (end["id"], end["created"], end["model"]) == ("chatcmpl-1", 1700000000, "m")


def test_a_translated_chat_stream_ends_with_the_created_of_its_chunks() -> None:
    ending = Ending(Classification.of(DOWN), "cut", "stream_broken")
    for stream_of in (FromGemini, FromMessages, FromResponses):
        s = stream_of(Context("m", {"model": "m", "messages": []}, "rid"), 1700000000)
        end = _chunk_doc(s.broken(ending))
        assert (end["id"], end["created"]) == (s.base["id"], 1700000000), stream_of


_REGION = {"error": {"code": "unsupported_country_region_territory", "message": "Country, region, or territory not supported",
                     "param": None, "type": "request_forbidden"}}  # tests/corpus/openai.json  # fmt: skip
_BAD_KEY = {"error": {"message": "Incorrect API key provided: sk-abc***xyz.", "type": "invalid_request_error",
                      "param": None, "code": "invalid_api_key"}}  # fmt: skip
_NO_KEY = {"error": {"message": "You didn't provide an API key.", "type": "invalid_request_error", "param": None,
                     "code": None}}  # fmt: skip
_ANTHROPIC_403 = {"type": "error", "error": {"type": "permission_error",
                                             "message": "Your API key does not have permission to use the specified resource."}}  # fmt: skip


@pytest.mark.parametrize(("api", "status", "body", "provider_code", "answer", "code"), [
    # An OpenAI-speaking upstream's own code goes on, whatever the status.
    ("chat", 403, _REGION, "unsupported_country_region_territory", 403, "unsupported_country_region_territory"),
    ("responses", 403, _REGION, "unsupported_country_region_territory", 403, "unsupported_country_region_territory"),
    ("chat", 401, _BAD_KEY, "invalid_api_key", 401, "invalid_api_key"),
    # No code of its own: OpenAI's for the status, not the type that stood in as provider_code.
    ("chat", 401, _NO_KEY, "invalid_request_error", 401, "invalid_api_key"),
    ("chat", 403, {"error": {"message": "Forbidden", "type": "invalid_request_error", "code": None}},
     "invalid_request_error", 403, "request_forbidden"),
    # Another API's: a 401 is OpenAI's invalid_api_key; a 403 keeps the provider's code.
    ("messages", 401, {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}},
     "authentication_error", 401, "invalid_api_key"),
    ("messages", 403, _ANTHROPIC_403, "permission_error", 403, "permission_error"),
    ("gemini", 403, {"error": {"code": 403, "message": "The caller does not have permission",
                               "status": "PERMISSION_DENIED"}}, "PERMISSION_DENIED", 403, "PERMISSION_DENIED"),
    ("gemini", 400, {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                               "status": "INVALID_ARGUMENT"}}, "INVALID_ARGUMENT", 401, "invalid_api_key"),
    ("messages", 403, "<html>403 Forbidden</html>", None, 403, "request_forbidden"),
])  # fmt: skip
def test_a_translated_auth_error_keeps_the_providers_code_and_says_a_403_is_no_bad_key(
    api: str, status: int, body: object, provider_code: str | None, answer: int, code: str
) -> None:
    """Audit E: every translated auth error was code invalid_api_key, a region refusal and a
    permission_error too, which tells the client its key is wrong."""
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    c = Classification.of(AUTH, provider_code=provider_code, message="refused")
    for dialect in (OPENAI_CHAT, OPENAI_RESPONSES):
        got, out = dialect.foreign_error(ForeignError(status, c, api, status, raw, None, None), "req-1")
        err = json.loads(out)["error"]
        assert (got, err["code"], err["type"]) == (answer, code, "invalid_request_error")

