"""The error of the gateway's ``response.failed``: a code typed clients and Codex read, the
gateway's own beside it (audit: ``stream_broken`` and ``overloaded_error`` were the code)."""

from typing import get_args

import pytest
from openai.types.responses.response_error import ResponseError

from gateway.apis.base import Ending
from gateway.apis.responses.failed import (
    CODEX_CODES,
    SCHEMA_CODES,
    failed_code,
    failed_error,
    failed_response,
)
from gateway.errors import Classification, ErrorType
from tests.corpus_cases import IN_SAMPLE, classify_case


def test_the_schema_codes_are_the_sdks() -> None:
    assert set(get_args(ResponseError.model_fields["code"].annotation)) == SCHEMA_CODES


# The codes the gateway gives a stream it ends (docs/errors/index.md, "Errors inside a stream").
GATEWAY_CODES = ("stream_broken", "reset", "connect", "idle_timeout", "first_byte_timeout", "malformed_event",
                 "event_too_large", "gateway_shutdown")  # fmt: skip


@pytest.mark.parametrize("own", GATEWAY_CODES)
def test_the_gateways_own_codes_go_as_server_error_and_are_kept_beside_it(own: str) -> None:
    c = Classification.of(ErrorType.PROVIDER_UNAVAILABLE)
    error = failed_error(Ending(c, "the upstream's stream ended before its end marker", own))
    assert error["code"] == "server_error" and error["x_llm_code"] == own
    ResponseError.model_validate(error)


@pytest.mark.parametrize(("error_type", "code"), [
    (ErrorType.CONTEXT_OVERFLOW, "context_length_exceeded"),  # Codex: "ran out of room", no retry
    (ErrorType.BUDGET, "insufficient_quota"),  # Codex stops
    (ErrorType.RATE_LIMIT, "rate_limit_exceeded"),
    (ErrorType.PROVIDER_UNAVAILABLE, "server_error"),
    (ErrorType.AUTH, "server_error"),
    (ErrorType.UNKNOWN, "server_error"),
])  # fmt: skip
def test_the_code_is_the_classs(error_type: ErrorType, code: str) -> None:
    assert failed_code("some_provider_code", error_type) == code


def test_a_code_either_reader_knows_is_kept() -> None:
    assert failed_code("invalid_prompt", ErrorType.UNKNOWN) == "invalid_prompt"
    assert failed_code("usage_not_included", ErrorType.BUDGET) == "usage_not_included"


def _case(name: str) -> dict:
    return next(c for c in IN_SAMPLE if c["name"] == name)


@pytest.mark.parametrize(("name", "code"), [
    ("anthropic-stream-event-error-overloaded", "server_error"),
    ("openai-responses-stream-error-servers-overloaded", "server_error"),
    ("openai-responses-stream-failed-context-length-exceeded", "context_length_exceeded"),
])  # fmt: skip
def test_corpus_stream_errors(name: str, code: str) -> None:
    case = _case(name)
    c = classify_case(case)
    error = failed_error(Ending(c, "the upstream reported an error mid-stream", c.provider_code))
    assert error["code"] == code and error["x_llm_code"] == (c.provider_code or c.type.value)
    assert error["code"] in SCHEMA_CODES | CODEX_CODES


def test_the_response_around_it_is_complete_and_failed() -> None:
    created = {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-5", "status": "in_progress",
               "error": None, "output": []}  # fmt: skip
    c = Classification.of(ErrorType.PROVIDER_UNAVAILABLE)
    doc = failed_response(created, Ending(c, "cut", "stream_broken"))
    assert doc["status"] == "failed" and doc["tools"] == [] and doc["tool_choice"] == "auto"
    assert created["status"] == "in_progress" and created["error"] is None  # not changed in place
