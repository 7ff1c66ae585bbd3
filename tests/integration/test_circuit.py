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
    assert gw.metric("llm_gateway_circuit_open", upstream="primary", model="gpt-4o-mini") == 1
    calls = len(gw.fake.chat_requests())
    status, headers, body = await gw.chat()
    assert status == 503 and b"circuit_open" in body
    assert headers["x-llm-error-type"] == "provider_unavailable"
    assert headers["x-llm-attempts"] == "0" and 0 <= int(headers["retry-after"]) <= 1
    assert len(gw.fake.chat_requests()) == calls  # failed fast, nothing sent
    await asyncio.sleep(0.6)
    assert (await gw.chat())[0] == 200  # the probe succeeds and closes the circuit
    assert gw.metric("llm_gateway_circuit_open", upstream="primary", model="gpt-4o-mini") == 0
    assert (await gw.chat())[0] == 200


def circuit(upstream: str, model: str) -> tuple[tuple[str, str], ...]:
    return (("model", model), ("upstream", upstream))


async def test_the_circuit_gauge_is_per_model_as_the_circuits_are(make_gateway) -> None:
    """One model's circuit open refuses that model only: the gauge says so, per model, and
    the upstream-wide circuit (model="*") stays 0, so no alert calls the upstream down."""
    gw = await make_gateway(
        "circuit_breaker: {failure_threshold: 2, open_s: 30}\n"
        "retry: {provider_unavailable: {max_retries: 0, base_delay_s: 0.1, max_delay_s: 0.1}}\n"
    )
    gw.fake.script(lambda p: Reply(503, "down") if p["model"] == "down-model" else None)
    assert (await gw.chat({"model": "ok-model", "messages": [{"role": "user", "content": "hi"}]}))[0] == 200
    gw.fake.script(*[lambda p: Reply(503, "down") if p["model"] == "down-model" else None] * 10)
    for _ in range(2):
        assert (await gw.chat({"model": "down-model", "messages": [{"role": "user", "content": "hi"}]}))[0] == 503
    status, headers, _ = await gw.chat({"model": "down-model", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 503 and headers["x-llm-attempts"] == "0"  # refused: its circuit is open
    assert (await gw.chat({"model": "ok-model", "messages": [{"role": "user", "content": "hi"}]}))[0] == 200  # the upstream serves others
    assert await gw.scraped("llm_gateway_circuit_open") == {
        circuit("primary", "*"): 0, circuit("primary", "down-model"): 1, circuit("primary", "ok-model"): 0,
    }


async def test_the_circuit_gauge_reads_the_shared_state_at_scrape_time(make_gateway) -> None:
    """What another replica wrote to the shared store (here: written to the store directly)
    is what this replica enforces, so it is what its gauge shows, without a transition here."""
    from gateway.live import LIVE
    from gateway.policy.breaker import circuit_key

    gw = await make_gateway("circuit_breaker: {failure_threshold: 2, open_s: 30}\n")
    assert (await gw.chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))[0] == 200
    svc = gw.app[LIVE].services
    await svc.store.circuit_open(circuit_key("primary", "m"), svc.wall() + 30, 60)
    assert (await gw.scraped("llm_gateway_circuit_open"))[circuit("primary", "m")] == 1
    await asyncio.sleep(0.25)  # past state.cache_ms: this replica reads the store again
    status, headers, _ = await gw.chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 503 and headers["x-llm-attempts"] == "0"
    # The other replica's record ends (its open period passed): half-open is not refusing.
    await svc.store.circuit_open(circuit_key("primary", "m"), svc.wall() - 1, 60)
    assert (await gw.scraped("llm_gateway_circuit_open"))[circuit("primary", "m")] == 0
    await svc.store.circuit_open(circuit_key("primary"), svc.wall() + 30, 60)
    assert (await gw.scraped("llm_gateway_circuit_open"))[circuit("primary", "*")] == 1


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
