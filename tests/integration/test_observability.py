"""Metrics move, the log line has the contract fields, and no secret or prompt is logged."""

import contextlib
import json
import logging

import pytest

from gateway.logs import JsonFormatter
from tests.fakeupstream import Reply, Stream, chunk
from tests.integration.conftest import eventually

SECRET_KEY = "sk-proj-SECRETSECRETSECRET"
PROMPT = "my confidential prompt about project nightingale"


async def test_log_line_per_request_without_secrets(make_gateway, caplog: pytest.LogCaptureFixture) -> None:
    gw = await make_gateway(upstream_yaml=f", api_key: {SECRET_KEY}")
    caplog.set_level(logging.INFO, logger="gateway")
    gw.fake.script(Reply(400, {"error": {"message": f"bad request echoing {PROMPT}", "type": "invalid_request_error",
                                         "code": None}}))
    payload = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": PROMPT}]}
    await gw.chat(payload, headers={"Authorization": "Bearer sk-client-SECRET2", "x-request-id": "rid-obs",
                                    "User-Agent": "my-agent/1.0 (Bearer sk-client-SECRET2; key=AKIAIOSFODNN7SECRETSECRET)"})
    await gw.chat(payload, headers={"Authorization": "Bearer sk-client-SECRET2"})
    await gw.chat(data=b'{"messages": "' + PROMPT.encode() + b'"')  # invalid JSON quoting the prompt
    formatter = JsonFormatter()
    lines = [formatter.format(r) for r in caplog.records]
    text = "\n".join(lines)
    for secret in (SECRET_KEY, "sk-client-SECRET2", PROMPT, "nightingale", "Bearer", "AKIA"):
        assert secret not in text
    records = [json.loads(line) for line in lines if '"event":"request"' in line]
    assert len(records) == 3
    first = next(r for r in records if r["request_id"] == "rid-obs")
    assert first | {"duration_ms": 0, "ttfb_ms": 0} == {
        "ts": first["ts"], "level": "info", "logger": "gateway.access", "event": "request",
        "request_id": "rid-obs", "method": "POST", "path": "/v1/chat/completions",
        "user_agent": "my-agent/1.0 ([redacted] [redacted])", "upstream": "primary", "model": "gpt-4o-mini", "status": 400,
        "error_type": "unknown", "evidence": "status:400", "attempts": 1, "retries": 0, "compressed": False,
        "stream": False, "duration_ms": 0, "ttfb_ms": 0,
    } | ({"provider_code": first["provider_code"]} if "provider_code" in first else {})


async def test_tokens_and_durations_are_counted(make_gateway) -> None:
    gw = await make_gateway()
    await gw.chat()
    assert gw.metric("llm_gateway_tokens_total", upstream="primary", model="gpt-4o-mini", kind="prompt") == 12
    assert gw.metric("llm_gateway_tokens_total", upstream="primary", model="gpt-4o-mini", kind="completion") == 7
    assert gw.metric("llm_gateway_request_duration_seconds_count", upstream="primary", model="gpt-4o-mini") == 1
    assert gw.metric("llm_gateway_time_to_first_byte_seconds_count", upstream="primary", model="gpt-4o-mini") == 1
    assert gw.metric("llm_gateway_upstream_attempts_total", upstream="primary", outcome="success") == 1


async def test_unknown_models_do_not_explode_label_cardinality(make_gateway) -> None:
    gw = await make_gateway()
    for i in range(120):
        await gw.chat({"model": f"random-{i}", "messages": []})
    models = {s.labels["model"] for m in gw.registry.collect() if m.name == "llm_gateway_requests"
              for s in m.samples}
    assert len(models) <= 101 and "other" in models


async def test_upstream_first_byte_leaves_out_retry_waits(make_gateway) -> None:
    # time_to_first_byte is what the client waited (retries and their waits included);
    # upstream_first_byte is the successful attempt's own time to its response head.
    gw = await make_gateway(real_sleep=True)
    rate_limited = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
    gw.fake.script(Reply(429, rate_limited, {"retry-after-ms": "300"}), Reply(200, {"ok": True}))
    status, _, _ = await gw.chat()
    assert status == 200
    labels = {"upstream": "primary", "model": "gpt-4o-mini"}
    assert gw.metric("llm_gateway_time_to_first_byte_seconds_sum", **labels) >= 0.3
    assert gw.metric("llm_gateway_upstream_first_byte_seconds_count", **labels) == 1
    assert gw.metric("llm_gateway_upstream_first_byte_seconds_sum", **labels) < 0.25


async def test_log_path_is_bounded(make_gateway, caplog: pytest.LogCaptureFixture) -> None:
    gw = await make_gateway()
    caplog.set_level(logging.INFO, logger="gateway")
    async with gw.session.get(gw.base + "/v1/models/" + "m" * 500 + "?key=SECRET4") as r:
        await r.read()
    (record,) = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert record["method"] == "GET" and record["path"] == ("/v1/models/" + "m" * 500)[:128]
    assert "SECRET4" not in str(record)


async def test_log_model_is_the_one_asked_after_the_metric_labels_run_out(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    # Metric labels are bounded (the first 100 other names, then "other"); the log line is per
    # request, so it names the model the client asked for, bounded and printable (client input).
    gw = await make_gateway(upstream_yaml=", models: ['*']")
    caplog.set_level(logging.INFO, logger="gateway")
    for i in range(1, 131):
        await gw.chat({"model": f"rnd{i}-x", "messages": [{"role": "user", "content": "hi"}]})
    # 256 characters: the longest name admitted (a longer one is refused before it is routed).
    for model in ("drop0", "x" * 256, "bad\x01\u2028name"):
        await gw.chat({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    records = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert [r["model"] for r in records[-3:]] == ["drop0", "x" * 128, "bad??name"]
    assert records[129]["model"] == "rnd130-x"
    assert gw.metric("llm_gateway_requests_total", upstream="primary", model="other", status="200",
                     error_type="none") == 33


async def test_health_readiness_and_metrics_carry_the_id_and_attempts_but_are_not_observed(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    # SPEC: every response carries x-request-id and x-llm-attempts. These routes are not API
    # traffic: no access log line per probe or scrape, and no request metrics.
    gw = await make_gateway()
    caplog.set_level(logging.INFO, logger="gateway")
    for path in ("/healthz", "/readyz", "/metrics"):
        async with gw.session.get(gw.base + path, headers={"x-request-id": "probe-1"}) as r:
            await r.read()
            assert r.status == 200 and r.headers["x-request-id"] == "probe-1", path
            assert r.headers["x-llm-attempts"] == "0", path
        async with gw.session.get(gw.base + path, headers={"x-request-id": "bad id\twith spaces"}) as r:
            await r.read()
            assert len(r.headers["x-request-id"]) == 32 and r.headers["x-llm-attempts"] == "0", path
        async with gw.session.head(gw.base + path) as r:
            assert len(r.headers["x-request-id"]) == 32, path
    assert not [r for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert not [s for m in gw.registry.collect() if m.name == "llm_gateway_requests" for s in m.samples]


KEYS = {
    "no keys": "",
    "a key": "keys: [{name: alice, key: gk-alice}]\n",
    "a key with a budget": ("prices: {'gpt-4o-mini*': {input: 1.0, output: 2.0}}\n"
                            "keys: [{name: alice, key: gk-alice, budget: {usd: 1000, period: day}}]\n"),
}  # fmt: skip


@pytest.mark.parametrize("keys", list(KEYS))
async def test_tokens_total_is_what_the_upstream_reported_whatever_the_keys_section(
    make_gateway, keys: str, caplog: pytest.LogCaptureFixture
) -> None:
    """llm_gateway_tokens_total is "tokens reported by upstream usage": a relayed embedding
    counts its usage without keys too, and a stream cut before its usage chunk counts no
    prompt tokens whether or not a key's budget estimates them for its own books."""
    import openai

    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway(KEYS[keys])
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice", max_retries=0)
    gw.fake.script(Stream([chunk({"content": "a" * 35})], then="drop"))
    try:
        got = await client.embeddings.create(model="gpt-4o-mini", input="hello world")  # the fake's own answer
        assert got.usage.prompt_tokens == 3
        with contextlib.suppress(openai.APIError):  # how the SDK ends a broken stream is its own
            stream = await client.chat.completions.create(
                model="gpt-4o-mini", stream=True, messages=[{"role": "user", "content": "hello there"}])
            async for _ in stream:
                pass
    finally:
        await client.close()
    await eventually(lambda: gw.metric("llm_gateway_in_flight_requests") == 0, "the requests ended")
    labels = {"upstream": "primary", "model": "gpt-4o-mini"}
    assert gw.metric("llm_gateway_tokens_total", kind="prompt", **labels) == 3  # the embedding's, no estimate
    assert gw.metric("llm_gateway_tokens_total", kind="completion", **labels) == 10  # the text shown (35 bytes)
    lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert [line.get("usage") for line in lines] == [{"prompt": 3}, {"completion": 10}]
