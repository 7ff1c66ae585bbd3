"""Every corpus body classifies as expected; every error type and provider has real examples."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from gateway.errors import ErrorType, TransportError
from gateway.policy.classify import RequestFacts, classify, classify_stream_event
from tests.corpus_cases import CORPUS, HELD_OUT, IN_SAMPLE, NOW, body_bytes, classify_case

# The providers and traps the corpus must keep covering (a deleted case fails loudly).
PROVIDERS = {
    "OpenAI", "Azure OpenAI", "Anthropic", "Google Gemini", "Google Gemini (OpenAI-compatible)",
    "AWS Bedrock", "Mistral", "Groq", "DeepSeek", "OpenRouter", "Together", "Fireworks", "xAI",
    "vLLM", "Ollama", "llama.cpp server", "LM Studio", "TGI (Hugging Face)",
    "Cerebras", "Cohere", "Moonshot (Kimi)", "Zhipu (Z.ai / GLM)", "Alibaba DashScope (Qwen)", "MiniMax",
    "NVIDIA NIM (build.nvidia.com)", "Perplexity", "IBM watsonx.ai", "Databricks Model Serving",
    "Google Vertex AI", "Azure AI Foundry (serverless models)", "SGLang", "llama-cpp-python server",
    "llamafile", "KoboldCpp", "LocalAI", "LiteLLM proxy", "SambaNova Cloud", "DeepInfra",
}  # fmt: skip
MIN_CASES, MIN_PROVIDERS = 250, 60
TRAPS = {
    "openai-429-insufficient-quota-is-budget": "a 429 that is budget",
    "gemini-openai-compat-400-generate-mentions-rate": "a 400 that mentions 'rate'",
    "anthropic-413-bytes-is-not-overflow": "a 413 byte limit",
    "nginx-413-html-is-bytes": "a 413 byte limit from a proxy",
    "bedrock-input-too-long": "an overflow with only a message",
    "cohere-too-many-tokens-overflow": "an overflow with no code and no 'context' word",
    "deepseek-402-insufficient-balance": "a 402",
    "openai-403-region-is-auth": "a 403 region error",
    "xai-403-credits-is-budget": "a billing 403",
    "hf-503-model-loading": "a 503 model is loading",
    "llamacpp-loading-503": "a 503 model is loading",
    "gemini-per-day-quota-is-budget": "Gemini per-day RESOURCE_EXHAUSTED",
    "gemini-per-minute-quota-is-rate-limit": "Gemini per-minute RESOURCE_EXHAUSTED",
    "llamacpp-exceed-context-500": "an overflow sent as 500",
    "openrouter-502-deepinfra-overflow-is-overflow": "an overflow sent as 502 by a relay",
    "llamacpp-500-context-size-exceeded-is-overflow": "an overflow under a 500 server_error",
    "llamacpp-500-content-not-string-is-unknown": "a 5xx caused by the request",
    "llama-cpp-python-500-request-validation-is-unknown": "a pydantic request validation error sent as 500",
    "llamacpp-500-plain-json-type-error-is-unknown": "a 5xx that says 'Internal Server Error' yet blames the request",
    "koboldcpp-500-payload-too-big-is-unknown": "a byte limit sent as 500",
    "llamacpp-500-peg-format-is-unavailable": "a 500 about the model's own output: stays retryable",
    "ik-llamacpp-500-kv-size-too-big-is-unavailable": "a 500 that says 'prompt is too big' about a full KV cache",
    "llamacpp-500-input-too-large-for-physical-batch-is-overflow": "an input over the physical batch, as a 500",
    "minimax-500-insufficient-balance-is-budget": "a 5xx that only money fixes",
    "zhipu-429-1113-balance-is-budget": "a 429 that is budget, in Chinese",
    "zai-anthropic-429-rate-limit-type-is-budget": "a rate_limit_error type that is budget",
    "cerebras-429-request-quota-code-is-rate-limit": "a 'quota' code that is a per-minute rate limit",
    "cohere-429-trial-key-per-minute-offers-upgrade-is-rate-limit": "a per-minute 429 that offers an upgrade",
    "cohere-429-trial-key-monthly-calls-is-budget": "a monthly allowance spent, as a 429 that says 'calls / month'",
    "openrouter-402-prompt-tokens-limit-is-budget": "a 402 that counts tokens",
    "chatgpt-codex-429-usage-limit-free-plan-is-budget": "a plan's usage limit that resets days away, as a 429",
    "zai-429-1308-five-hour-limit-english-is-budget": "a 5-hour usage window, as a 429",
    "anthropic-429-extra-usage-required-for-long-context-is-budget": "a rate_limit_error that only money lifts",
    "groq-429-request-bigger-than-tpm-used-zero-is-overflow": "Requested > Limit on a per-minute window, as a 429",
    "github-models-413-tokens-limit-reached-is-overflow": "tokens_limit_reached on a 413",
    "mistral-429-service-tier-capacity-exceeded-is-unavailable": "capacity wording under invalid_request_error on a 429",
    "moonshot-429-engine-overloaded-is-unavailable": "engine overloaded as a 429",
    "openai-responses-400-org-not-verified-for-reasoning-summary-is-auth": "account verification as a 400",
    "grpc-transcoded-429-message-larger-than-max-is-unknown": "a gRPC RESOURCE_EXHAUSTED about bytes",
    "cloudflare-520-html-in-front-of-anthropic": "a CDN error page",
    "anthropic-stream-event-error-overloaded": "an Anthropic event: error",
    "openai-responses-stream-failed-context-length-exceeded": "a Responses response.failed",
    "sglang-stream-error-chunk-overflow": "a chat chunk with error",
    "openrouter-400-raw-crucible-image-limit-is-unknown": "OpenRouter metadata.raw",
}


CASES = IN_SAMPLE  # the rules were written against these
ALL_CASES = CASES + HELD_OUT  # held-out bodies are measured in test_heldout.py
# Every field a case may carry is explained in tests/corpus/README.md ("file" is added on load).
DOCUMENTED_FIELDS = {
    "name", "provider", "origin", "host", "status", "api", "stream", "headers", "body", "expected", "source", "file",
}  # fmt: skip


def test_readme_documents_every_case_field() -> None:
    readme = (CORPUS / "README.md").read_text()
    for field in DOCUMENTED_FIELDS - {"file"}:
        assert f"| `{field}" in readme, field  # "expected" is documented as expected.type, ...


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_corpus_case(case: dict[str, Any]) -> None:
    c = classify_case(case)
    expected = case["expected"]
    assert c.type.value == expected["type"]
    assert c.retryable is c.type.retryable
    if "retry_after_s" in expected:
        assert c.retry_after_s == pytest.approx(expected["retry_after_s"])
        assert c.reset_at_ms == round((NOW + expected["retry_after_s"]) * 1000)
    if "provider_code" in expected:
        assert c.provider_code == expected["provider_code"]
    # Only a 404 naming the model as missing lets a pool try a sibling that may have it.
    assert c.model_missing is expected.get("model_missing", False)


def test_corpus_is_complete() -> None:
    assert len(ALL_CASES) >= MIN_CASES
    assert len({c["provider"] for c in ALL_CASES}) >= MIN_PROVIDERS
    by_type = Counter(c["expected"]["type"] for c in CASES)
    for t in ErrorType:
        assert by_type[t.value] >= 2, f"{t.value} needs corpus examples"
    names = [c["name"] for c in ALL_CASES]
    assert len(names) == len(set(names))
    for c in ALL_CASES:
        assert c["source"].strip(), c["name"]
        assert c["provider"].strip(), c["name"]
        assert all(k == k.lower() for k in c["headers"]), c["name"]
        assert set(c) <= DOCUMENTED_FIELDS, (c["name"], set(c) - DOCUMENTED_FIELDS)
        assert c.get("api", "chat") in ("chat", "messages", "responses"), c["name"]
        assert not c.get("stream") or c["status"] == 200, c["name"]  # an error event after a 200 head
    assert PROVIDERS <= {c["provider"] for c in ALL_CASES}
    assert set(TRAPS) <= set(names)


def test_overflow_message_is_kept_whole_for_compression() -> None:
    case = next(c for c in CASES if c["name"] == "openai-overflow-with-completion")
    c = classify(400, {}, body_bytes(case["body"]), now_s=NOW)
    assert c.message == case["body"]["error"]["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"error": {"message": "m", "code": "x"}}, "m"),  # OpenAI-style
        ({"type": "error", "error": {"type": "t", "message": "m"}}, "m"),  # Anthropic
        ({"message": "m"}, "m"),  # Bedrock, Mistral
        ({"Message": "m"}, "m"),  # AWS capitalised
        ({"error": "m", "error_type": "validation"}, "m"),  # TGI, Ollama, LM Studio
        ({"detail": "m"}, "m"),  # FastAPI / Xinference
        ({"code": "Client specified an invalid argument", "error": "m"}, "m"),  # xAI
        ([{"error": {"code": 400, "message": "m", "status": "INVALID_ARGUMENT"}}], "m"),  # Gemini compat
        ({"error": {"message": "Provider returned error", "metadata": {"raw": "r"}}}, "Provider returned error r"),
        ({"detail": [{"msg": "Field required"}]}, None),
        ({"error": {"message": 42}}, None),
    ],
)
def test_message_is_found_in_every_dialect(body: Any, message: str | None) -> None:
    assert classify(400, {}, body_bytes(body), now_s=NOW).message == message


def test_message_is_capped() -> None:
    c = classify(400, {}, body_bytes({"error": {"message": "x" * 100_000}}), now_s=NOW)
    assert c.message is not None and len(c.message) == 4096


@pytest.mark.parametrize("kind", list(TransportError))
def test_no_response_is_provider_unavailable(kind: TransportError) -> None:
    c = classify(None, {}, b"", now_s=NOW, transport_error=kind)
    assert c.type is ErrorType.PROVIDER_UNAVAILABLE and c.retryable
    assert c.provider_code == kind.value


# Rule tables with invented bodies: each pins one branch the corpus reaches only indirectly.
@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (400, b"", ErrorType.UNKNOWN),
        (429, b"", ErrorType.RATE_LIMIT),
        (402, b"not json at all", ErrorType.BUDGET),
        (503, b"\xff\xfe garbage", ErrorType.PROVIDER_UNAVAILABLE),
        (500, b"[" * 100_000, ErrorType.PROVIDER_UNAVAILABLE),
        (529, b"", ErrorType.PROVIDER_UNAVAILABLE),
        (400, b'{"error": null}', ErrorType.UNKNOWN),
        (400, b'{"error": {"message": 42, "code": ["x"]}}', ErrorType.UNKNOWN),
        (400, b'{"error": {"details": "nope", "status": "RESOURCE_EXHAUSTED"}}', ErrorType.UNKNOWN),
        (418, b"{}", ErrorType.UNKNOWN),
        (408, b"", ErrorType.PROVIDER_UNAVAILABLE),
        (413, b"", ErrorType.UNKNOWN),
        (413, b'{"error": {"message": "Request Entity Too Large"}}', ErrorType.UNKNOWN),
        (413, b'{"error": {"message": "Request exceeds the context window of this model"}}', ErrorType.CONTEXT_OVERFLOW),
        (413, b'{"error": {"type": "request_too_large", "message": "prompt exceeds the context window"}}', ErrorType.CONTEXT_OVERFLOW),
        (429, b'{"error": {"message": "too many tokens per minute"}}', ErrorType.RATE_LIMIT),
        (429, b'{"error": {"message": "This model\'s maximum context length is 10 tokens"}}', ErrorType.RATE_LIMIT),
        (429, b'{"error": {"code": "context_length_exceeded", "message": "x"}}', ErrorType.CONTEXT_OVERFLOW),
        (400, b'{"error": {"message": "Invalid value for \'audio.sample_rate\'", "code": "invalid_value"}}', ErrorType.UNKNOWN),
        (400, b'{"error": {"message": "temperature rate must be within [0, 2]"}}', ErrorType.UNKNOWN),
        (400, b'{"__type": "com.amazon.bedrock#ThrottlingException", "message": "Too many requests"}', ErrorType.RATE_LIMIT),
        (402, b'{"error": {"message": "maximum context length is 10 tokens"}}', ErrorType.BUDGET),
        (400, b'{"error": {"message": "Quota exceeded for requests per day"}}', ErrorType.UNKNOWN),
        (429, b'{"message": "Too many tokens per day"}', ErrorType.BUDGET),
        (429, b'{"message": "Too many tokens per day. Please try again in 3s"}', ErrorType.RATE_LIMIT),
        (503, b'{"error": {"message": "Incorrect API key provided", "code": "insufficient_quota"}}', ErrorType.PROVIDER_UNAVAILABLE),
        (404, b'{"error": {"type": "api_error", "message": "model not found"}}', ErrorType.UNKNOWN),
    ],
)
def test_rules(status: int, body: bytes, expected: ErrorType) -> None:
    assert classify(status, {}, body, now_s=NOW).type is expected


def test_per_day_quota_with_a_stated_wait_header_is_a_rate_limit() -> None:
    body = b'{"message": "Too many tokens per day"}'
    c = classify(429, {"retry-after": "12"}, body, now_s=NOW)
    assert c.type is ErrorType.RATE_LIMIT and c.retry_after_s == 12.0


def test_a_budget_error_keeps_the_servers_reset_for_the_stamp() -> None:
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1h0m0s"}
    body = b'{"error": {"type": "insufficient_quota", "code": "insufficient_quota"}}'
    c = classify(429, headers, body, now_s=NOW)
    assert c.type is ErrorType.BUDGET and c.retry_after_s == 3600.0
    assert c.reset_at_ms == round((NOW + 3600) * 1000)


@pytest.mark.parametrize(
    ("status", "headers", "body"),
    [
        # Anthropic sends its windows' state on every response (docs: "rate limits", response
        # headers; reset 3 s after NOW); the body is the credit refusal of tests/corpus/anthropic.json.
        (400, {"anthropic-ratelimit-requests-remaining": "49", "anthropic-ratelimit-requests-reset": "2026-11-18T11:06:43Z"},
         b'{"type": "error", "error": {"type": "invalid_request_error", "message": "Your credit balance is too low '
         b'to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}'),
        (429, {"x-ratelimit-remaining-requests": "499", "x-ratelimit-reset-requests": "120ms"},
         b'{"error": {"type": "insufficient_quota", "code": "insufficient_quota"}}'),
    ],
)  # fmt: skip
def test_a_budget_error_does_not_take_the_reset_of_a_window_it_did_not_spend(
    status: int, headers: dict[str, str], body: bytes
) -> None:
    """Credit is not funded again when the request window refills: no wait of the windows'
    (a pool then sits the key out for cooldowns.budget_s, not the seconds to the refill)."""
    c = classify(status, headers, body, now_s=NOW)
    assert c.type is ErrorType.BUDGET and c.retry_after_s is None and c.reset_at_ms is None


@pytest.mark.parametrize(
    ("status", "body", "one_model"),
    [
        (403, b'{"message": "You don\'t have access to the model with the specified model ID."}', True),  # Bedrock (corpus)
        (403, b'{"error": {"message": "You are not allowed to sample from this model", "type": "invalid_request_error"}}', True),
        (401, b'{"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}', False),
        (403, b'{"type": "error", "error": {"type": "permission_error", "message": "Your API key does not have '
              b'permission to use the specified resource."}}', False),
        (403, b'{"type": "error", "error": {"type": "forbidden", "message": "Access to Anthropic models is not allowed '
              b'from unsupported countries, regions, or territories."}}', False),
    ],
)  # fmt: skip
def test_an_auth_refusal_that_names_the_model_it_refuses_is_of_that_model(status: int, body: bytes, one_model: bool) -> None:
    c = classify(status, {}, body, now_s=NOW)
    assert c.type is ErrorType.AUTH and c.one_model is one_model


def test_a_rate_limit_that_states_its_wait_only_in_words_is_waited_that_long() -> None:
    """OpenAI's RPM 429 (its words, as the pool tests quote them) in a stream's error event,
    which has no headers: the 20 s it states is the wait, not a default."""
    body = (b'{"error": {"message": "Rate limit reached for gpt-4o-mini in organization org-x on requests per '
            b'min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.", "type": "requests", '
            b'"param": null, "code": "rate_limit_exceeded"}}')  # fmt: skip
    c = classify(429, {}, body, now_s=NOW)
    assert c.type is ErrorType.RATE_LIMIT and c.retry_after_s == 20.0
    assert c.reset_at_ms == round((NOW + 20) * 1000)
    headed = classify(429, {"retry-after": "3"}, body, now_s=NOW)
    assert headed.retry_after_s == 3.0  # a header's wait outranks the words


def test_huge_body_is_scanned_only_at_its_head() -> None:
    body = json.dumps({"error": {"message": "prompt is too long: 300000 tokens > 200000 maximum"}}).encode()
    assert classify(400, {}, body + b" " * 10_000_000, now_s=NOW).type is ErrorType.CONTEXT_OVERFLOW
    late = b" " * 2_000_000 + body  # the words arrive after the parsed head: not read, not guessed at
    assert classify(400, {}, late, now_s=NOW).type is ErrorType.UNKNOWN


def test_the_request_size_decides_a_bare_too_large() -> None:
    # Step 6: a 413 that says only "too large" is an overflow when the request is bigger
    # than the upstream's window, and stays a byte limit otherwise.
    body = b'{"error": {"message": "Request Entity Too Large"}}'
    big = classify(413, {}, body, now_s=NOW, request=RequestFacts(estimated_tokens=50_000, context_window=32_768))
    small = classify(413, {}, body, now_s=NOW, request=RequestFacts(estimated_tokens=900, context_window=32_768))
    assert (big.type, big.evidence) == (ErrorType.CONTEXT_OVERFLOW, "request:~50000 tokens > context_window 32768")
    assert small.type is ErrorType.UNKNOWN and classify(413, {}, body, now_s=NOW).type is ErrorType.UNKNOWN


@pytest.mark.parametrize(
    ("status", "body", "expected", "evidence"),
    [
        # Step 4: the stated wait outranks the named window, in either direction.
        (429, b'{"error": {"message": "Monthly usage limit reached. Resets in 3 days."}}', ErrorType.BUDGET,
         "horizon:259200s (body 'Resets in 3 days')"),
        (429, b'{"error": {"message": "Daily request limit reached, try again in 20s"}}', ErrorType.RATE_LIMIT,
         "horizon:20s (body 'try again in 20s')"),
        (429, b'{"error": {"type": "usage_limit_reached", "resets_in_seconds": 40}}', ErrorType.BUDGET,
         "code:usage_limit_reached"),
        (429, b'{"error": {"message": "limit reached", "resets_in_seconds": 7200}}', ErrorType.BUDGET,
         "horizon:7200s (body resets_in_seconds=7200)"),
        (429, b'{"error": {"message": "TPM: Limit 1000, Used 0, Requested 4000"}}', ErrorType.CONTEXT_OVERFLOW,
         "numbers:requested 4000 > per-minute limit 1000"),
        (429, b'{"error": {"message": "TPM: Limit 1000, Used 900, Requested 400"}}', ErrorType.RATE_LIMIT,
         "horizon:60s (window minute)"),
        (400, b'{"error": {"message": "Quota exceeded for requests per day"}}', ErrorType.UNKNOWN, "status:400"),
    ],
)
def test_numbers_and_horizon(status: int, body: bytes, expected: ErrorType, evidence: str) -> None:
    c = classify(status, {}, body, now_s=NOW)
    assert (c.type, c.evidence) == (expected, evidence)


def test_a_rejected_unified_limit_resetting_hours_away_is_budget() -> None:
    # Step 5: a subscription's window (Claude Code's anthropic-ratelimit-unified-* headers)
    # says what a bare "rate_limit_error" body does not.
    body = b'{"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limited"}}'
    headers = {"anthropic-ratelimit-unified-status": "rejected", "retry-after": "14400"}
    c = classify(429, headers, body, now_s=NOW)
    assert c.type is ErrorType.BUDGET and c.retry_after_s == 14400.0


def test_stream_events_are_classified_by_the_same_rules_and_say_so() -> None:
    payload = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    c = classify_stream_event(payload, now_s=NOW)
    assert (c.type, c.evidence) == (ErrorType.PROVIDER_UNAVAILABLE, "stream code:overloaded_error")


def test_openais_errors_in_a_stream_keep_the_class_their_http_status_gives_them() -> None:
    """A chat stream's error chunk carries OpenAI's body without its status: read as a 500,
    a rate limit was retried as an outage. The bodies are OpenAI's own (tests/corpus/openai.json)."""
    cases = {c["name"]: c for c in IN_SAMPLE}
    for name, expected in (("openai-429-tpm-rate-limit", ErrorType.RATE_LIMIT),
                           ("openai-429-insufficient-quota-is-budget", ErrorType.BUDGET),
                           ("openai-overflow", ErrorType.CONTEXT_OVERFLOW)):  # fmt: skip
        payload = json.loads(body_bytes(cases[name]["body"]))
        assert classify_stream_event(payload, now_s=NOW).type is expected, name


def test_a_spent_window_header_does_not_make_a_400_a_rate_limit() -> None:
    # Window headers ride on every OpenAI response: only a 403/429 is read as that limit.
    headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2h0m0s"}
    body = b'{"error": {"message": "Invalid value for temperature", "type": "invalid_request_error"}}'
    assert classify(400, headers, body, now_s=NOW).type is ErrorType.UNKNOWN
    assert classify(403, headers, b"{}", now_s=NOW).evidence == "header:x-ratelimit-remaining-requests=0, resets in 7200s"
    # ... and a 403 about access, with every window to spare, stays auth.
    fresh = {"x-ratelimit-remaining-requests": "499", "x-ratelimit-reset-requests": "6m0s"}
    assert classify(403, fresh, b'{"error": {"message": "Project does not have access"}}', now_s=NOW).type is ErrorType.AUTH


SCALEWAY_429 = b'{"status":429,"error":"INSUFFICIENT QUOTA","message":"You exceeded your current limit of concurrent requests."}'


@pytest.mark.parametrize(
    ("host", "expected"),
    [(None, ErrorType.BUDGET), ("api.openai.com", ErrorType.BUDGET), ("api.scaleway.ai", ErrorType.RATE_LIMIT),
     ("API.Scaleway.ai.", ErrorType.RATE_LIMIT)],
)
def test_a_hosts_own_documentation_outweighs_borrowed_quota_wording(host: str | None, expected: ErrorType) -> None:
    c = classify(429, {}, SCALEWAY_429, now_s=NOW, request=RequestFacts(host=host))
    assert c.type is expected
    # An empty balance said outright is money on any host.
    broke = b'{"error":{"message":"Insufficient balance","code":"insufficient_quota"}}'
    assert classify(429, {}, broke, now_s=NOW, request=RequestFacts(host=host)).type is ErrorType.BUDGET


# GitHub Models' daily limit, as the audit quoted it: a day-long window stated twice (the wait in
# seconds, the window as "per 86400s"), neither read, so a rate limit with no wait, retried.
_GITHUB_DAY = ("Rate limit of 8 per 86400s exceeded for UserByModelByDay. "
               "Please wait 85841 seconds before retrying.")  # fmt: skip


def test_a_wait_stated_as_wait_n_seconds_is_read_and_a_day_of_it_is_budget() -> None:
    body = json.dumps({"error": {"code": "RateLimitReached", "message": _GITHUB_DAY, "details": _GITHUB_DAY}})
    c = classify(429, {}, body.encode(), now_s=NOW)
    assert (c.type, c.evidence, c.retry_after_s) == (
        ErrorType.BUDGET, "horizon:85841s (body 'wait 85841 seconds')", 85841.0)
    assert c.reset_at_ms == (NOW + 85841) * 1000


def test_a_window_given_in_seconds_is_a_named_window() -> None:
    body = json.dumps({"error": {"code": "RateLimitReached", "message": _GITHUB_DAY.split(" Please")[0]}})
    c = classify(429, {}, body.encode(), now_s=NOW)
    assert (c.type, c.evidence) == (ErrorType.BUDGET, "horizon:86400s (window 86400s)")


def test_groqs_498_is_its_flex_tier_at_capacity() -> None:
    # console.groq.com/docs/flex-processing: "fail quickly with status 498 and error
    # capacity_exceeded. Add jittered backoff and retries". It was unknown and passed on raw.
    assert classify(498, {}, b"", now_s=NOW).type is ErrorType.PROVIDER_UNAVAILABLE
    c = classify(498, {}, b'{"error": {"code": "capacity_exceeded"}}', now_s=NOW)
    assert (c.type, c.evidence) == (ErrorType.PROVIDER_UNAVAILABLE, "code:capacity_exceeded")
    assert classify(400, {}, b'{"error": {"code": "capacity_exceeded"}}', now_s=NOW).type is ErrorType.UNKNOWN


def test_an_empty_balance_said_as_balance_is_insufficient_is_budget_on_a_403() -> None:
    # SiliconFlow's 30001, as the audit quoted it: it was auth (a 403), so no one topped up.
    body = b'{"code":30001,"message":"Sorry, your account balance is insufficient","data":null}'
    c = classify(403, {}, body, now_s=NOW)
    assert (c.type, c.evidence) == (ErrorType.BUDGET, "wording:empty balance")


def test_cohere_output_limit_is_not_an_overflow() -> None:
    # docs.cohere.com/v1/reference/errors: a cap on the output, which compressing the input cannot help.
    body = b'{"message": "too many tokens: max tokens must be less than or equal to 4096, the maximum output for this model - received 8192."}'
    assert classify(400, {}, body, now_s=NOW).type is ErrorType.UNKNOWN


@pytest.mark.parametrize(
    ("message", "expected", "status"),
    [
        ("Input validation error: `temperature` must be strictly positive", ErrorType.UNKNOWN, 422),
        ("Input validation error: `inputs` must have less than 4096 tokens. Given: 5000", ErrorType.CONTEXT_OVERFLOW, 422),
        ("Model is overloaded", ErrorType.PROVIDER_UNAVAILABLE, 429),  # its 429 says "overloaded": capacity
    ],
)
def test_tgi_stream_errors_are_classified_by_the_status_of_their_type(
    message: str, expected: ErrorType, status: int
) -> None:
    # TGI's {"error": "<text>", "error_type": ...} event was read as a 500: six calls, then a 503.
    error_type = {422: "validation", 429: "overloaded"}[status]
    c = classify_stream_event({"error": message, "error_type": error_type}, now_s=NOW)
    assert c.type is expected and c.message == message


def _case(name: str) -> dict[str, Any]:
    return next(c for c in IN_SAMPLE if c["name"] == name)


def test_a_rate_limit_without_retry_after_waits_what_its_body_says_not_its_full_reset() -> None:
    # The real OpenAI 429 of wrtnlabs/autobe#136 as it comes without retry-after (openai-node#1477
    # quotes a 429 with none): its x-ratelimit-reset-tokens (1m0.052s) is when the spent window
    # is full again; its body's "try again in 494ms" is when the request fits. Taken from the
    # header, a pool sat the key out a minute (audit).
    case = _case("openai-429-tpm-with-reset-headers")
    headers = {k.lower(): v for k, v in case["headers"].items() if not k.lower().startswith("retry-after")}
    c = classify(429, headers, body_bytes(case["body"]), now_s=NOW)
    assert c.type is ErrorType.RATE_LIMIT
    assert c.retry_after_s == pytest.approx(0.494)


def test_a_rate_limit_that_states_no_wait_waits_until_the_request_has_refilled() -> None:
    # Anthropic's 429 body that states no numbers (anthropic-429-reset-headers-only), with its
    # documented rate-limit headers for a key with 311 of 6,000 input tokens left, full again in
    # 57 s: a request of 2,200 tokens fits once 1,889 have come back, 18.9 s on at the rate that
    # fills the rest by the reset, not at the reset (the audit's figures).
    body = body_bytes(_case("anthropic-429-reset-headers-only")["body"])
    headers = {
        "anthropic-ratelimit-input-tokens-limit": "6000", "anthropic-ratelimit-input-tokens-remaining": "311",
        "anthropic-ratelimit-input-tokens-reset": "2026-11-18T11:07:37Z",
        "anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": "2026-11-18T11:06:42Z",
    }  # fmt: skip
    c = classify(429, headers, body, now_s=NOW, request=RequestFacts(estimated_tokens=2200))
    assert c.type is ErrorType.RATE_LIMIT
    assert c.retry_after_s == pytest.approx((2200 - 311) * 57 / (6000 - 311))
    # Its output window, by the max_tokens asked.
    out = {"anthropic-ratelimit-output-tokens-limit": "2000", "anthropic-ratelimit-output-tokens-remaining": "100",
           "anthropic-ratelimit-output-tokens-reset": "2026-11-18T11:07:36Z"}  # fmt: skip
    c = classify(429, out, body, now_s=NOW, request=RequestFacts(estimated_tokens=50, output_tokens=1000))
    assert c.retry_after_s == pytest.approx((1000 - 100) * 56 / (2000 - 100))
    # Short by no count the gateway knows (no size): no wait read from them (the pool's default).
    assert classify(429, headers, body, now_s=NOW).retry_after_s is None
    # A retry-after still wins.
    c = classify(429, {**headers, "retry-after": "9"}, body, now_s=NOW, request=RequestFacts(2200))
    assert c.retry_after_s == 9.0
