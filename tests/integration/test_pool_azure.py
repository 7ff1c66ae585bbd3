"""Two Azure OpenAI deployments of one resource in a pool: one base URL and key (the v1 API),
told apart only by the deployment each model is mapped to. Azure's 429s are the corpus's real
bodies. Sleeps are recorded, not slept."""

from __future__ import annotations

import json
from typing import Any

from tests.corpus_cases import IN_SAMPLE
from tests.fakeupstream import FakeUpstream, Reply
from tests.integration.conftest import Gateway


def _case(name: str) -> dict[str, Any]:
    return next(c for c in IN_SAMPLE if c["name"] == name)


async def _azure_pool(make_gateway: Any) -> tuple[Gateway, FakeUpstream]:
    fake = await FakeUpstream().start()
    same = f"base_url: '{fake.url}', api_key: AZKEY, key_header: api-key"
    upstreams = (f"  - {{name: east, {same}, model_map: {{gpt-4o: gpt4o-east}}, weight: 1000000}}\n"
                 f"  - {{name: west, {same}, model_map: {{gpt-4o: gpt4o-west}}}}\n")  # fmt: skip
    pools = "pools:\n  - {name: gpt, models: [gpt-4o], deployments: [east, west], affinity: {enabled: false}}\n"
    gw = await make_gateway(pools, fake=fake, upstreams=upstreams)
    return gw, fake


def _chat(text: str = "hi", max_tokens: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


async def test_a_day_long_token_rate_429_refuses_that_request_and_benches_no_deployment(make_gateway: Any) -> None:
    """Azure's "exceeded token rate limit ... Please retry after 86400 seconds" to a request
    bigger than the deployment's tokens per minute: as budget it answered 402 with a day's
    retry-after and sat the key, both deployments with it, out for 24 hours (every later
    request 402 pool_budget without a call, audit)."""
    gw, fake = await _azure_pool(make_gateway)
    day = _case("azure-429-retry-after-a-day-is-overflow")
    try:
        fake.script(Reply(429, day["body"], day["headers"]))
        status, headers, body = await gw.chat(_chat("a long document", max_tokens=60000))
        assert status == 400, body
        assert headers["x-llm-error-type"] == "context_overflow"
        assert "exceeded token rate limit" in json.loads(body)["error"]["message"]  # Azure's own words, relayed
        assert "retry-after" not in headers and "x-llm-error-reset-at" not in headers  # no wait makes it fit
        assert headers["x-llm-attempts"] == "1"  # the sibling's TPM is no bigger window
        assert gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="east",
                         reason="budget") == 0  # fmt: skip
        for _ in range(3):
            status, headers, _ = await gw.chat(_chat())
            assert status == 200 and headers["x-llm-upstream"] == "east" and headers["x-llm-attempts"] == "1"
    finally:
        await fake.close()


async def test_a_rate_limit_on_one_deployment_leaves_its_sibling_on_the_same_resource_serving(
    make_gateway: Any,
) -> None:
    """Azure sets tokens per minute per deployment: east's 429 ("retry after 6 seconds") is the
    deployment's (its model as sent, gpt4o-east), not the resource key's, so west, the same
    base URL and key with another deployment name, takes the request and the next."""
    gw, fake = await _azure_pool(make_gateway)
    minute = _case("azure-429-token-rate")
    try:
        fake.script(Reply(429, minute["body"], minute["headers"]))
        status, headers, _ = await gw.chat(_chat())
        assert status == 200 and headers["x-llm-upstream"] == "west" and headers["x-llm-attempts"] == "2"
        assert [r.json()["model"] for r in fake.chat_requests()] == ["gpt4o-east", "gpt4o-west"]
        status, headers, _ = await gw.chat(_chat())
        assert status == 200 and headers["x-llm-upstream"] == "west" and headers["x-llm-attempts"] == "1"
        assert gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="east",
                         reason="rate_limit") == 1  # fmt: skip
    finally:
        await fake.close()
