"""The request a WebSocket turn stands for (gateway/pipeline/websocket.py ``_as_post``): the
frame's body, read as any POST's, and a writer that refuses HTTP, so nothing on a turn can write
an HTTP answer onto the connection, which speaks WebSocket. aiohttp (3.14) has no public way to
give a cloned request either: these fail loudly if the attributes set stop being the ones read."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from gateway.pipeline.websocket import _as_post

HANDSHAKE = {"Authorization": "Bearer k", "Upgrade": "websocket", "Connection": "Upgrade",
             "Sec-WebSocket-Key": "AK4kJq+TYivE45J4c807RQ==", "Sec-WebSocket-Version": "13",
             "x-request-id": "handshake-1", "openai-beta": "responses_websockets=2026-02-06"}  # fmt: skip


async def test_the_turn_reads_the_frames_body_and_none_of_the_handshakes_own_headers() -> None:
    turn = _as_post(make_mocked_request("GET", "/v1/responses", headers=HANDSHAKE), b'{"model":"m"}')
    assert turn.method == "POST" and await turn.read() == b'{"model":"m"}'
    assert turn.headers["Authorization"] == "Bearer k" and turn.headers["Content-Length"] == "13"
    # Each turn is a request of its own (its own id); the mode's beta is not the upstream's.
    assert "x-request-id" not in turn.headers and "openai-beta" not in turn.headers
    assert "Upgrade" not in turn.headers


async def test_an_http_answer_prepared_on_a_turn_fails_before_a_byte_is_written() -> None:
    handshake = make_mocked_request("GET", "/v1/responses", headers=HANDSHAKE)
    turn = _as_post(handshake, b"{}")
    with pytest.raises(RuntimeError, match="WebSocket turn"):
        await web.Response(status=401, body=b"{}").prepare(turn)
    handshake.writer.write_headers.assert_not_called()  # type: ignore[attr-defined]
    handshake.writer.write.assert_not_called()  # type: ignore[attr-defined]
