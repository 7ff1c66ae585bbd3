"""The Responses API's WebSocket mode (``GET /v1/responses`` with ``Upgrade: websocket``): each
``response.create`` frame is one request through POST /v1/responses's pipeline, its events one
text frame each; where the mode is off, the upgrade is answered 426 and never forwarded.

The handshake's headers are Codex 0.171.0's on its built-in provider (``openai_base_url`` in
config.toml), recorded by a listener that logged each request's head (audit of 2026-11-30):
it opens the WebSocket before any HTTP request and falls back to HTTPS on a 426 alone. The
frames are as the openai SDK 3.57 types them (``openai/types/responses/responses_client_event.py``)
and as Codex 0.171 and the Agents SDK 0.24 send them (``stream: true`` included)."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp
import pytest

from gateway.config import parse_config
from gateway.live import LIVE
from gateway.server import drain
from tests.fakeupstream import FakeUpstream, Hang, Stream, responses_error, responses_stream

OPERATOR = "sk-OPERATOR-SECRET"
# Codex 0.171.0's handshake, less its session ids and turn metadata (which the gateway never reads).
CODEX_HANDSHAKE = {
    "Authorization": "Bearer dummy",
    "User-Agent": "codex_exec/0.171.0 (Debian 12.0.0; x86_64) unknown (codex_exec; 0.171.0)",
    "originator": "codex_exec",
    "openai-beta": "responses_websockets=2026-02-06",
    "version": "0.171.0",
}


OFF = "server: {responses_websocket: false}\n"


async def test_an_upgrade_is_answered_426_in_the_responses_shape_and_never_forwarded(make_gateway) -> None:
    gw = await make_gateway(OFF, upstream_yaml=f", api_key: {OPERATOR}")
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE)
    assert refused.value.status == 426
    assert gw.fake.requests == []
    assert gw.metric("llm_gateway_upstream_attempts_total", upstream="primary", outcome="unknown") == 0

    # The body, as a client that reads it (the openai SDK's error) gets it.
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "AK4kJq+TYivE45J4c807RQ==", **CODEX_HANDSHAKE}  # fmt: skip
    async with gw.session.get(gw.base + "/v1/responses", headers=upgrade) as r:
        status, headers, body = r.status, r.headers, await r.read()
    assert status == 426
    assert headers["x-llm-attempts"] == "0" and headers["x-should-retry"] == "false"
    assert headers["Content-Type"].startswith("application/json")
    error = json.loads(body)["error"]
    assert error["code"] == "websocket_not_supported" and error["param"] is None
    assert "POST /v1/responses" in error["message"]
    assert OPERATOR.encode() not in body
    assert gw.fake.requests == []


async def test_the_upgrade_is_refused_before_the_key_check(make_gateway) -> None:
    """Codex retries a refused handshake other than 426 up to 5 times before HTTPS, where a bad
    key gets the 400 it shows at once: the upgrade is refused alike for every caller."""
    gw = await make_gateway(extra_yaml="server: {client_keys: [gw-key-1], responses_websocket: false}\n")
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE)
    assert refused.value.status == 426
    assert gw.fake.requests == []


async def test_a_plain_get_of_the_path_is_still_forwarded(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.get(gw.base + "/v1/responses", headers={"Authorization": "Bearer x"}) as r:
        await r.read()
    assert [(q.method, q.path) for q in gw.fake.requests] == [("GET", "/v1/responses")]


# --- the mode itself ---------------------------------------------------------------------

FIRST = {"type": "response.create", "model": "gpt-5-codex", "stream": True, "store": False,
         "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}  # fmt: skip


async def _turn(ws: aiohttp.ClientWebSocketResponse, frame: dict) -> list[dict]:
    """The events one frame is answered with, up to its end (completed, incomplete, failed, error)."""
    await ws.send_json(frame)
    events = []
    while True:
        msg = await ws.receive(timeout=10)
        assert msg.type is aiohttp.WSMsgType.TEXT, msg
        event = json.loads(msg.data)
        events.append(event)
        if event["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events


async def test_a_turn_is_one_request_through_the_pipeline_each_event_one_frame(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=f", api_key: {OPERATOR}")
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        events = await _turn(ws, FIRST)
        again = await _turn(ws, FIRST)
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert any(e["type"] == "response.output_text.delta" for e in events)
    assert [e["type"] for e in again] == [e["type"] for e in events]
    sent = gw.fake.responses_requests()
    assert [r.method for r in sent] == ["POST", "POST"]
    body = sent[0].json()
    assert body["stream"] is True and "type" not in body and body["input"] == FIRST["input"]
    assert sent[0].headers["Authorization"] == f"Bearer {OPERATOR}"
    assert "responses_websockets" not in sent[0].headers.get("openai-beta", "")
    assert gw.metric("llm_gateway_requests_total", upstream="primary", model="gpt-5-codex", status="200",
                     error_type="none") == 2  # fmt: skip


async def test_a_turn_chained_to_the_last_response_is_sent_whole(make_gateway) -> None:
    """Codex sends each later turn as its new items and ``previous_response_id``, with
    ``store: false``: the connection's memory of the last response makes it whole upstream."""
    gw = await make_gateway()
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        first = await _turn(ws, FIRST)
        answer = first[-1]["response"]
        new = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and again"}]}]
        second = await _turn(ws, {**FIRST, "previous_response_id": answer["id"], "input": new})
        unknown = await _turn(ws, {**FIRST, "previous_response_id": "resp_unknown", "input": new})
    assert second[-1]["type"] == "response.completed"
    sent = [r.json() for r in gw.fake.responses_requests()]
    assert "previous_response_id" not in sent[1]
    assert sent[1]["input"] == [*FIRST["input"], *answer["output"], *new]
    # Another id goes on as it came: the upstream's answer (OpenAI's 400) is the error frame.
    assert sent[2]["previous_response_id"] == "resp_unknown"
    assert unknown[-1]["type"] == "error" and unknown[-1]["status"] == 400
    assert unknown[-1]["error"]["code"] == "previous_response_not_found"


async def test_generate_false_is_answered_here_and_chained_from(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        warm = await _turn(ws, {**FIRST, "generate": False})
        assert gw.fake.requests == []
        assert warm[0]["type"] == "response.created" and warm[-1]["type"] == "response.completed"
        rid = warm[-1]["response"]["id"]
        assert rid.startswith("resp_") and warm[-1]["response"]["output"] == []
        new = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}]
        done = await _turn(ws, {**FIRST, "previous_response_id": rid, "input": new})
    assert done[-1]["type"] == "response.completed"
    (sent,) = [r.json() for r in gw.fake.responses_requests()]
    assert sent["input"] == [*FIRST["input"], *new] and "generate" not in sent
    # Each response.create is a request of its own: the warm one too, with no upstream.
    assert gw.metric("llm_gateway_requests_total", upstream="none", model="gpt-5-codex", status="200",
                     error_type="none") == 1  # fmt: skip
    assert gw.metric("llm_gateway_requests_total", upstream="primary", model="gpt-5-codex", status="200",
                     error_type="none") == 1  # fmt: skip


async def test_a_warm_id_chained_away_from_its_connection_is_not_found_at_once(make_gateway) -> None:
    """Audit (Codex, the openai and Agents SDKs over a pool of three keys, one sitting out a rate
    limit): a ``generate: false`` id is the gateway's own. Chained over HTTP, the pool took it for
    a response some key holds, asked each in turn (each answered 400 not found) and waited out the
    limited one: 3 calls and a 28.2 s wait, then the 400. It is OpenAI's 400 at once now, over
    HTTP and from another connection alike, without a call, after a reload too; its own
    connection still expands it."""
    fake = await FakeUpstream().start()
    try:
        upstreams = "".join(f"  - {{name: k{i}, base_url: '{fake.url}', api_key: key-{i}, apis: [responses]}}\n"
                            for i in (1, 2, 3))  # fmt: skip
        gw = await make_gateway("pools:\n  - {name: gpt, models: ['gpt-*'], deployments: [k1, k2, k3]}\n",
                                fake=fake, upstreams=upstreams)  # fmt: skip
        fake.keys.limited_until("key-3", time.time() + 30)
        async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
            warm = await _turn(ws, {**FIRST, "store": True, "generate": False})
            rid = warm[-1]["response"]["id"]
            # As OpenAI writes its ids: resp_ and 48 lower-case hex digits.
            assert len(rid) == 53 and rid.startswith("resp_") and int(rid[5:], 16) >= 0 and rid == rid.lower()
            new = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}]
            live = gw.app[LIVE]
            await live.replace(live.services.cfg)  # a reload keeps the key: the id is still known
            async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as other:
                elsewhere = await _turn(other, {**FIRST, "previous_response_id": rid, "input": new})
            async with gw.session.post(gw.base + "/v1/responses", headers={"Authorization": "Bearer x"},
                                       json={"model": "gpt-5-codex", "input": "and continue",
                                             "previous_response_id": rid}) as r:  # fmt: skip
                status, body = r.status, await r.json()
            assert fake.requests == [] and gw.slept == []
            done = await _turn(ws, {**FIRST, "previous_response_id": rid, "input": new})  # its own: expanded
    finally:
        await fake.close()
    not_found = {"message": f"Previous response with id '{rid}' not found.", "type": "invalid_request_error",
                 "param": "previous_response_id", "code": "previous_response_not_found"}  # fmt: skip
    assert status == 400 and body == {"error": not_found}
    assert elsewhere[-1]["type"] == "error" and elsewhere[-1]["status"] == 400
    assert {k: v for k, v in elsewhere[-1]["error"].items() if k != "headers"} == not_found
    assert done[-1]["type"] == "response.completed"
    (sent,) = [r.json() for r in fake.responses_requests()]
    assert "previous_response_id" not in sent and sent["input"] == [*FIRST["input"], *new]
    # Answered by the gateway, as the warm turn was: no upstream named in the metrics either.
    assert gw.metric("llm_gateway_requests_total", upstream="none", model="gpt-5-codex", status="400",
                     error_type="unknown") == 2  # fmt: skip


async def test_an_upstream_error_is_an_error_frame_and_the_connection_goes_on(make_gateway) -> None:
    gw = await make_gateway()
    limited = responses_error(429, "Rate limit reached for gpt-5-codex. Please try again in 45s.", "requests",
                              "rate_limit_exceeded")  # fmt: skip
    limited.headers = {"retry-after": "45"}
    gw.fake.script(limited)
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        (error,) = await _turn(ws, FIRST)
        after = await _turn(ws, FIRST)
    assert error["type"] == "error" and error["status"] == 429
    assert error["error"]["code"] == "rate_limit_exceeded" and "Rate limit reached" in error["error"]["message"]
    assert error["headers"]["retry-after"] == "45" and error["headers"]["x-llm-error-type"] == "rate_limit"
    assert after[-1]["type"] == "response.completed"


async def test_frames_it_cannot_take_are_answered_with_an_error_frame(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_str("{not json")
        bad = json.loads((await ws.receive(timeout=5)).data)
        (background,) = await _turn(ws, {**FIRST, "background": True, "stream_id": "lane-1"})
        await ws.send_json({"type": "response.processed", "response_id": "resp_x"})  # Codex's: no answer
        (no_model,) = await _turn(ws, {"type": "response.create", "input": "hi"})
        done = await _turn(ws, FIRST)
    assert bad["type"] == "error" and bad["status"] == 400 and bad["error"]["code"] == "invalid_json"
    assert background["error"]["param"] == "background" and background["stream_id"] == "lane-1"
    assert no_model["status"] == 400 and no_model["error"]["type"] == "invalid_request_error"
    assert done[-1]["type"] == "response.completed"
    assert len(gw.fake.responses_requests()) == 1


async def test_stream_id_is_echoed_on_every_event_of_its_turn(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        events = await _turn(ws, {**FIRST, "stream_id": "lane-7"})
    assert {e.get("stream_id") for e in events} == {"lane-7"}
    assert "stream_id" not in gw.fake.responses_requests()[0].json()


async def test_a_turn_is_translated_for_a_chat_upstream(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat], model_map: {'gpt-*': qwen}")
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        first = await _turn(ws, FIRST)
        new = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "more"}]}]
        second = await _turn(ws, {**FIRST, "previous_response_id": first[-1]["response"]["id"], "input": new})
    assert first[-1]["type"] == "response.completed" and second[-1]["type"] == "response.completed"
    sent = [r.json() for r in gw.fake.chat_requests()]
    assert [m["role"] for m in sent[1]["messages"]] == ["user", "assistant", "user"]


async def test_a_handshake_without_a_good_key_is_refused_before_the_upgrade(make_gateway) -> None:
    gw = await make_gateway(extra_yaml="server: {client_keys: [gw-key-1]}\n")
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gw.session.ws_connect(gw.base + "/v1/responses", headers={"Authorization": "Bearer wrong"})
    assert refused.value.status == 401
    async with gw.session.ws_connect(gw.base + "/v1/responses",
                                     headers={"Authorization": "Bearer gw-key-1"}) as ws:  # fmt: skip
        done = await _turn(ws, FIRST)
    assert done[-1]["type"] == "response.completed"


# --- nothing on a turn is HTTP on the connection ---------------------------------------------
# Every answer the pipeline writes at once is the error frame, and the connection goes on: a
# raw HTTP answer written into it was the client's protocol error 1002 (review of 2026-11-30).

KEYED = "server: {client_keys: [gw-key-1]}\n"


async def test_a_turn_whose_key_was_revoked_is_an_error_frame_warm_or_not(make_gateway) -> None:
    gw = await make_gateway(extra_yaml=KEYED)
    async with gw.session.ws_connect(gw.base + "/v1/responses",
                                     headers={"Authorization": "Bearer gw-key-1"}) as ws:  # fmt: skip
        assert (await _turn(ws, FIRST))[-1]["type"] == "response.completed"
        text = f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\nserver: {{client_keys: [gw-key-2]}}\n"
        await gw.app[LIVE].replace(parse_config(text, env={}))
        (warm,) = await _turn(ws, {**FIRST, "generate": False})
        (cold,) = await _turn(ws, FIRST)
    for refused in (warm, cold):
        assert refused["type"] == "error" and refused["status"] == 401, refused
        assert refused["error"]["type"] == "authentication_error" or refused["error"]["code"], refused
    assert len(gw.fake.responses_requests()) == 1


async def test_a_turn_made_too_large_by_its_expansion_is_a_413_frame(make_gateway) -> None:
    gw = await make_gateway(extra_yaml="server: {max_body_bytes: 1200}\n")
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        first = await _turn(ws, {**FIRST, "input": "x" * 500})
        new = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "y" * 500}]}]
        (big,) = await _turn(ws, {**FIRST, "previous_response_id": first[-1]["response"]["id"], "input": new})
        after = await _turn(ws, FIRST)
    assert big["type"] == "error" and big["status"] == 413 and big["error"]["code"] == "request_too_large"
    assert after[-1]["type"] == "response.completed"


async def test_each_turn_has_its_own_request_id(make_gateway) -> None:
    gw = await make_gateway()
    headers = {**CODEX_HANDSHAKE, "x-request-id": "handshake-1"}
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=headers) as ws:
        (one,) = await _turn(ws, {"type": "response.create", "input": "hi"})  # no model: refused
        (two,) = await _turn(ws, {"type": "response.create", "input": "hi"})
    ids = {one["headers"]["x-request-id"], two["headers"]["x-request-id"]}
    assert len(ids) == 2 and "handshake-1" not in ids
    assert one["error"]["headers"] == one["headers"]


# --- shutdown -------------------------------------------------------------------------------


async def _until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(500):  # polled: nothing offers an event for it
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def test_a_drain_closes_idle_connections_refuses_new_ones_and_cuts_a_waiting_turn(make_gateway) -> None:
    """SIGTERM: an idle connection is closed 1001 at once; a new upgrade is refused 503 before
    it; a turn still waiting for its upstream's head when drain_s runs out gets the typed
    gateway_shutdown error frame, then its connection 1001."""
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(Hang(30))
    life = gw.app[LIVE].life
    busy = await gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE)
    idle = await gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE)
    await busy.send_json(FIRST)
    await _until(lambda: len(gw.fake.requests) == 1 and life.in_flight == 1, "the turn waits for its head")
    life.start_draining()
    gone = await idle.receive(timeout=5)
    assert gone.type is aiohttp.WSMsgType.CLOSE and gone.data == aiohttp.WSCloseCode.GOING_AWAY
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE)
    assert refused.value.status == 503
    await drain(life, drain_s=0.0)
    cut = json.loads((await busy.receive(timeout=5)).data)
    assert cut["type"] == "error" and cut["status"] == 503 and cut["error"]["code"] == "gateway_shutdown"
    assert cut["headers"]["retry-after"]
    closed = await busy.receive(timeout=5)
    assert closed.type is aiohttp.WSMsgType.CLOSE and closed.data == aiohttp.WSCloseCode.GOING_AWAY
    await idle.close()
    await busy.close()


async def test_a_busy_connection_closes_after_its_turn_and_starts_no_other(make_gateway) -> None:
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(Hang(0.5))  # then dropped: the retry answers
    life = gw.app[LIVE].life
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_json(FIRST)
        await _until(lambda: life.in_flight == 1, "the turn is under way")
        life.start_draining()
        await ws.send_json(FIRST)  # during the drain: not started
        events = []
        while (msg := await ws.receive(timeout=5)).type is aiohttp.WSMsgType.TEXT:
            events.append(json.loads(msg.data))
        assert msg.type is aiohttp.WSMsgType.CLOSE and msg.data == aiohttp.WSCloseCode.GOING_AWAY
    # The frame sent during the drain is answered after the turn it came behind on its lane.
    assert [e["type"] for e in events][-2:] == ["response.completed", "error"]
    (refused,) = [e for e in events if e["type"] == "error"]
    assert refused["status"] == 503 and refused["error"]["code"] == "gateway_shutdown" and "stream_id" not in refused
    assert gw.metric("llm_gateway_requests_total", upstream="primary", model="gpt-5-codex", status="200",
                     error_type="none") == 1  # fmt: skip


async def test_a_turn_that_comes_once_drain_s_ran_out_is_an_error_frame(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        gw.app[LIVE].life.shutting_down = True  # the listener is closing (Lifecycle.cut)
        (cut,) = await _turn(ws, FIRST)
        gw.app[LIVE].life.shutting_down = False
        after = await _turn(ws, FIRST)
    assert cut["status"] == 503 and cut["error"]["code"] == "gateway_shutdown"
    assert after[-1]["type"] == "response.completed"


async def test_a_turn_chained_to_a_stored_response_goes_as_sent_where_its_upstream_holds_it(make_gateway) -> None:
    """``store: true`` on a native Responses upstream: the provider holds the last response, so a
    turn chained to it is sent as it came (the pool's pin, its stored route and the provider's
    cache go by the id). Through a translation no upstream holds it: the turn is made whole."""
    stored = {**FIRST, "store": True}
    new = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "more"}]}]
    gw = await make_gateway()
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        first = await _turn(ws, stored)
        rid = first[-1]["response"]["id"]
        second = await _turn(ws, {**stored, "previous_response_id": rid, "input": new})
    assert second[-1]["type"] == "response.completed"
    sent = [r.json() for r in gw.fake.responses_requests()]
    assert sent[1]["previous_response_id"] == rid and sent[1]["input"] == new

    chat = await make_gateway(upstream_yaml=", apis: [chat], model_map: {'gpt-*': qwen}")
    async with chat.session.ws_connect(chat.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        first = await _turn(ws, stored)
        second = await _turn(ws, {**stored, "previous_response_id": first[-1]["response"]["id"], "input": new})
    assert second[-1]["type"] == "response.completed", second
    assert [m["role"] for m in chat.fake.chat_requests()[1].json()["messages"]] == ["user", "assistant", "user"]


# --- the connection's own end: its age, a reload, a frame too big ------------------------------
# OpenAI ends a connection at 60 minutes with an error event of status 400, no stream_id, code
# websocket_connection_limit_reached (the WebSocket mode guide; Codex's own test of it,
# codex-rs/codex-api/src/endpoint/responses_websocket.rs); the gateway then closes 1001.


def _closes(caplog: pytest.LogCaptureFixture) -> list[dict]:
    return [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "websocket_closed"]


async def _until_closed(ws: aiohttp.ClientWebSocketResponse) -> tuple[list[dict], aiohttp.WSMessage]:
    """The text frames that come before the close, and the close."""
    events = []
    while (msg := await ws.receive(timeout=10)).type is aiohttp.WSMsgType.TEXT:
        events.append(json.loads(msg.data))
    return events, msg


def _limit_reached(event: dict) -> None:
    assert event["type"] == "error" and event["status"] == 400 and "stream_id" not in event, event
    assert event["error"]["type"] == "invalid_request_error"
    assert event["error"]["code"] == "websocket_connection_limit_reached"
    assert "60 minutes" in event["error"]["message"]


async def test_a_connection_past_its_hour_ends_after_its_turn_with_the_limit_event(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    """The clock passes the hour while a turn runs: the turn is answered whole, then the limit's
    error event and the close; a turn just short of the hour goes on as any."""
    caplog.set_level(logging.INFO, logger="gateway")
    now = [1000.0]
    gw = await make_gateway(monotonic=lambda: now[0])

    def an_hour_passes(payload: dict) -> None:
        now[0] += 2.0  # the turn that crosses 3600 s
        return None  # the fake's normal answer

    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        assert (await _turn(ws, FIRST))[-1]["type"] == "response.completed"
        now[0] += 3599.0
        gw.fake.script(an_hour_passes)
        await ws.send_json(FIRST)
        events, closed = await _until_closed(ws)
    *turn, limit = events
    assert turn[0]["type"] == "response.created" and turn[-1]["type"] == "response.completed"
    _limit_reached(limit)
    assert closed.type is aiohttp.WSMsgType.CLOSE and closed.data == aiohttp.WSCloseCode.GOING_AWAY
    assert closed.extra == "connection limit reached; connect again"
    assert len(gw.fake.responses_requests()) == 2
    (line,) = _closes(caplog)
    assert line["reason"] == "max_age" and line["code"] == 1001 and line["frames"] == 2 and line["age_s"] == 3601.0


async def test_a_frame_that_comes_past_the_hour_starts_nothing(make_gateway) -> None:
    now = [0.0]
    gw = await make_gateway(monotonic=lambda: now[0])
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        assert (await _turn(ws, FIRST))[-1]["type"] == "response.completed"
        now[0] = 3600.0  # between turns (the worker waits out the real hour: the frame wakes it)
        await ws.send_json(FIRST)
        events, closed = await _until_closed(ws)
    *refused, limit = events
    _limit_reached(limit)
    assert closed.data == aiohttp.WSCloseCode.GOING_AWAY
    # Read before the connection decided to end, the frame is refused on its own (the default
    # lane's: no stream_id) with the same code; read after the close, it is not read at all.
    assert [e["error"]["code"] for e in refused] in ([], ["websocket_connection_limit_reached"])
    assert len(gw.fake.responses_requests()) == 1


async def test_an_idle_connection_is_ended_at_its_age_without_a_frame(make_gateway) -> None:
    gw = await make_gateway("server: {responses_websocket_max_age_s: 0.3}\n")
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        (limit,), closed = await _until_closed(ws)
    assert limit["error"]["code"] == "websocket_connection_limit_reached"
    assert "0.3 seconds" in limit["error"]["message"]
    assert closed.data == aiohttp.WSCloseCode.GOING_AWAY
    assert gw.fake.requests == []


async def test_a_reload_that_turns_the_mode_off_ends_idle_connections_now_and_busy_ones_after_their_turn(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator who turns the mode off gets no new turn on any connection; a turn under way
    is answered whole. Then an upgrade is answered 426 (on which Codex goes on over HTTPS)."""
    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(Hang(0.5))  # then dropped: the retry answers
    life = gw.app[LIVE].life
    busy = await gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE)
    idle = await gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE)
    await busy.send_json(FIRST)
    await _until(lambda: life.in_flight == 1, "the turn is under way")
    text = f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\n{OFF}"
    await gw.app[LIVE].replace(parse_config(text, env={}))
    gone = await idle.receive(timeout=5)
    assert gone.type is aiohttp.WSMsgType.CLOSE and gone.data == aiohttp.WSCloseCode.GOING_AWAY
    assert "no longer serves the WebSocket mode" in gone.extra
    await busy.send_json(FIRST)  # after the reload: not started
    events, closed = await _until_closed(busy)
    # The frame sent after the reload is answered after the turn it came behind on its lane.
    assert [e["type"] for e in events][-2:] == ["response.completed", "error"]
    (refused,) = [e for e in events if e["type"] == "error"]
    assert refused["status"] == 426 and refused["error"]["code"] == "websocket_not_supported"
    assert closed.data == aiohttp.WSCloseCode.GOING_AWAY
    assert len(gw.fake.responses_requests()) == 2  # the hung try and its retry: one turn
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE)
    assert refused.value.status == 426
    assert sorted(line["reason"] for line in _closes(caplog)) == ["mode_off", "mode_off"]
    await idle.close()
    await busy.close()


async def test_a_reload_that_keeps_the_mode_on_ends_nothing(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        assert (await _turn(ws, FIRST))[-1]["type"] == "response.completed"
        text = f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\nserver: {{max_body_bytes: 100000}}\n"
        await gw.app[LIVE].replace(parse_config(text, env={}))
        assert (await _turn(ws, FIRST))[-1]["type"] == "response.completed"


async def test_reloads_during_a_long_turn_leave_the_frames_room(make_gateway) -> None:
    """Each reload put a wake into the connection's 8-frame queue: ten during one long turn
    filled it, and the client's next frame held the reading until the turn ended, no frame read
    and no ping answered (review). A wake takes no frame's place now: the frames sent are read
    at once, and answered in turn after it."""
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(Hang(2.0))  # then dropped: the retry answers
    life = gw.app[LIVE].life
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_json(FIRST)
        await _until(lambda: len(gw.fake.responses_requests()) == 1, "the turn is under way")
        (connection,) = life.connections
        text = f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\n"
        for _ in range(10):
            await gw.app[LIVE].replace(parse_config(text, env={}))
        for _ in range(3):
            await ws.send_json(FIRST)
        await _until(lambda: connection.lanes[None].queue.qsize() == 3, "the frames are read")
        assert len(gw.fake.responses_requests()) == 1  # while the turn's first try still hangs
        ends = []
        while len(ends) < 4:
            event = json.loads((await ws.receive(timeout=10)).data)
            if event["type"] in ("response.completed", "error"):
                ends.append(event["type"])
    assert ends == ["response.completed"] * 4


async def test_a_frame_too_big_closes_1009_saying_its_limit_and_is_logged(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    """As OpenAI's server (which closes 1009 with no error event at 16 MiB, lidge-jun/opencodex#2473):
    aiohttp's max_msg_size still refuses it unread, and the close reason says the limit (aiohttp's
    own close has none)."""
    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway("server: {max_body_bytes: 2000}\n")
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_json({**FIRST, "input": "x" * 3000})
        events, closed = await _until_closed(ws)
    assert events == []
    assert closed.type is aiohttp.WSMsgType.CLOSE and closed.data == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
    assert closed.extra == "message too big: a frame may be at most 2000 bytes"
    (line,) = _closes(caplog)
    assert line["reason"] == "message_too_big" and line["code"] == 1009 and "exceeds limit 2000" in line["detail"]
    assert "xxx" not in json.dumps(line)
    assert gw.fake.requests == []


# --- lanes: stream_id multiplexing ---------------------------------------------------------------
# The guide's "Run conversations in parallel" (https://developers.openai.com/api/docs/guides/websocket-mode):
# turns of one stream_id run in order, never overlapping; turns of different ones run at once, their
# events interleaved; at most 16 responses in flight on a connection (more are queued until one
# ends), at most 32 named stream_ids in its life (websocket_stream_limit_reached past them).


def _slow(rid: str, pause_s: float = 1.0) -> Stream:
    """An answer that stays out ``pause_s`` after its first event (a slow first token)."""
    return Stream(responses_stream(rid=rid), then="eof", pause_s=pause_s)


async def _ends(ws: aiohttp.ClientWebSocketResponse, count: int) -> list[dict]:
    """Every event up to ``count`` turns' ends, each frame whole JSON whatever lane it is of."""
    events: list[dict] = []
    while sum(e["type"] in ("response.completed", "error") for e in events) < count:
        msg = await ws.receive(timeout=10)
        assert msg.type is aiohttp.WSMsgType.TEXT, msg
        events.append(json.loads(msg.data))
    return events


async def test_two_lanes_run_at_once_in_one_answers_time(make_gateway) -> None:
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(_slow("resp_a"), _slow("resp_b"))
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        began = time.monotonic()
        await ws.send_json({**FIRST, "stream_id": "planner"})
        await ws.send_json({**FIRST, "stream_id": "research"})
        # Both upstream calls are out while the first still waits for its answer's rest.
        await _until(lambda: len(gw.fake.responses_requests()) == 2, "both lanes call their upstream")
        events = await _ends(ws, 2)
        took = time.monotonic() - began
    assert took < 1.8, took  # one answer's pause (1 s), not two
    ends = {e["stream_id"]: e["response"]["id"] for e in events if e["type"] == "response.completed"}
    assert ends == {"planner": "resp_a", "research": "resp_b"}
    assert {e["stream_id"] for e in events} == {"planner", "research"}  # each event its lane's, whole


async def test_a_lane_keeps_its_order_while_another_goes_past_it(make_gateway) -> None:
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(_slow("resp_a1", 0.5), Stream(responses_stream(rid="resp_b1"), then="eof"),
                   Stream(responses_stream(rid="resp_a2"), then="eof"))  # fmt: skip
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_json({**FIRST, "stream_id": "a"})
        await _until(lambda: len(gw.fake.responses_requests()) == 1, "lane a's first turn is out")
        await ws.send_json({**FIRST, "stream_id": "a"})  # waits for a's first
        await ws.send_json({**FIRST, "stream_id": "b"})  # goes past it
        events = await _ends(ws, 3)
    done = [(e["stream_id"], e["response"]["id"]) for e in events if e["type"] == "response.completed"]
    assert done == [("b", "resp_b1"), ("a", "resp_a1"), ("a", "resp_a2")]
    created = [e["stream_id"] for e in events if e["type"] == "response.created"]
    assert created.count("a") == 2 and len(gw.fake.responses_requests()) == 3


async def test_each_lane_remembers_its_own_last_and_a_new_lane_forks_one(make_gateway) -> None:
    """``store: false``: each lane's last response makes its next turn whole upstream; a turn on
    a new lane chained to the planner's forks it, and the planner goes on from the same parent."""
    gw = await make_gateway()
    new = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "more"}]}]
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        plan = (await _turn(ws, {**FIRST, "stream_id": "planner"}))[-1]["response"]
        risks = (await _turn(ws, {**FIRST, "stream_id": "research"}))[-1]["response"]
        fork = await _turn(ws, {**FIRST, "stream_id": "critic", "previous_response_id": plan["id"], "input": new})
        on = await _turn(ws, {**FIRST, "stream_id": "planner", "previous_response_id": plan["id"], "input": new})
        back = await _turn(ws, {**FIRST, "stream_id": "research", "previous_response_id": risks["id"],
                                "input": new})  # fmt: skip
    assert fork[-1]["type"] == on[-1]["type"] == back[-1]["type"] == "response.completed"
    sent = [r.json() for r in gw.fake.responses_requests()]
    assert all("previous_response_id" not in body for body in sent)
    assert sent[2]["input"] == sent[3]["input"] == [*FIRST["input"], *plan["output"], *new]
    assert sent[4]["input"] == [*FIRST["input"], *risks["output"], *new]


async def test_the_33rd_named_lane_is_refused_and_the_connection_goes_on(make_gateway) -> None:
    gw = await make_gateway()
    warm = {**FIRST, "generate": False}  # answered here: 32 lanes without 32 upstream calls
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        for n in range(32):
            assert (await _turn(ws, {**warm, "stream_id": f"agent_{n + 1}"}))[-1]["type"] == "response.completed"
        (refused,) = await _turn(ws, {**warm, "stream_id": "agent_33"})
        again = await _turn(ws, {**warm, "stream_id": "agent_7"})  # a lane it has: taken
        default = await _turn(ws, FIRST)  # the default lane is not counted
    assert refused["type"] == "error" and refused["status"] == 400 and refused["stream_id"] == "agent_33"
    assert refused["error"]["type"] == "invalid_request_error"
    assert refused["error"]["code"] == "websocket_stream_limit_reached" and refused["error"]["param"] == "stream_id"
    assert again[-1]["type"] == "response.completed" and again[-1]["stream_id"] == "agent_7"
    assert default[-1]["type"] == "response.completed" and "stream_id" not in default[-1]


async def test_a_bad_stream_id_is_refused_naming_no_lane(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        (refused,) = await _turn(ws, {**FIRST, "stream_id": "not a lane"})
        done = await _turn(ws, FIRST)
    assert refused["status"] == 400 and refused["error"]["code"] == "invalid_stream_id" and "stream_id" not in refused
    assert done[-1]["type"] == "response.completed" and len(gw.fake.responses_requests()) == 1


async def test_past_16_in_flight_a_turn_waits_for_a_place(make_gateway) -> None:
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(*(_slow(f"resp_{n}", 1.0) for n in range(16)))
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        for n in range(17):
            await ws.send_json({**FIRST, "stream_id": f"lane_{n}"})
        await _until(lambda: len(gw.fake.responses_requests()) == 16, "16 turns are out")
        await asyncio.sleep(0.3)
        assert len(gw.fake.responses_requests()) == 16  # the 17th waits, queued, not refused
        events = await _ends(ws, 17)
    assert sum(e["type"] == "response.completed" for e in events) == 17
    assert not any(e["type"] == "error" for e in events)


async def test_a_drain_lets_the_turns_of_every_lane_end_then_closes(make_gateway) -> None:
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(_slow("resp_a", 0.5), _slow("resp_b", 0.5))
    life = gw.app[LIVE].life
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_json({**FIRST, "stream_id": "a"})
        await ws.send_json({**FIRST, "stream_id": "b"})
        await _until(lambda: life.in_flight == 2, "both turns are under way")
        life.start_draining()
        await ws.send_json({**FIRST, "stream_id": "c"})  # during the drain: not started
        events, closed = await _until_closed(ws)
    done = sorted(e["stream_id"] for e in events if e["type"] == "response.completed")
    (refused,) = [e for e in events if e["type"] == "error"]
    assert done == ["a", "b"] and refused["stream_id"] == "c" and refused["error"]["code"] == "gateway_shutdown"
    assert closed.type is aiohttp.WSMsgType.CLOSE and closed.data == aiohttp.WSCloseCode.GOING_AWAY
    assert len(gw.fake.responses_requests()) == 2


async def test_a_full_lane_holds_up_no_other_lane_nor_the_pings(make_gateway) -> None:
    """The reading never waits for a lane: ten turns queued on one lane behind a slow one leave
    another lane's turn and a ping answered at once (they waited for the slow one's end)."""
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(_slow("resp_a1", 1.5))
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE, autoping=False) as ws:
        began = time.monotonic()
        for _ in range(10):
            await ws.send_json({**FIRST, "stream_id": "a"})
        await ws.send_json({**FIRST, "stream_id": "b"})
        await ws.ping(b"probe")
        seen: dict[str, float] = {}
        while "b" not in seen or "pong" not in seen:
            msg = await ws.receive(timeout=10)
            if msg.type is aiohttp.WSMsgType.PONG:
                seen["pong"] = time.monotonic() - began
            elif (event := json.loads(msg.data))["type"] == "response.completed":
                seen.setdefault(event["stream_id"], time.monotonic() - began)
        events = await _ends(ws, 10 - ("a" in seen))
    assert "a" not in seen and seen["b"] < 1.0 and seen["pong"] < 1.0, seen
    assert sum(e["type"] == "response.completed" for e in events) == 10 - ("a" in seen)


async def test_the_turns_a_connection_holds_are_bounded_across_its_lanes(make_gateway) -> None:
    """16 in flight and 8 queued, all lanes together: a frame past them is refused on its lane
    (each frame held is one of up to max_body_bytes), and the turns taken all end."""
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(*(_slow(f"resp_{n}", 1.0) for n in range(16)))
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        for n in range(24):
            await ws.send_json({**FIRST, "stream_id": f"lane_{n % 20}"})
        await ws.send_json({**FIRST, "stream_id": "lane_0"})
        await ws.send_json({**FIRST, "stream_id": "late"})
        events = await _ends(ws, 26)
        after = await _turn(ws, {**FIRST, "stream_id": "late"})  # room again: taken
    refused = [e for e in events if e["type"] == "error"]
    # A new lane's at once; lane_0's after the two turns it took before it, in their order.
    assert [e["stream_id"] for e in refused] == ["late", "lane_0"]
    on_lane_0 = [e["type"] for e in events if e.get("stream_id") == "lane_0" and e["type"] in ("response.completed",
                                                                                              "error")]  # fmt: skip
    assert on_lane_0 == ["response.completed", "response.completed", "error"]
    assert all(e["status"] == 429 and e["error"]["code"] == "websocket_queue_full" for e in refused)
    assert refused[0]["error"]["param"] == "stream_id"
    assert sum(e["type"] == "response.completed" for e in events) == 24
    assert after[-1]["type"] == "response.completed" and after[-1]["stream_id"] == "late"


@pytest.mark.parametrize(("why", "status", "code"), [
    ("drain", 503, "gateway_shutdown"),
    ("max_age", 400, "websocket_connection_limit_reached"),
    ("mode_off", 426, "websocket_not_supported"),
])  # fmt: skip
async def test_turns_queued_when_the_connection_ends_are_each_answered_on_their_lane(
    make_gateway, why: str, status: int, code: str
) -> None:
    """A drain, the connection's age, a reload that turns the mode off: the turn under way is
    answered whole, and each turn still queued (they were dropped without a word) gets an error
    frame with its stream_id saying why, after the turn under way on its lane (a client matches
    a lane's answers by their order: they came ahead of it), before the connection closes."""
    gw = await make_gateway("server: {responses_websocket_max_age_s: 0.5}\n" if why == "max_age" else "",
                            real_sleep=True)  # fmt: skip
    gw.fake.script(_slow("resp_a1", 1.5))
    life = gw.app[LIVE].life
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_json({**FIRST, "stream_id": "a"})
        await ws.send_json({**FIRST, "stream_id": "a"})  # queued behind a's first
        await ws.send_json(FIRST)  # the default lane's, queued behind nothing: started at once
        await ws.send_json({**FIRST, "stream_id": "a"})
        await _until(lambda: len(gw.fake.responses_requests()) == 2, "a's first and the default's are out")
        began = time.monotonic()
        if why == "drain":
            life.start_draining()
        elif why == "mode_off":
            text = f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\n{OFF}"
            await gw.app[LIVE].replace(parse_config(text, env={}))
        timed: list[tuple[float, dict]] = []
        while (msg := await ws.receive(timeout=10)).type is aiohttp.WSMsgType.TEXT:
            timed.append((time.monotonic() - began, json.loads(msg.data)))
        assert msg.data == aiohttp.WSCloseCode.GOING_AWAY
    refused = [(at, e) for at, e in timed if e["type"] == "error" and "stream_id" in e]
    assert [e["stream_id"] for _, e in refused] == ["a", "a"]
    assert all(e["status"] == status and e["error"]["code"] == code for _, e in refused), refused
    on_a = [e["type"] for _, e in timed if e.get("stream_id") == "a" and e["type"] in ("response.completed", "error")]
    assert on_a == ["response.completed", "error", "error"]
    done = [e.get("stream_id") for _, e in timed if e["type"] == "response.completed"]
    assert sorted(done, key=str) == [None, "a"]
    assert len(gw.fake.responses_requests()) == 2


async def test_a_fork_of_a_response_still_streaming_is_refused_as_not_found(make_gateway) -> None:
    """A turn on lane b chained to the response lane a is still generating went upstream
    unresolved; the response is not stored yet, so it is refused as OpenAI refuses an id it does
    not hold (400 previous_response_not_found). Sent again once a's turn has completed, it is
    taken, and a's conversation goes before its input."""
    gw = await make_gateway(real_sleep=True)
    # The pause after the first text: the gateway holds a stream's head until its first output.
    gw.fake.script(Stream(responses_stream(rid="resp_a1"), then="eof", pause_s=1.0, pause_after=5))
    new = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "more"}]}]
    fork = {**FIRST, "stream_id": "b", "previous_response_id": "resp_a1", "input": new}
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_json({**FIRST, "stream_id": "a"})
        created = json.loads((await ws.receive(timeout=5)).data)
        assert created["type"] == "response.created" and created["response"]["id"] == "resp_a1"
        await ws.send_json(fork)
        first = await _ends(ws, 2)
        after = await _turn(ws, fork)
    refused = [e for e in first if e["type"] == "error"]
    assert [e["stream_id"] for e in refused] == ["b"]
    assert refused[0]["status"] == 400 and refused[0]["error"]["code"] == "previous_response_not_found"
    assert refused[0]["error"]["param"] == "previous_response_id" and "resp_a1" in refused[0]["error"]["message"]
    assert first[-1]["type"] == "response.completed" and first[-1]["stream_id"] == "a"  # refused before a ended
    assert after[-1]["type"] == "response.completed" and after[-1]["stream_id"] == "b"
    sent = [r.json() for r in gw.fake.responses_requests()]
    assert len(sent) == 2 and "previous_response_id" not in sent[1]
    assert sent[1]["input"][-1] == new[0] and sent[1]["input"][: len(FIRST["input"])] == FIRST["input"]


async def test_frames_refused_as_read_go_out_at_once_unless_their_lane_is_busy(make_gateway) -> None:
    """An invalid stream_id, a frame that is no JSON, an unknown type on an idle lane: each is
    answered as it is read, not behind the default lane's turn under way. One on a busy lane goes
    out after that lane's turn: its client matches the lane's answers by their order."""
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(_slow("resp_1", 1.5), _slow("resp_2", 1.5))
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_json(FIRST)
        await ws.send_json({**FIRST, "stream_id": "a"})
        await _until(lambda: len(gw.fake.responses_requests()) == 2, "both turns are out")
        began = time.monotonic()
        await ws.send_json({**FIRST, "stream_id": "not a lane"})
        await ws.send_str("{nope")
        await ws.send_json({"type": "response.cancel", "stream_id": "a"})
        await ws.send_json({"type": "response.cancel", "stream_id": "idle"})
        timed: list[tuple[float, dict]] = []
        while sum(e["type"] in ("response.completed", "error") for _, e in timed) < 6:
            timed.append((time.monotonic() - began, json.loads((await ws.receive(timeout=5)).data)))
    ends = [(e["type"], e.get("stream_id")) for _, e in timed if e["type"] in ("response.completed", "error")]
    assert ends[:3] == [("error", None), ("error", None), ("error", "idle")]
    assert all(at < 1.0 for at, e in timed[:3]), timed[:3]
    assert ends.index(("response.completed", "a")) < ends.index(("error", "a"))
    refused = [e for _, e in timed if e["type"] == "error"]
    assert [e["error"]["code"] for e in refused[:3]] == ["invalid_stream_id", "invalid_json", "invalid_event"]
    assert sum(e["type"] == "response.completed" for _, e in timed) == 2


async def test_refused_frames_open_no_lane(make_gateway) -> None:
    """A stream_id only counts toward the connection's 32 when a turn on it is taken: frames
    refused (an unknown type, a turn past what the connection holds) left their names counted,
    and the 32 real lanes after them were refused."""
    gw = await make_gateway()
    warm = {**FIRST, "generate": False}  # answered here: 32 lanes without 32 upstream calls
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        for n in range(40):
            (refused,) = await _turn(ws, {"type": "response.cancel", "stream_id": f"ghost_{n}"})
            assert refused["error"]["code"] == "invalid_event" and refused["stream_id"] == f"ghost_{n}"
        for n in range(32):
            assert (await _turn(ws, {**warm, "stream_id": f"agent_{n + 1}"}))[-1]["type"] == "response.completed"
        (limit,) = await _turn(ws, {**warm, "stream_id": "agent_33"})
        (ghost,) = await _turn(ws, {**warm, "stream_id": "ghost_0"})
    assert limit["error"]["code"] == ghost["error"]["code"] == "websocket_stream_limit_reached"
    assert gw.fake.requests == []


async def test_a_warm_turn_made_too_large_by_its_expansion_is_a_413_frame(make_gateway) -> None:
    """``generate: false`` calls no upstream, but what it is chained to is held for the next turn:
    expanded past ``max_body_bytes`` it is refused as a cold turn is, and nothing more is held."""
    gw = await make_gateway(extra_yaml="server: {max_body_bytes: 2000}\n")
    warm = {**FIRST, "generate": False, "stream_id": "a", "input": "x" * 1500}
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        first = (await _turn(ws, warm))[-1]["response"]["id"]
        (big,) = await _turn(ws, {**warm, "previous_response_id": first})
        (lasts,) = [c.lasts for c in gw.app[LIVE].life.connections]
    assert big["type"] == "error" and big["status"] == 413 and big["stream_id"] == "a"
    assert big["error"]["code"] == "request_too_large"
    assert [last.id for last in lasts.values()] == [first]
    assert gw.fake.requests == []


async def test_what_a_connection_remembers_is_bounded_across_its_lanes(make_gateway) -> None:
    """Each lane remembers its last response; all lanes together hold 2 × max_body_bytes at most
    (as JSON), the least recently used lane's forgotten first: a turn chained to it is then
    answered as one chained to any id the connection does not know."""
    gw = await make_gateway(extra_yaml="server: {max_body_bytes: 2000}\n")
    warm = {**FIRST, "generate": False, "input": "x" * 1200}  # about 1,230 bytes remembered each
    ids = {}
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        for lane in ("a", "b", "c"):
            ids[lane] = (await _turn(ws, {**warm, "stream_id": lane}))[-1]["response"]["id"]
        # a is used again (chained to): b is the least recently used when d comes.
        again = await _turn(ws, {**warm, "stream_id": "a", "previous_response_id": ids["a"], "input": "y"})
        ids["a"] = again[-1]["response"]["id"]
        await _turn(ws, {**warm, "stream_id": "d"})
        (lasts,) = [c.lasts for c in gw.app[LIVE].life.connections]
        held = sum(last.size for last in lasts.values())
        (lost,) = await _turn(ws, {**FIRST, "stream_id": "b", "previous_response_id": ids["b"], "input": "y"})
    assert sorted(lane for lane in lasts if lane is not None) == ["a", "c", "d"] and held <= 4000
    assert lost["status"] == 400 and lost["error"]["code"] == "previous_response_not_found"
    assert gw.fake.requests == []


async def test_a_fork_sent_once_the_response_completed_goes_on_at_once(make_gateway) -> None:
    """The response is remembered as its completed event goes out: a turn chained to it (a fork
    on another lane) starts at once, where it waited for the upstream to close its stream."""
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(Stream(responses_stream(rid="resp_a1"), then="stall"))
    new = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "more"}]}]
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_json({**FIRST, "stream_id": "a"})
        while json.loads((await ws.receive(timeout=5)).data)["type"] != "response.completed":
            pass
        began = time.monotonic()
        fork = await _turn(ws, {**FIRST, "stream_id": "b", "previous_response_id": "resp_a1", "input": new})
        took = time.monotonic() - began
    assert fork[-1]["type"] == "response.completed" and fork[-1]["stream_id"] == "b"
    assert took < 2.0, took
    sent = [r.json() for r in gw.fake.responses_requests()]
    assert "previous_response_id" not in sent[1] and sent[1]["input"][-1] == new[0]


async def test_refusals_past_64_held_go_out_at_once_and_the_turns_taken_are_answered(make_gateway) -> None:
    """Refusals on a busy lane wait for its turns, 64 of them at most; past that one goes out at
    once, out of its lane's order, where the connection was closed 1008 and the 24 turns it had
    taken, one already upstream, were cut with no answer (the client could not know to stop)."""
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(_slow("resp_a1", 1.0))
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_json({**FIRST, "stream_id": "a"})
        await _until(lambda: len(gw.fake.responses_requests()) == 1, "a's first turn is out")
        for _ in range(23 + 65):
            await ws.send_json({**FIRST, "stream_id": "a"})
        events = await _ends(ws, 24 + 65)
    ends = [e["type"] for e in events if e["type"] in ("response.completed", "error")]
    # The 65th refusal, past the 64 held, before the lane's turn under way; the 64 after its turns.
    assert ends == ["error"] + ["response.completed"] * 24 + ["error"] * 64, ends
    assert all(e["error"]["code"] == "websocket_queue_full" and e["stream_id"] == "a"
               for e in events if e["type"] == "error")  # fmt: skip
    assert len(gw.fake.responses_requests()) == 24


async def test_a_fork_refused_as_still_streaming_is_a_request_its_key_checked(make_gateway) -> None:
    """The refusal of a fork of a response still being generated goes through the turn's
    pipeline: counted and logged as a request, and a key revoked meanwhile is told 401."""
    gw = await make_gateway(extra_yaml=KEYED, real_sleep=True)
    gw.fake.script(Stream(responses_stream(rid="resp_a1"), then="eof", pause_s=1.0, pause_after=5),
                   Stream(responses_stream(rid="resp_b1"), then="eof", pause_s=1.0, pause_after=5))  # fmt: skip
    new = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "more"}]}]
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers={"Authorization": "Bearer gw-key-1"}) as ws:
        await ws.send_json({**FIRST, "stream_id": "a"})
        assert json.loads((await ws.receive(timeout=5)).data)["type"] == "response.created"
        await ws.send_json({**FIRST, "stream_id": "b", "previous_response_id": "resp_a1", "input": new})
        (counted,) = [e for e in await _ends(ws, 2) if e["type"] == "error"]
        await ws.send_json({**FIRST, "stream_id": "c"})
        assert json.loads((await ws.receive(timeout=5)).data)["type"] == "response.created"
        text = f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\nserver: {{client_keys: [gw-key-2]}}\n"
        await gw.app[LIVE].replace(parse_config(text, env={}))
        await ws.send_json({**FIRST, "stream_id": "d", "previous_response_id": "resp_b1", "input": new})
        (revoked,) = [e for e in await _ends(ws, 2) if e["type"] == "error"]
    assert counted["status"] == 400 and counted["error"]["code"] == "previous_response_not_found"
    assert counted["stream_id"] == "b" and counted["error"]["param"] == "previous_response_id"
    assert revoked["status"] == 401 and revoked["stream_id"] == "d"
    assert gw.metric("llm_gateway_requests_total", upstream="none", model="gpt-5-codex", status="400",
                     error_type="unknown") == 1  # fmt: skip
    assert gw.metric("llm_gateway_requests_total", upstream="none", model="gpt-5-codex", status="401",
                     error_type="auth") == 1  # fmt: skip


async def test_a_frame_refused_as_read_on_the_default_lane_waits_for_its_turn(make_gateway) -> None:
    """A frame with no stream_id that is read as a JSON object is of the default lane: refused
    (here ``background``), its error goes out after that lane's turn under way, as on a named
    lane. It jumped ahead, ``lane`` being None for it as for a frame of no lane."""
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(_slow("resp_a1", 1.0))
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_json(FIRST)
        await _until(lambda: len(gw.fake.responses_requests()) == 1, "the default lane's turn is out")
        await ws.send_json({**FIRST, "background": True})
        events = await _ends(ws, 2)
    ends = [e["type"] for e in events if e["type"] in ("response.completed", "error")]
    assert ends == ["response.completed", "error"], ends
    assert events[-1]["error"]["code"] == "invalid_event" and "stream_id" not in events[-1]


async def test_the_next_turn_on_a_lane_starts_once_the_response_completed(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:
    """An upstream that holds its stream open after response.completed holds the lane no more:
    the relay ends the leg at that event (its usage is in it), where the lane's next turn waited
    for the upstream's close or idle_s (3.01 s with idle_s 3). Its usage is still counted."""
    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway(real_sleep=True, timeouts="{connect_s: 2, first_byte_s: 5.0, idle_s: 3.0}")
    gw.fake.script(Stream(responses_stream(rid="resp_a1"), then="stall"),
                   Stream(responses_stream(rid="resp_a2"), then="eof"))  # fmt: skip
    new = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "more"}]}]
    async with gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE) as ws:
        await ws.send_json(FIRST)
        while json.loads((await ws.receive(timeout=5)).data)["type"] != "response.completed":
            pass
        began = time.monotonic()
        nxt = await _turn(ws, {**FIRST, "previous_response_id": "resp_a1", "input": new})
        took = time.monotonic() - began
    assert nxt[-1]["type"] == "response.completed" and nxt[-1]["response"]["id"] == "resp_a2"
    assert took < 1.0, took
    sent = [r.json() for r in gw.fake.responses_requests()]
    assert "previous_response_id" not in sent[1] and sent[1]["input"][-1] == new[0]
    lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    # The response.completed's own usage (the fake's 30 in, 9 out), not an estimate of the text.
    assert [line["usage"] for line in lines] == [{"prompt": 30, "completion": 9}] * 2
    assert not any("ended_by" in line or "after_end" in line for line in lines)
