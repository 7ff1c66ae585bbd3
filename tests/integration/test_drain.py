"""What SIGTERM's drain does once ``drain_s`` has run out (gateway/server.py ``drain``, called
here as serve() calls it): every request still in flight gets the typed ``gateway_shutdown``
error, never a closed connection. A stream still relaying ends with its API's error event; a
request whose answer has not begun (waiting for the upstream, or in a retry's backoff) is
answered 503 in its API's envelope, with a short ``retry-after``. A rollout, so none of it is
counted as the provider's failure, while the client is told to retry (elsewhere)."""

import asyncio
import json
import time

from gateway.live import LIVE
from gateway.server import drain
from tests.fakeupstream import Hang, Reply, Stream, chunk, data_events


async def _until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(500):  # polled: nothing offers an event for it
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def test_a_stream_cut_at_drain_timeout_is_not_a_provider_failure(make_gateway) -> None:
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(Stream([chunk({"content": f"w{i}"}) for i in range(40)] + [chunk({}, "stop")], delay_s=0.05))
    life = gw.app[LIVE].life

    async def client() -> bytes:
        return (await gw.chat({"model": "gpt-4o-mini", "stream": True,
                               "messages": [{"role": "user", "content": "long"}]}))[2]

    reading = asyncio.create_task(client())
    await _until(lambda: len(gw.fake.requests) == 1 and life.in_flight == 1, "the stream is under way")
    await asyncio.sleep(0.2)  # a few events relayed
    await drain(life, drain_s=0.0)
    body = await reading
    last = json.loads(data_events(body)[-1])
    assert last["error"]["code"] == "gateway_shutdown" and last["error"]["x_llm_error_type"] == "provider_unavailable"
    series = {"upstream": "primary", "model": "gpt-4o-mini", "status": "200"}
    assert gw.metric("llm_gateway_requests_total", **series, error_type="gateway_shutdown") == 1
    assert gw.metric("llm_gateway_requests_total", **series, error_type="provider_unavailable") == 0
    assert gw.metric("llm_gateway_upstream_attempts_total", upstream="primary", outcome="provider_unavailable") == 0


async def test_a_stream_whose_answer_is_complete_is_not_cut_with_an_error(make_gateway) -> None:
    """drain_s runs out after the finish chunk, while the upstream has yet to send [DONE]:
    the client has its whole answer, and no error event follows it (audit, 2026-11-29)."""
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(Stream([chunk({"content": "all of it"}), chunk({}, "stop")], then="stall"))
    life = gw.app[LIVE].life
    reading = asyncio.create_task(gw.chat({"model": "gpt-4o-mini", "stream": True,
                                           "messages": [{"role": "user", "content": "x"}]}))  # fmt: skip
    await _until(lambda: len(gw.fake.requests) == 1 and life.in_flight == 1, "the stream is under way")
    await asyncio.sleep(0.2)  # the finish chunk relayed; the upstream stalls before [DONE]
    await drain(life, drain_s=0.0)
    events = data_events((await reading)[2])
    assert not any("error" in e for e in events), events
    assert json.loads(events[-1])["choices"][0]["finish_reason"] == "stop"


async def test_requests_whose_answer_has_not_begun_get_a_typed_503_when_drain_runs_out(make_gateway) -> None:
    # Long timeouts: the upstream's silence, and its asked-for wait, outlast drain_s.
    gw = await make_gateway(real_sleep=True, timeouts="{connect_s: 2, first_byte_s: 60, idle_s: 60}")
    life = gw.app[LIVE].life
    # 1: a chat request waiting for the upstream's answer.
    gw.fake.script(Hang(30))
    waiting = asyncio.create_task(gw.chat())
    await _until(lambda: len(gw.fake.requests) == 1, "the upstream has the first request")
    # 2: a streamed Messages request in the backoff before its retry (the upstream asked for 20 s).
    gw.fake.script(Reply(503, {"error": {"message": "overloaded", "type": "server_error"}},
                         headers={"retry-after": "20"}))
    backing_off = asyncio.create_task(gw.messages({"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": True,
                                                   "messages": [{"role": "user", "content": "hi"}]}))
    await _until(lambda: len(gw.fake.requests) == 2 and life.in_flight == 2, "the second request is backing off")
    started = time.monotonic()
    await drain(life, drain_s=0.2)
    assert time.monotonic() - started < 1.5  # the answers were written at once, not left to the close

    status, headers, body = await waiting
    assert status == 503
    assert json.loads(body)["error"]["code"] == "gateway_shutdown"
    assert headers["x-llm-error-type"] == "provider_unavailable" and headers["x-llm-error-retryable"] == "true"
    assert headers["retry-after"] == "1" and "x-should-retry" not in headers  # another replica serves the retry

    status, headers, body = await backing_off
    assert status == 529  # Messages has no 503: Anthropic's overloaded answer, which its clients retry
    doc = json.loads(body)
    assert doc["type"] == "error" and doc["error"]["type"] == "overloaded_error"
    assert doc["error"]["code"] == "gateway_shutdown"
    assert "x-should-retry" not in headers  # though this replica had retried once already

    for model, code in (("gpt-4o-mini", "503"), ("claude-sonnet-4-5", "529")):
        assert gw.metric("llm_gateway_requests_total", upstream="primary", model=model, status=code,
                         error_type="gateway_shutdown") == 1
    assert life.in_flight == 0


async def test_a_request_that_arrives_after_the_cut_is_answered_the_same_way(make_gateway) -> None:
    gw = await make_gateway()
    life = gw.app[LIVE].life
    life.cut()  # nothing in flight: the listener is about to close
    status, headers, body = await gw.responses()
    assert status == 503 and headers["retry-after"] == "1"
    err = json.loads(body)["error"]
    assert err["code"] == "gateway_shutdown" and "param" in err  # the Responses API's envelope
    assert gw.fake.requests == []


async def test_while_draining_every_answer_closes_its_connection(make_gateway) -> None:
    """Drain ended on the first idle moment and closed the keep-alive connections under their
    clients: 44 of 100 keep-alive clients' requests, sent on a connection being closed, got
    ServerDisconnectedError (audit). Each answer now says ``Connection: close``, so the next
    request opens a connection of its own."""
    gw = await make_gateway(real_sleep=True)
    life = gw.app[LIVE].life
    status, headers, _ = await gw.chat()
    assert status == 200 and headers.get("Connection", "").lower() != "close"
    life.draining = True
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["Connection"].lower() == "close"
    gw.fake.script(Stream([chunk({"content": "hi"}), chunk({}, "stop")]))
    status, headers, body = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                           "messages": [{"role": "user", "content": "x"}]})  # fmt: skip
    assert status == 200 and headers["Connection"].lower() == "close" and body.rstrip().endswith(b"[DONE]")
    status, headers, _ = await gw.chat(data=b"{not json")
    assert status == 400 and headers["Connection"].lower() == "close"
    async with gw.session.post(gw.base + "/v1/nowhere", json={}) as r:
        assert r.headers["Connection"].lower() == "close"


async def test_a_drain_waits_for_a_lull_in_arrivals_within_drain_s() -> None:
    """Nothing in flight is not the end while requests still come: a load balancer that has
    yet to see /readyz's 503 still sends here, and those requests are served."""
    from gateway.services import Lifecycle

    life = Lifecycle()
    started = time.monotonic()
    await drain(life, drain_s=5.0, lull_s=0.3)  # nothing came: at once
    assert time.monotonic() - started < 0.1
    life.arrived = time.monotonic()
    started = time.monotonic()
    await drain(life, drain_s=5.0, lull_s=0.3)
    assert 0.25 <= time.monotonic() - started < 0.6

    async def arrive_again() -> None:
        await asyncio.sleep(0.2)
        life.arrived = time.monotonic()

    life.arrived = started = time.monotonic()
    again = asyncio.create_task(arrive_again())
    await drain(life, drain_s=5.0, lull_s=0.3)
    await again
    assert 0.45 <= time.monotonic() - started < 0.8  # the second arrival's lull
    life.arrived = started = time.monotonic()
    await drain(life, drain_s=0.2, lull_s=5.0)  # never past drain_s
    assert time.monotonic() - started < 0.4
