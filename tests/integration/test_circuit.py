"""Cross-request protection: the circuit breaker and the retry budget."""

import asyncio
import contextlib
import json

from tests.fakeupstream import Reply, Stream, chunk
from tests.integration.conftest import eventually


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
    assert all(status == 503 for status, _, _ in results), [(s, h.get("x-llm-error-type")) for s, h, _ in results if s != 503]
    attempts = len(gw.fake.chat_requests())
    assert 60 <= attempts <= 60 * 1.25, attempts  # without the budget: 360


# Streams whose 200 head came and whose body then broke (the upstream cut them after a few
# events): each is a failed request for the circuit, counted when the body ends.
STREAM_REQ = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
STREAM_CIRCUIT = {"upstream": "primary", "model": "gpt-4o-mini"}


def _events(n: int = 2) -> list:
    return [chunk({"role": "assistant", "content": ""}), *(chunk({"content": f"w{i} "}) for i in range(n))]


def broken_stream() -> Stream:
    return Stream(_events(), then="drop")


def whole_stream(**kw) -> Stream:  # type: ignore[no-untyped-def]
    return Stream([*_events(), chunk({}, "stop")], **kw)


async def test_streams_that_all_break_mid_answer_open_the_circuit(make_gateway) -> None:
    gw = await make_gateway("circuit_breaker: {failure_threshold: 3, open_s: 30}\n")
    gw.fake.script(*[broken_stream() for _ in range(10)])
    for _ in range(3):
        status, _, body = await gw.chat(STREAM_REQ)
        assert status == 200 and b"w0" in body and b'"error"' in body  # committed, then a typed error event
    assert len(gw.fake.chat_requests()) == 3
    status, headers, body = await gw.chat(STREAM_REQ)
    assert status == 503 and b"circuit_open" in body and headers["x-llm-attempts"] == "0"
    assert len(gw.fake.chat_requests()) == 3  # refused without an upstream call
    assert gw.metric("llm_gateway_circuit_open", **STREAM_CIRCUIT) == 1


async def test_a_buffered_answer_whose_body_breaks_counts_as_a_failure(make_gateway) -> None:
    gw = await make_gateway(
        "circuit_breaker: {failure_threshold: 2, open_s: 30}\n"
        "retry: {provider_unavailable: {max_retries: 0}}\n"
    )
    gw.fake.script(*[broken_stream() for _ in range(10)])  # a head, some bytes, then the cut
    for _ in range(2):
        assert (await gw.chat())[0] == 502
    status, _, body = await gw.chat()
    assert status == 503 and b"circuit_open" in body
    assert len(gw.fake.chat_requests()) == 2
    assert gw.metric("llm_gateway_circuit_open", **STREAM_CIRCUIT) == 1


async def _leave_mid_stream(gw) -> None:  # type: ignore[no-untyped-def]
    host, port = gw.base.removeprefix("http://").split(":")
    body = json.dumps(STREAM_REQ).encode()
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    await writer.drain()
    await asyncio.wait_for(reader.readuntil(b"w1 "), 10)  # the answer has started
    writer.transport.abort()  # gone, without a goodbye
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    await eventually(lambda: gw.metric("llm_gateway_in_flight_requests") == 0, "the request ended")


async def test_a_client_that_leaves_mid_stream_is_neither_a_failure_nor_a_success(make_gateway) -> None:
    """The streak of broken streams goes on across requests whose clients left mid-answer:
    they neither count as failures nor clear it."""
    gw = await make_gateway("circuit_breaker: {failure_threshold: 2, open_s: 30}\n")
    long_answer = Stream(_events(50), delay_s=0.02)
    gw.fake.script(broken_stream(), long_answer, long_answer, long_answer, broken_stream())
    assert (await gw.chat(STREAM_REQ))[0] == 200
    for _ in range(3):
        await _leave_mid_stream(gw)
    assert gw.metric("llm_gateway_circuit_open", **STREAM_CIRCUIT) == 0  # three left: no failure
    assert (await gw.chat(STREAM_REQ))[0] == 200  # the second broken stream in a row
    assert gw.metric("llm_gateway_circuit_open", **STREAM_CIRCUIT) == 1
    status, _, body = await gw.chat(STREAM_REQ)
    assert status == 503 and b"circuit_open" in body and len(gw.fake.chat_requests()) == 5


async def test_a_half_open_probe_is_settled_by_its_body_not_its_head(make_gateway) -> None:
    """A probe whose stream breaks opens the circuit again; while a probe's stream is still
    coming, the circuit is not closed yet (others are refused); once it ended whole, it is."""
    gw = await make_gateway("circuit_breaker: {failure_threshold: 2, open_s: 0.3}\n",
                            timeouts="{connect_s: 2, first_byte_s: 2.0, idle_s: 3.0}")
    gw.fake.script(broken_stream(), broken_stream(), broken_stream(), whole_stream(pause_s=1.0, pause_after=2))
    for _ in range(2):
        assert (await gw.chat(STREAM_REQ))[0] == 200
    assert gw.metric("llm_gateway_circuit_open", **STREAM_CIRCUIT) == 1
    await asyncio.sleep(0.4)  # past the open period: the next request is the probe
    status, _, body = await gw.chat(STREAM_REQ)
    assert status == 200 and b'"error"' in body  # the probe's stream broke too
    assert gw.metric("llm_gateway_circuit_open", **STREAM_CIRCUIT) == 1
    status, _, body = await gw.chat(STREAM_REQ)
    assert status == 503 and b"circuit_open" in body and len(gw.fake.chat_requests()) == 3
    await asyncio.sleep(0.4)
    async with gw.session.post(gw.base + "/v1/chat/completions", json=STREAM_REQ) as probe:
        assert probe.status == 200
        await asyncio.wait_for(probe.content.readuntil(b"w0 "), 10)  # its head and first words came
        status, _, body = await gw.chat(STREAM_REQ)  # meanwhile: the probe has not proved anything yet
        assert status == 503 and b"circuit_open" in body and len(gw.fake.chat_requests()) == 4
        rest = await probe.read()
    assert b"[DONE]" in rest and b'"error"' not in rest
    assert gw.metric("llm_gateway_circuit_open", **STREAM_CIRCUIT) == 0  # closed by the whole stream
    assert (await gw.chat(STREAM_REQ))[0] == 200 and len(gw.fake.chat_requests()) == 5


async def test_a_failed_half_open_probe_stops_as_a_probe_and_tells_the_sdk_not_to_retry(make_gateway) -> None:
    """A probe is one attempt: its span says so (not ``moving_on``: nothing is next), and its
    503 carries ``x-should-retry: false``: the stock openai SDK honours it, so the failed
    probe is one request upstream, not a second sent into the circuit it just reopened."""
    import openai

    from tests.integration.test_tracing import the_tree, traced

    gw = await make_gateway("circuit_breaker: {failure_threshold: 2, open_s: 0.3}\n")  # retries as by default
    gw.fake.script(*[Reply(503, {"error": {"message": "down", "type": "server_error"}})] * 20)
    for i in range(2):
        assert (await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"{i}"}]}))[0] == 503
    await asyncio.sleep(0.4)
    exporter = traced(gw)
    calls = len(gw.fake.chat_requests())
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="x", max_retries=2)
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "probe"}])
        raise AssertionError(f"answered {raw.status_code}")
    except openai.InternalServerError as e:
        assert e.status_code == 503 and e.response.headers["x-should-retry"] == "false"
    finally:
        await client.close()
    assert len(gw.fake.chat_requests()) == calls + 1  # the probe, and no SDK retry
    server, nodes = the_tree(exporter)
    (probe,) = [n for n in nodes if n.attributes.get("llm_gateway.circuit") == "half_open_probe"]
    assert probe.attributes["llm_gateway.stop_reason"] == "circuit_probe"
