"""Requests that are not valid HTTP: aiohttp's status, a JSON error that names the fault, and
none of the request's bytes in the answer (a credential in an over-long header or in a Gemini
``?key=`` came back in aiohttp's own text before). The gateway stays healthy."""

from __future__ import annotations

import asyncio
import json

import pytest

SECRET = "sk-live-0123456789abcdefSECRET"


async def raw_exchange(base: str, data: bytes) -> tuple[str, dict[str, str], bytes]:
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    answer = await asyncio.wait_for(reader.read(), 5)  # to the end: the gateway closes the connection
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body


@pytest.mark.parametrize(("request_bytes", "fault"), [
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + SECRET.encode() + b"k" * 9000
     + b"\r\nContent-Length: 2\r\n\r\n{}", "a request line or header is longer than 8190 bytes"),
    (b"POST /v1beta/models/m:generateContent?key=" + SECRET.encode() + b" HTTP/1.1 extra\r\nHost: x\r\n\r\n",
     "the request line is malformed (Bad status line)"),
    (b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key " + SECRET.encode() + b"\r\n\r\n",
     "the request is not valid HTTP/1.1 (Invalid header token)"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + SECRET.encode() + b"\r\n\r\n",
     "the request is not valid HTTP/1.1 (Invalid character in Content-Length)"),
    (b"G\x01T /v1/models?key=" + SECRET.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n",
     "the request method is not an HTTP method (Invalid method encountered)"),
])  # fmt: skip
async def test_unparseable_requests_are_refused_without_quoting_them(
    make_gateway, request_bytes: bytes, fault: str
) -> None:
    gw = await make_gateway()
    status, headers, body = await raw_exchange(gw.base, request_bytes)
    assert status.split(" ", 2)[1] == "400", (status, body)  # aiohttp answers these as HTTP/1.0
    assert SECRET.encode() not in body and b"kkkk" not in body
    assert headers["content-type"].startswith("application/json")
    # OpenAI's shape whole, "param" included (every gateway-made OpenAI error has it).
    assert json.loads(body) == {"error": {"message": fault, "type": "invalid_request_error", "param": None,
                                          "code": "bad_http_request", "x_llm_error_type": "unknown",
                                          "retryable": False}}  # fmt: skip
    # The header contract: classified, never retryable (the same bytes fail the same way), an id.
    assert headers["x-llm-error-type"] == "unknown" and headers["x-llm-error-retryable"] == "false"
    assert headers["x-should-retry"] == "false"
    assert len(headers["x-request-id"]) == 32 and headers["x-llm-attempts"] == "0"
    assert gw.fake.requests == []
    assert (await gw.chat())[0] == 200
