"""Cross-request protection: the circuit breaker and the retry budget."""

import asyncio

from tests.fakeupstream import Reply


async def test_circuit_opens_fails_fast_and_recovers(make_gateway) -> None:
    gw = await make_gateway(
        "circuit_breaker: {failure_threshold: 2, open_s: 0.5}\n"
        "retry: {provider_unavailable: {max_retries: 0, base_delay_s: 0.1, max_delay_s: 0.1}}\n"
    )
    gw.fake.script(Reply(503, "down"), Reply(503, "down"))
    assert (await gw.chat())[0] == 503
    assert (await gw.chat())[0] == 503
    assert gw.metric("llm_gateway_circuit_open", upstream="primary") == 1
    calls = len(gw.fake.chat_requests())
    status, headers, body = await gw.chat()
    assert status == 503 and b"circuit_open" in body
    assert headers["x-llm-error-type"] == "provider_unavailable"
    assert headers["x-llm-attempts"] == "0" and 0 <= int(headers["retry-after"]) <= 1
    assert len(gw.fake.chat_requests()) == calls  # failed fast, nothing sent
    await asyncio.sleep(0.6)
    assert (await gw.chat())[0] == 200  # the probe succeeds and closes the circuit
    assert gw.metric("llm_gateway_circuit_open", upstream="primary") == 0
    assert (await gw.chat())[0] == 200


async def test_retry_budget_holds_a_storm_to_about_1_2x_attempts(make_gateway) -> None:
    gw = await make_gateway(
        "retry: {budget: {ttl_s: 10, min_retries_per_s: 0, percent_can_retry: 20}}\n"
        "circuit_breaker: {failure_threshold: 1000, open_s: 1}\n"
    )
    gw.fake.script(*[Reply(503, "down")] * 1000)
    results = await asyncio.gather(*(gw.chat() for _ in range(60)))
    assert all(status == 503 for status, _, _ in results)
    attempts = len(gw.fake.chat_requests())
    assert 60 <= attempts <= 60 * 1.25, attempts  # without the budget: 360
