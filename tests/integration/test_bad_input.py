"""Bad input gets a clear 4xx in the OpenAI error shape, is never forwarded, and leaves
the gateway healthy for everyone else."""

import asyncio
import json
import time

import pytest


def assert_gateway_error(status: int, headers, body: bytes, expected_status: int, code: str) -> None:
    assert status == expected_status
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code", "x_llm_error_type", "retryable"} and err["code"] == code
    assert err["x_llm_error_type"] == "unknown" and err["retryable"] is False
    assert headers["x-llm-error-type"] == "unknown"
    assert headers["x-llm-error-retryable"] == "false"
    assert headers["x-should-retry"] == "false"
    assert headers["x-llm-attempts"] == "0"


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"{not json", "invalid_json"),
        (b"", "invalid_json"),
        (b"\xff\xfe\x00garbage", "invalid_json"),
        # Valid JSON in UTF-16 (json reads it; RFC 8259 §8.1 and the providers want UTF-8).
        ('{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'.encode("utf-16"),
         "invalid_json"),
        (b"[1, 2, 3]", "invalid_body"),
        (b'"a string"', "invalid_body"),
        (b'{"model": "m", "messages": "hello"}', "invalid_messages"),
        (b'{"model": "m"}', "invalid_messages"),
        (b'{"model": "m", "messages": [1, 2]}', "invalid_messages"),
        (b'{"model": 42, "messages": []}', "invalid_model"),
        (b'{"model": "m", "messages": [], "stream": "yes"}', "invalid_stream"),
        (b"[" * 100_000 + b"]" * 100_000, "invalid_json"),
        (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "invalid_json"),
    ],
    ids=["invalid-json", "empty", "invalid-utf8", "utf16", "array", "string", "messages-string", "messages-missing",
         "messages-not-objects", "model-int", "stream-string", "deep-arrays", "deep-objects"],
)
async def test_bad_bodies_are_rejected_and_never_forwarded(make_gateway, data: bytes, code: str) -> None:
    gw = await make_gateway()
    status, headers, body = await gw.chat(data=data, headers={"Content-Type": "application/json"})
    assert_gateway_error(status, headers, body, 400, code)
    assert gw.fake.chat_requests() == []
    assert (await gw.chat())[0] == 200  # still healthy


async def test_body_over_the_limit_is_413_by_content_length(make_gateway) -> None:
    gw = await make_gateway("server: {max_body_bytes: 1000}\n")
    status, headers, body = await gw.chat(data=b"x" * 5000)
    assert_gateway_error(status, headers, body, 413, "request_too_large")
    assert gw.fake.chat_requests() == []


async def test_chunked_body_over_the_limit_is_413_without_reading_it_all(make_gateway) -> None:
    gw = await make_gateway("server: {max_body_bytes: 100000}\n")
    sent = 0

    async def endless():
        nonlocal sent
        for _ in range(10_000):
            sent += 65536
            yield b"x" * 65536

    try:
        async with gw.session.post(gw.base + "/v1/chat/completions", data=endless()) as r:
            status, body = r.status, await r.read()
            assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"
    except (ConnectionError, OSError):
        pass  # the gateway may cut the upload short after answering; that is fine
    assert sent < 10_000 * 65536
    assert (await gw.chat())[0] == 200


@pytest.mark.stall_timeouts
async def test_slow_client_gets_408_and_does_not_block_others(make_gateway) -> None:
    gw = await make_gateway()  # idle_s is 1 s in the harness

    async def trickle():
        yield b'{"model": "m", '
        await asyncio.sleep(3)
        yield b'"messages": []}'

    async def slow() -> int:
        async with gw.session.post(gw.base + "/v1/chat/completions", data=trickle(),
                                   headers={"Content-Type": "application/json"}) as r:
            return r.status

    slow_task = asyncio.create_task(slow())
    await asyncio.sleep(0.1)
    fast = await asyncio.gather(*(gw.chat() for _ in range(10)))
    assert [s for s, _, _ in fast] == [200] * 10  # served while the slow client dawdles
    try:
        assert await slow_task == 408
    except (ConnectionError, OSError):
        pass


async def test_a_body_trickled_inside_the_idle_timeout_is_cut_at_the_request_deadline(make_gateway) -> None:
    """Each byte inside ``idle_s``, so no wait ever timed out: the body was read for as long as
    the client liked, a connection and a request in flight held meanwhile. All of it must come
    within the request's deadline."""
    gw = await make_gateway("retry: {deadline_s: 2}\n")  # idle_s is 1 s in the harness
    sent = 0

    async def trickle():
        nonlocal sent
        yield b'{"model": "m", "messages": [], "pad": "'
        for _ in range(40):  # 40 x 0.3 s: 12 s, each wait well inside idle_s
            await asyncio.sleep(0.3)
            sent += 1
            yield b"x"
        yield b'"}'

    t = time.monotonic()
    async with gw.session.post(gw.base + "/v1/chat/completions", data=trickle(),
                               headers={"Content-Type": "application/json"}) as r:
        assert r.status == 408
        assert (await r.json())["error"]["message"] == "the request body did not arrive within 2s"
    assert time.monotonic() - t < 6 and sent < 20
    assert gw.fake.requests == []


@pytest.mark.parametrize("path", ["/v1/../admin", "/v1/%2e%2e/secrets", "/v1/files/..%2f..%2fetc", "/v1/%252e%252e/x"])
async def test_hostile_paths_are_refused(make_gateway, path: str) -> None:
    gw = await make_gateway()
    async with gw.session.get(gw.base + path) as r:
        assert r.status in (400, 404)
        assert r.headers["x-llm-error-type"] == "unknown"
        assert "error" in await r.json()
    assert gw.fake.requests == []


async def test_absolute_uri_request_target_is_not_proxied(make_gateway) -> None:
    gw = await make_gateway()
    host, port = gw.base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET http://169.254.169.254/v1/models HTTP/1.1\r\nHost: 169.254.169.254\r\nConnection: close\r\n\r\n")
    await writer.drain()
    response = await reader.read()
    writer.close()
    assert response.split(b" ", 2)[1] in (b"400", b"404")
    assert gw.fake.requests == []


@pytest.mark.parametrize(("encoding", "data", "status", "code", "anthropic_code"), [
    ("br", b"\x8b\x02\x80hello\x03", 415, "unsupported_content_encoding", "request_body_encoding_unsupported"),
    ("zstd", b"(\xb5/\xfd\x00Xhello", 415, "unsupported_content_encoding", "request_body_encoding_unsupported"),
    ("gzip", b'{"model": "gpt-4o-mini", "messages": []}', 400, "invalid_content_encoding",
     "request_body_encoding_invalid"),
])  # fmt: skip
async def test_content_encodings_we_cannot_read_get_a_clear_error(
    make_gateway, encoding, data, status, code, anthropic_code
) -> None:
    gw = await make_gateway()
    status_, headers, body = await gw.chat(data=data, headers={"Content-Type": "application/json",
                                                                "Content-Encoding": encoding})
    assert_gateway_error(status_, headers, body, status, code)
    assert gw.fake.chat_requests() == []
    status_, _, body = await gw.messages(data=data, headers={"Content-Type": "application/json",
                                                             "Content-Encoding": encoding})
    # Anthropic's own answer to a body it cannot read: a 400 naming why in details.error_code.
    doc = json.loads(body)
    assert status_ == 400 and doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    assert doc["error"]["details"] == {"error_code": anthropic_code} and doc["error"]["code"] == code
    assert (await gw.chat())[0] == 200  # still healthy


@pytest.mark.parametrize("model", [None, ""], ids=["absent", "empty"])
async def test_a_request_without_a_model_is_the_clients_mistake_on_every_api(make_gateway, model) -> None:
    """Never routed nor sent (with a dead first upstream it used to become a retryable 502):
    a 400 in each API's own error envelope."""
    gw = await make_gateway()
    extra = {} if model is None else {"model": model}
    hi = [{"role": "user", "content": "hi"}]
    status, headers, body = await gw.chat({**extra, "messages": hi})
    assert_gateway_error(status, headers, body, 400, "missing_model")
    status, headers, body = await gw.messages({**extra, "max_tokens": 16, "messages": hi})
    doc = json.loads(body)
    assert status == 400 and doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    assert "'model' is required" in doc["error"]["message"] and headers["x-should-retry"] == "false"
    status, headers, body = await gw.responses({**extra, "input": "hi"})
    err = json.loads(body)["error"]
    assert status == 400 and err["code"] == "missing_model" and err["type"] == "invalid_request_error"
    assert headers["x-llm-attempts"] == "0"
    assert gw.fake.requests == []


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
async def test_non_finite_numbers_are_not_json_and_are_never_forwarded(make_gateway, constant: bytes) -> None:
    """RFC 8259 §6: "Numeric values that cannot be represented in the grammar below (such as
    Infinity and NaN) are not permitted". Python's json reads them; a provider may not, or may
    read them as something the client did not mean. A 400 in each API's own envelope."""
    gw = await make_gateway()
    hi = b'[{"role": "user", "content": "hi"}]'
    ctype = {"Content-Type": "application/json"}
    status, headers, body = await gw.chat(
        data=b'{"model": "gpt-4o-mini", "temperature": ' + constant + b', "messages": ' + hi + b"}", headers=ctype)
    assert_gateway_error(status, headers, body, 400, "invalid_json")
    assert constant.decode().lstrip("-") in json.loads(body)["error"]["message"]
    status, _, body = await gw.messages(
        data=b'{"model": "claude-sonnet-4-5", "max_tokens": 16, "top_p": ' + constant + b', "messages": ' + hi + b"}",
        headers=ctype)  # fmt: skip
    doc = json.loads(body)
    assert status == 400 and doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    status, _, body = await gw.responses(
        data=b'{"model": "gpt-5-codex", "input": "hi", "metadata": {"x": [' + constant + b"]}}", headers=ctype)
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_json"
    assert gw.fake.requests == []
