"""Tracing's switch and its pure attribute builders."""

import json

import pytest

from gateway.config import TracingConfig
from gateway.tracing import NO_TRACING, build_tracing, summary, wanted
from gateway.tracing.attrs import (
    CONTENT_MAX,
    compression_attrs,
    input_content,
    provider_name,
    redact,
    response_attrs,
    stream_identity,
)


def test_off_unless_config_or_an_otlp_endpoint_says_on() -> None:
    off = TracingConfig()
    assert not wanted(off, {})
    assert wanted(off, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wanted(off, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert not wanted(off, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"})
    assert wanted(TracingConfig(enabled=True), {})
    assert not wanted(TracingConfig(enabled=False), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    # The standard kill switch wins over everything.
    assert not wanted(TracingConfig(enabled=True), {"OTEL_SDK_DISABLED": "true"})
    assert build_tracing(off, lambda: 0.0, {}) is NO_TRACING


def test_the_started_line_says_where_spans_go_and_how_many_without_credentials() -> None:
    off = TracingConfig()
    assert summary(off, {}) == "off"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:t0ken@collector.example:4318/?api_key=t0ken"}
    assert summary(off, env) == {"endpoint": "https://collector.example:4318/v1/traces", "sample_ratio": 1.0}
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://[::1]:4318/custom", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
           "OTEL_TRACES_SAMPLER_ARG": "0.1", "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer t0ken"}
    assert summary(off, env) == {"endpoint": "http://[::1]:4318/custom", "sample_ratio": 0.1}
    assert summary(off, {**env, "OTEL_TRACES_SAMPLER": "always_off"})["sample_ratio"] == 0.0  # type: ignore[index]
    on = TracingConfig(enabled=True, endpoint="http://c:4318/", sample_ratio=0.25)
    assert summary(on, env) == {"endpoint": "http://c:4318/v1/traces", "sample_ratio": 0.25}
    assert summary(TracingConfig(enabled=True), {}) == {"endpoint": "http://localhost:4318/v1/traces", "sample_ratio": 1.0}
    assert "t0ken" not in repr([summary(off, e) for e in (env,)])


def test_on_builds_an_sdk_tracer_with_the_service_name_from_config_or_env() -> None:
    t = build_tracing(TracingConfig(enabled=True, endpoint="http://127.0.0.1:1"), lambda: 0.0, {})
    assert t.enabled
    assert t.provider.resource.attributes["service.name"] == "llm-gateway"  # type: ignore[attr-defined]
    t2 = build_tracing(TracingConfig(enabled=True), lambda: 0.0,
                       {"OTEL_SERVICE_NAME": "edge-gw", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"})
    assert t2.provider.resource.attributes["service.name"] == "edge-gw"  # type: ignore[attr-defined]
    t.provider.shutdown()  # type: ignore[attr-defined]
    t2.provider.shutdown()  # type: ignore[attr-defined]


def test_provider_is_the_host_when_known_else_the_api_spoken() -> None:
    assert provider_name("api.anthropic.com", "messages") == "anthropic"
    assert provider_name("api.openai.com", "chat") == "openai"
    assert provider_name("myres.openai.azure.com", "chat") == "azure.ai.openai"
    assert provider_name("127.0.0.1", "messages") == "anthropic"
    assert provider_name("vllm.internal", "chat") == "openai"


def test_response_identity_and_finish_reasons_in_all_three_apis() -> None:
    chat = b'{"id":"c1","model":"m","choices":[{"finish_reason":"length"}]}'
    assert response_attrs(chat) == {"gen_ai.response.id": "c1", "gen_ai.response.model": "m",
                                    "gen_ai.response.finish_reasons": ["length"]}
    msg = b'{"id":"msg_1","type":"message","model":"claude","stop_reason":"end_turn"}'
    assert response_attrs(msg)["gen_ai.response.finish_reasons"] == ["end_turn"]
    resp = b'{"id":"resp_1","object":"response","model":"gpt-5","status":"completed"}'
    assert response_attrs(resp)["gen_ai.response.finish_reasons"] == ["completed"]
    assert response_attrs(b"not json") == {}
    start = b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_2","model":"claude"}}\n\n'
    assert stream_identity([start]) == {"gen_ai.response.id": "msg_2", "gen_ai.response.model": "claude"}
    created = b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_2","model":"g"}}\n\n'
    assert stream_identity([created])["gen_ai.response.id"] == "resp_2"


def test_compression_result_is_known_once_the_request_is_answered() -> None:
    report = {"outcome": "applied", "estimated_before": 20000, "estimated_after": 9000, "messages_removed": 12}
    a = compression_attrs(report, 200, "numbers:requested 20000 > window 16000")
    assert a["llm_gateway.compression.result"] == "success"
    assert a["llm_gateway.compression.tokens_before"] == 20000 and a["llm_gateway.compression.tokens_after"] == 9000
    assert a["llm_gateway.compression.detector"].startswith("numbers:")
    assert compression_attrs({"outcome": "still_overflow"}, 400, None)["llm_gateway.compression.result"] == "second_overflow"
    assert compression_attrs(report, 503, None)["llm_gateway.compression.result"] == "other_error"
    assert "llm_gateway.compression.result" not in compression_attrs(report, None, None)


def test_captured_content_has_key_like_strings_masked() -> None:
    text = redact(b'{"content":"use sk-ant-api03-abcdefghijkl and Bearer abcdefghijkl0123, api_key: \\"s3cr3tvalue\\""}')
    assert "sk-ant" not in text and "abcdefghijkl0123" not in text and "s3cr3tvalue" not in text
    assert text.count("[redacted]") == 3


# Each shape as its issuer documents it; the values are made up to that shape, but for AWS's
# documented example secret and jwt.io's example token.
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2"
       "MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")


@pytest.mark.parametrize(("said", "secret"), [
    ("my key is AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY ok", "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    ("git push with ghp_16C7e42F292c6912E7710c838347Ae178B4a ok", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("oauth gho_16C7e42F292c6912E7710c838347Ae178B4a ok", "gho_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("fine-grained github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz0123456789 ok",
     "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz0123456789"),
    ("slack xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUv ok", "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUv"),
    ("slack xoxp-1234567890-0987654321-AbCdEf ok", "xoxp-1234567890-0987654321-AbCdEf"),
    ("run with llmgw_qx0_7mfa-3kz9p2lbw8c1r5t6yd4ne0hgsuvjio7a2xk ok", "qx0_7mfa-3kz9p2lbw8c1r5t6yd4ne0hgsuvjio7a2xk"),
    ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY ok", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    (f"Authorization is {JWT} ok", JWT.split(".")[2]),
    ("DATABASE_URL=postgres://app:s3cr3t-pw@db.internal:5432/app ok", "s3cr3t-pw"),
    ("clone https://bob:tok3nvalue@git.example.com/r.git ok", "tok3nvalue"),
    ("db_password: hunter2hunter2", "hunter2hunter2"),
])  # fmt: skip
def test_captured_content_masks_each_secret_shape(said: str, secret: str) -> None:
    text = redact(said.encode())
    assert secret not in text and "[redacted]" in text and text.endswith(" ok") == said.endswith(" ok")


def test_captured_content_keeps_what_only_looks_like_a_secret() -> None:
    for said in ("a token of thanks", "the password policy", "see https://example.com:8443/path@v2",
                 "AIza is short here", "ghp_short", "eyJ not a token"):  # fmt: skip
        assert redact(said.encode()) == said



def test_counts_named_like_tokens_are_not_masked() -> None:
    """A prompt about the API itself says max_tokens; captured JSON stays JSON (review: the name
    pattern's free suffix masked `max_tokens: 1024` and mangled `{"max_tokens": 4096}`)."""
    for said in ("max_tokens: 1024", '{"max_tokens": 4096}', "Set num_tokens=2048", "input_tokens=5000",
                 "token_count: 5000"):  # fmt: skip
        assert redact(said.encode()) == said
    for said in ("token: abcdefgh", "api_key=12345678", "Authorization: Bearer abcdefghijkl"):
        assert redact(said.encode()) == "[redacted]", said


def test_long_runs_without_a_secret_come_back_whole() -> None:
    """Scanned from every boundary of a long dotted run, the URL-password pattern was quadratic:
    72 s of a frozen event loop for a 66 KB prompt of `example.com.` (review)."""
    for said in ("example.com." * 5500, "a-" * 32000, "token-" * 11000):
        assert redact(said.encode()) == said[:CONTENT_MAX]

def test_the_gateways_own_keys_and_credential_members_are_masked() -> None:
    own = "lmstudio-local-7f3a9c"  # no known shape: only knowing it finds it
    assert redact(f"the key is {own}.".encode(), (own,)) == "the key is [redacted]."
    [msg] = json.loads(input_content({"messages": [{"role": "user", "content": f"use {own}"}]}, "chat", (own,))
                       ["gen_ai.input.messages"])  # fmt: skip
    assert own not in json.dumps(msg)
    args = {"messages": [{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "login", "arguments": json.dumps({"credential": "pa55word-x", "user": "bob"})}}]}]}
    assert "pa55word-x" not in input_content(args, "chat")["gen_ai.input.messages"]


def test_a_log_line_written_inside_a_request_names_its_span() -> None:
    import logging

    from opentelemetry import context, trace

    from gateway.logs import JsonFormatter
    from tests.spans import in_memory

    tracing, _ = in_memory()
    record = logging.LogRecord("gateway.decisions", logging.DEBUG, __file__, 1, {"event": "retry"}, None, None)
    assert "trace_id" not in JsonFormatter().format(record)
    span = tracing.tracer.start_span("POST /v1/chat/completions")
    token = context.attach(trace.set_span_in_context(span))
    try:
        line = JsonFormatter().format(record)
    finally:
        context.detach(token)
        span.end()
    ctx = span.get_span_context()
    assert f'"trace_id":"{ctx.trace_id:032x}","span_id":"{ctx.span_id:016x}"' in line


def test_the_tool_output_report_is_flattened_counts_only() -> None:
    from gateway.tracing.attrs import tool_output_attrs

    report = {"upfront": {"projected": 2, "excluded": 1, "cut": 0, "projection_fallbacks": {"not_json": 1}},
              "rescue": {"projected": 0, "excluded": 3, "cut": 1}}
    assert tool_output_attrs(report) == {
        "llm_gateway.tool_outputs.upfront.projected": 2, "llm_gateway.tool_outputs.upfront.excluded": 1,
        "llm_gateway.tool_outputs.upfront.projection_fallbacks.not_json": 1,
        "llm_gateway.tool_outputs.rescue.excluded": 3, "llm_gateway.tool_outputs.rescue.cut": 1,
    }


def test_the_traces_path_goes_onto_the_endpoints_path_not_after_its_query() -> None:
    from gateway.tracing.otel import traces_url

    assert traces_url("http://c:4318") == traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert traces_url("https://c/otlp/?token=abc") == "https://c/otlp/v1/traces?token=abc"
