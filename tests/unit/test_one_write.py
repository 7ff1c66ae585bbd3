"""A one-write answer puts on the wire exactly what aiohttp's own response would, and leaves
to aiohttp every case it does not write itself."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import Any
from unittest import mock

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer, make_mocked_request

from gateway import one_write
from gateway.one_write import OneWriteResponse

JSON = b'{"id":"chatcmpl-1","choices":[]}'

# name -> the keyword arguments both response classes are made with
CASES: dict[str, dict[str, Any]] = {
    "json": {"status": 200, "body": JSON, "headers": [("Content-Type", "application/json"), ("x-request-id", "r1")]},
    "rate_limited": {
        "status": 429,
        "body": b'{"error":{"type":"rate_limit"}}',
        "headers": [("Content-Type", "application/json"), ("retry-after", "3"), ("x-should-retry", "false")],
    },
    "no_content_type": {"status": 200, "body": b"raw bytes"},
    "empty": {"status": 200, "body": b""},
    "own_length": {"status": 200, "body": JSON, "headers": [("Content-Length", str(len(JSON)))]},
    "repeated_and_non_ascii": {
        "status": 200,
        "body": JSON,
        "headers": [("Link", "<a>"), ("Link", "<b>"), ("x-name", "café ☕"), ("x-tab", "a\tb")],
    },
    "own_reason": {"status": 418, "reason": "Short And Stout", "body": b"{}"},
    "own_date_and_server": {"status": 200, "body": b"{}", "headers": [("Date", "then"), ("Server", "up")]},
    "no_content": {"status": 204, "body": b""},
    "not_modified": {"status": 304, "body": b""},
}


def _app(on_prepare: Callable[..., Any] | None = None) -> web.Application:
    async def answer(request: web.Request) -> web.StreamResponse:
        cls = OneWriteResponse if request.match_info["kind"] == "one" else web.Response
        response = cls(**CASES[request.match_info["case"]])
        if "x-force-close" in request.headers:
            response.force_close()
        return response

    app = web.Application()
    app.router.add_route("*", "/{kind}/{case}", answer)
    if on_prepare is not None:
        app.on_response_prepare.append(on_prepare)
    return app


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    async with TestServer(_app()) as srv:
        yield srv


async def _raw(port: int, request: bytes, *, times: int = 1) -> list[bytes]:
    """Each answer's bytes, read off one connection, with the Date line's value blanked."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers = []
    try:
        for _ in range(times):
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?i)\r\nContent-Length: (\d+)", head)
            if request.startswith(b"HEAD") or length is None:
                body = b"" if request.startswith(b"HEAD") or b" 204 " in head or b" 304 " in head else await reader.read()
            else:
                body = await reader.readexactly(int(length.group(1)))
            answers.append(re.sub(rb"\r\nDate: [^\r]*", b"\r\nDate: -", head) + body)
    finally:
        writer.close()
    return answers


def _request(method: str, path: str, *extra: str, version: str = "1.1") -> bytes:
    lines = [f"{method} {path} HTTP/{version}", "Host: test", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.fixture
def aiohttp_prepares(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths aiohttp's own StreamResponse.prepare ran for."""
    seen: list[str] = []
    original = web.StreamResponse.prepare

    async def counting(self: web.StreamResponse, request: web.BaseRequest) -> Any:
        seen.append(request.path)
        return await original(self, request)

    monkeypatch.setattr(web.StreamResponse, "prepare", counting)
    return seen


def test_this_aiohttp_has_what_the_fast_path_reads() -> None:
    # Off (every answer through aiohttp) where a later aiohttp renamed what it reads.
    assert one_write.SUPPORTED


@pytest.mark.parametrize("case", [c for c in CASES if c not in ("no_content", "not_modified")])
async def test_the_wire_bytes_are_aiohttps_own(server: TestServer, case: str, aiohttp_prepares: list[str]) -> None:
    port = server.port
    assert port is not None
    (plain,) = await _raw(port, _request("GET", f"/plain/{case}"))
    (one,) = await _raw(port, _request("GET", f"/one/{case}"))
    assert one == plain
    assert aiohttp_prepares == [f"/plain/{case}"]  # the one-write answer was written without it


@pytest.mark.parametrize(
    ("case", "request_line"),
    [
        ("json", _request("HEAD", "/{kind}/json")),
        ("json", _request("GET", "/{kind}/json", version="1.0")),
        ("json", _request("GET", "/{kind}/json", "Connection: close")),
        ("json", _request("GET", "/{kind}/json", "x-force-close: 1")),
        ("no_content", _request("GET", "/{kind}/no_content")),
        ("not_modified", _request("GET", "/{kind}/not_modified")),
    ],
)
async def test_what_aiohttp_must_frame_is_left_to_it(
    server: TestServer, case: str, request_line: bytes, aiohttp_prepares: list[str]
) -> None:
    port = server.port
    assert port is not None
    (plain,) = await _raw(port, request_line.replace(b"{kind}", b"plain"))
    (one,) = await _raw(port, request_line.replace(b"{kind}", b"one"))
    assert one == plain
    assert aiohttp_prepares == [f"/plain/{case}", f"/one/{case}"]


async def test_a_kept_alive_connection_carries_answer_after_answer(server: TestServer) -> None:
    port = server.port
    assert port is not None
    answers = await _raw(port, _request("POST", "/one/json", "Content-Length: 0"), times=3)
    assert len(answers) == 3 and len(set(answers)) == 1
    assert answers[0].startswith(b"HTTP/1.1 200 OK\r\n") and answers[0].endswith(JSON)


async def test_an_apps_on_response_prepare_handlers_still_run() -> None:
    async def add_header(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["x-prepared"] = "yes"

    async with TestServer(_app(add_header)) as srv:
        assert srv.port is not None
        (plain,) = await _raw(srv.port, _request("GET", "/plain/json"))
        (one,) = await _raw(srv.port, _request("GET", "/one/json"))
    assert b"\r\nx-prepared: yes\r\n" in one
    assert one == plain


@pytest.mark.parametrize("value", ["a\r\nx-injected: 1", "a\nb", "a\rb", "nul\x00", "bell\x07", "del\x7f"])
async def test_a_control_character_in_the_head_is_refused_before_anything_is_written(value: str) -> None:
    transport = mock.Mock()
    transport.is_closing.return_value = False
    request = make_mocked_request("GET", "/", transport=transport)
    response = OneWriteResponse(body=b"{}", headers={"x-value": value})
    with pytest.raises(ValueError, match="control character"):
        await response.prepare(request)
    transport.write.assert_not_called()


async def test_a_refused_head_ends_the_connection_as_aiohttps_own_refusal_does(server: TestServer) -> None:
    # (In the gateway, observe prepares the answer inside its own try: a 500 in the dialect.)
    CASES["injected"] = {"status": 200, "body": b"{}", "headers": [("x-value", "a\r\nx-injected: 1")]}
    answers = []
    try:
        port = server.port
        assert port is not None
        for kind in ("plain", "one"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_request("GET", f"/{kind}/injected"))
            answers.append(await reader.read(65536))
            writer.close()
    finally:
        del CASES["injected"]
    assert answers == [b"", b""]


async def test_a_closing_connection_is_a_connection_error_and_gets_nothing() -> None:
    transport = mock.Mock()
    transport.is_closing.return_value = True
    request = make_mocked_request("GET", "/", transport=transport)
    with pytest.raises(ConnectionResetError):
        await OneWriteResponse(body=JSON).prepare(request)
    transport.write.assert_not_called()


async def test_one_write_then_a_drain_and_a_second_prepare_or_eof_writes_nothing() -> None:
    transport = mock.Mock()
    transport.is_closing.return_value = False
    writer = mock.Mock(output_size=0, drain=mock.AsyncMock())
    request = make_mocked_request("POST", "/", transport=transport, writer=writer)
    response = OneWriteResponse(body=JSON, headers={"Content-Type": "application/json"})
    await response.prepare(request)
    (data,), _ = transport.write.call_args
    assert data.startswith(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 32\r\n")
    assert b"\r\nDate: " in data and b"\r\nServer: " in data and data.endswith(b"\r\n\r\n" + JSON)
    writer.drain.assert_awaited_once()
    assert response.prepared and response.keep_alive
    assert writer.output_size == len(data) == response.body_length
    await response.prepare(request)
    await response.write_eof()
    assert transport.write.call_count == 1
