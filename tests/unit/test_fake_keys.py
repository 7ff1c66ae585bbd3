"""The fake upstream playing several deployments, one per key, over HTTP in-process: the
rate-limit headers on every answer, the real 429/401/budget bodies, the strict header checks.
Every refusal is also read by the gateway's own classifier, as the gateway would read it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.errors import ErrorType
from gateway.fake import FakeUpstream, Reply, ScenarioUpstream
from gateway.fake.__main__ import _limits
from gateway.policy.classify import classify
from gateway.policy.retry_after import go_duration_s, rfc3339_wait_s

T0 = 1_800_000_000.0
PATHS = {"chat": "/chat/completions", "messages": "/messages", "responses": "/responses"}
BODIES: dict[str, dict[str, Any]] = {
    "chat": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
    "messages": {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
    "responses": {"model": "gpt-5-codex", "input": "hi"},
}


class Clock:
    now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as f:
        f.keys.clock = Clock()
        yield f


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


class Answer:
    def __init__(self, status: int, headers: dict[str, str], raw: bytes) -> None:
        self.status, self.headers, self.raw = status, headers, raw

    def kind(self, now: float = T0) -> tuple[ErrorType, float | None]:
        c = classify(self.status, self.headers, self.raw, now_s=now)
        return c.type, c.retry_after_s


async def call(http: aiohttp.ClientSession, fake: FakeUpstream, api: str, key: str | None, *,
               stream: bool = False, version: bool = True) -> Answer:  # fmt: skip
    headers = {}
    if key is not None:
        headers = {"x-api-key": key} if api == "messages" else {"Authorization": f"Bearer {key}"}
    if version and api == "messages":
        headers["anthropic-version"] = "2023-06-01"
    async with http.post(fake.url + PATHS[api], json={**BODIES[api], "stream": stream}, headers=headers) as r:
        return Answer(r.status, {k.lower(): v for k, v in r.headers.items()}, await r.read())


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_openai_headers_count_down_per_key_and_their_resets_parse(
    http: aiohttp.ClientSession, fake: FakeUpstream, api: str
) -> None:
    fake.keys.limit("a", rpm=3, tpm=1000)
    fake.keys.limit("b", rpm=5, tpm=1000)
    seen = [(await call(http, fake, api, k)).headers for k in ("a", "a", "b")]
    assert [h["x-ratelimit-remaining-requests"] for h in seen] == ["2", "1", "4"]
    assert {h["x-ratelimit-limit-requests"] for h in seen[:2]} == {"3"} and seen[2]["x-ratelimit-limit-requests"] == "5"
    per_answer = 19 if api == "chat" else 39  # the fake's own usage numbers
    assert [h["x-ratelimit-remaining-tokens"] for h in seen] == [str(1000 - per_answer), str(1000 - 2 * per_answer),
                                                                  str(1000 - per_answer)]  # fmt: skip
    assert go_duration_s(seen[1]["x-ratelimit-reset-requests"]) == pytest.approx(40.0)  # 2 of 3 a minute
    assert go_duration_s(seen[1]["x-ratelimit-reset-tokens"]) == pytest.approx(2 * per_answer * 0.06, abs=0.001)
    assert fake.calls_by_key() == {"a": 2, "b": 1}


async def test_anthropic_headers_count_down_streams_included(http: aiohttp.ClientSession, fake: FakeUpstream) -> None:
    fake.keys.limit("a", rpm=50, tpm=400)
    plain = await call(http, fake, "messages", "a")
    streamed = await call(http, fake, "messages", "a", stream=True)
    assert plain.status == streamed.status == 200 and b"message_stop" in streamed.raw
    h = streamed.headers
    assert (h["anthropic-ratelimit-requests-limit"], h["anthropic-ratelimit-requests-remaining"]) == ("50", "48")
    assert h["anthropic-ratelimit-tokens-remaining"] == str(400 - 19 - 40)  # message, then the stream's usage
    assert rfc3339_wait_s(h["anthropic-ratelimit-requests-reset"], T0) == pytest.approx(2.4, abs=1)
    assert not any(k.startswith("x-ratelimit") for k in h)
    assert (await call(http, fake, "chat", "unlimited")).headers.get("x-ratelimit-limit-requests") is None


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
async def test_past_the_rpm_the_apis_own_429_with_retry_after(
    http: aiohttp.ClientSession, fake: FakeUpstream, api: str
) -> None:
    fake.keys.limit("a", rpm=2)
    for _ in range(2):
        assert (await call(http, fake, api, "a")).status == 200
    over = await call(http, fake, api, "a")
    assert over.status == 429 and over.headers["retry-after"] == "30"
    assert over.kind() == (ErrorType.RATE_LIMIT, 30.0)
    if api == "messages":
        assert b'"rate_limit_error"' in over.raw and over.headers["anthropic-ratelimit-requests-remaining"] == "0"
    else:
        assert b'"rate_limit_exceeded"' in over.raw and b"requests per min (RPM): Limit 2, Used 2" in over.raw
        assert over.headers["x-ratelimit-remaining-requests"] == "0"
    fake.keys.clock.now += 30  # type: ignore[attr-defined]
    assert (await call(http, fake, api, "a")).status == 200


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
async def test_an_openai_429_may_go_without_retry_after(
    http: aiohttp.ClientSession, fake: FakeUpstream, api: str
) -> None:
    # As openai-node#1477 quotes one: the wait in the body and the x-ratelimit-* headers only
    # (the headers say when the window is full again; the body, when a request fits). Anthropic
    # documents retry-after on its 429s: kept.
    fake.keys.retry_after = False
    fake.keys.limit("a", rpm=2)
    for _ in range(2):
        assert (await call(http, fake, api, "a")).status == 200
    over = await call(http, fake, api, "a")
    assert over.status == 429
    if api == "messages":
        assert over.headers["retry-after"] == "30"
        return
    assert "retry-after" not in over.headers and over.headers["x-ratelimit-remaining-requests"] == "0"
    assert b"Please try again in 30s" in over.raw and over.kind() == (ErrorType.RATE_LIMIT, 30.0)


async def test_past_the_tpm_and_a_request_bigger_than_the_tpm(http: aiohttp.ClientSession, fake: FakeUpstream) -> None:
    fake.keys.limit("a", tpm=30)
    assert (await call(http, fake, "chat", "a")).status == 200  # 19 of 30 used
    over = await call(http, fake, "chat", "a")
    assert over.status == 429 and b"tokens per min (TPM): Limit 30, Used 19, Requested " in over.raw
    assert over.kind()[0] is ErrorType.RATE_LIMIT
    fake.keys.limit("b", tpm=3)
    huge = await call(http, fake, "chat", "b")
    assert huge.status == 429 and b"Request too large" in huge.raw and "retry-after" not in huge.headers
    assert huge.kind()[0] is ErrorType.CONTEXT_OVERFLOW  # waiting never makes it fit


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
async def test_limited_until_refuses_every_request_until_then(
    http: aiohttp.ClientSession, fake: FakeUpstream, api: str
) -> None:
    fake.keys.limited_until("a", T0 + 90)
    fake.script(Reply(200, {"scripted": True}))
    for _ in range(2):
        r = await call(http, fake, api, "a")
        assert r.status == 429 and r.headers["retry-after"] == "90" and r.kind() == (ErrorType.RATE_LIMIT, 90.0)
    reset = r.headers.get("x-ratelimit-reset-requests") or r.headers["anthropic-ratelimit-requests-reset"]
    assert (go_duration_s(reset) if api != "messages" else rfc3339_wait_s(reset, T0)) == pytest.approx(90)
    assert (await call(http, fake, api, "b")).raw == b'{"scripted": true}'  # the script waited for b
    assert fake.calls_by_key() == {"a": 2, "b": 1}


async def test_token_counting_is_limited_apart_from_messages(http: aiohttp.ClientSession, fake: FakeUpstream) -> None:
    """Anthropic: "Token counting and message creation have separate and independent rate
    limits" (https://docs.anthropic.com/en/docs/build-with-claude/token-counting)."""
    fake.keys.counting_limited_until("a", T0 + 30)
    fake.keys.limited_until("b", T0 + 30)

    async def count(key: str) -> Answer:
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
        body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
        async with http.post(fake.url + "/messages/count_tokens", json=body, headers=headers) as r:
            return Answer(r.status, {k.lower(): v for k, v in r.headers.items()}, await r.read())

    over = await count("a")
    assert over.status == 429 and b'"rate_limit_error"' in over.raw and over.headers["retry-after"] == "30"
    assert over.kind() == (ErrorType.RATE_LIMIT, 30.0)
    assert (await call(http, fake, "messages", "a")).status == 200  # its messages are not limited
    assert (await count("b")).status == 200 and (await call(http, fake, "messages", "b")).status == 429
    fake.keys.clock.now += 30  # type: ignore[attr-defined]
    assert (await count("a")).status == 200


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
async def test_a_revoked_key_gets_the_apis_401(http: aiohttp.ClientSession, fake: FakeUpstream, api: str) -> None:
    fake.keys.limit("sk-revoked-0001", rpm=10)
    fake.keys.revoke("sk-revoked-0001")
    r = await call(http, fake, api, "sk-revoked-0001")
    assert r.status == 401 and r.kind()[0] is ErrorType.AUTH
    assert (b'"invalid x-api-key"' if api == "messages" else b'"invalid_api_key"') in r.raw
    assert b"sk-revoked-0001" not in r.raw  # OpenAI masks the key it echoes
    assert not any("ratelimit" in k for k in r.headers)
    async with http.get(fake.url + "/models", headers={"Authorization": "Bearer sk-revoked-0001"}) as m:
        assert m.status == 401


@pytest.mark.parametrize(("api", "status", "marker"), [
    ("chat", 429, b'"insufficient_quota"'), ("responses", 429, b'"insufficient_quota"'),
    ("messages", 400, b"Your credit balance is too low"),
])  # fmt: skip
async def test_an_exhausted_key_gets_the_apis_budget_error(
    http: aiohttp.ClientSession, fake: FakeUpstream, api: str, status: int, marker: bytes
) -> None:
    fake.keys.exhaust("a")
    r = await call(http, fake, api, "a")
    assert r.status == status and marker in r.raw and r.kind()[0] is ErrorType.BUDGET
    assert "retry-after" not in r.headers


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
async def test_strict_mode_refuses_what_the_real_apis_refuse(
    http: aiohttp.ClientSession, fake: FakeUpstream, api: str
) -> None:
    # Strict on headers by default (the gateway must send what the API requires), lax on keys
    # (tests that forward no credential, as a keyless local server allows).
    assert (await call(http, fake, api, None, version=False)).status == (400 if api == "messages" else 200)
    fake.require_key = True
    bare = await call(http, fake, api, None)
    assert bare.status == 401 and bare.kind()[0] is ErrorType.AUTH
    assert (b"x-api-key header is required" if api == "messages" else b"You didn't provide an API key") in bare.raw
    unversioned = await call(http, fake, api, "a", version=False)
    if api == "messages":
        assert unversioned.status == 400 and b'"anthropic-version: header is required"' in unversioned.raw
    else:
        assert unversioned.status == 200
    # Anthropic takes OAuth tokens as a bearer token: a key in Authorization is a key.
    async with http.post(fake.url + "/messages", json=BODIES["messages"],
                         headers={"Authorization": "Bearer oauth-token", "anthropic-version": "2023-06-01"}) as r:
        assert r.status == 200


@pytest.mark.parametrize(("path", "headers", "message"), [
    # An API key (sk-ant-api03-...) sent as a bearer token (alibaba/open-code-review#71).
    ("/messages", {"Authorization": "Bearer sk-ant-api03-k"}, b'"Invalid bearer token"'),
    ("/messages/count_tokens", {"Authorization": "bearer sk-ant-api03-k"}, b'"Invalid bearer token"'),
    # An OAuth access token (sk-ant-oat01-...) sent as a key (BerriAI/litellm#21039).
    ("/messages", {"x-api-key": "sk-ant-oat01-t"}, b'"invalid x-api-key"'),
])  # fmt: skip
async def test_anthropic_refuses_a_credential_sent_where_its_kind_is_not_taken(
    http: aiohttp.ClientSession, fake: FakeUpstream, path: str, headers: dict[str, str], message: bytes
) -> None:
    body = BODIES["messages"]
    async with http.post(fake.url + path, json=body, headers={**headers, "anthropic-version": "2023-06-01"}) as r:
        raw = await r.read()
        assert r.status == 401 and message in raw and b'"authentication_error"' in raw
        assert Answer(r.status, {}, raw).kind()[0] is ErrorType.AUTH
    for fine in ({"x-api-key": "sk-ant-api03-k"}, {"Authorization": "Bearer sk-ant-oat01-t"},
                 {"Authorization": "Bearer sk-ant-api03-k", "x-api-key": "sk-ant-api03-k"}):  # fmt: skip
        async with http.post(fake.url + path, json=body, headers={**fine, "anthropic-version": "2023-06-01"}) as r:
            assert r.status == 200, fine
    # The Chat Completions side takes any bearer token (Anthropic's OpenAI SDK compatibility
    # layer is called with the OpenAI SDK, which sends the key as one).
    async with http.post(fake.url + "/chat/completions", json=BODIES["chat"], headers=headers) as r:
        assert r.status == 200
    fake.strict_headers = False  # python -m gateway.fake --lax-headers
    async with http.post(fake.url + path, json=body, headers={**headers, "anthropic-version": "2023-06-01"}) as r:
        assert r.status == 200


@pytest.mark.parametrize(("path", "marker"), [
    ("/chat/completions", b'"We could not parse the JSON body of your request.'),
    ("/embeddings", b'"We could not parse the JSON body of your request.'),
    ("/responses", b'"We could not parse the JSON body of your request.'),
    ("/messages", b'"The request body is not valid JSON: Expecting'),
    ("/messages/count_tokens", b'"The request body is not valid JSON: Expecting'),
])  # fmt: skip
async def test_a_body_that_is_not_a_json_object_is_refused_as_the_apis_refuse_it(
    http: aiohttp.ClientSession, fake: FakeUpstream, path: str, marker: bytes
) -> None:
    # The real APIs answer 400 invalid_request_error before anything else; a lax fake read the
    # body as {} and answered (count_tokens even answered 500, which the gateway retried).
    headers = {"anthropic-version": "2023-06-01", "Content-Type": "application/json"}
    for body, want in ((b"{", marker), (b"[]", b'"The request body must be a JSON object"')):
        async with http.post(fake.url + path, data=body, headers=headers) as r:
            raw = await r.read()
        assert r.status == 400 and want in raw and b'"invalid_request_error"' in raw, (path, body, raw)
        assert classify(r.status, dict(r.headers), raw, now_s=T0).type is not ErrorType.PROVIDER_UNAVAILABLE


async def test_odd_field_types_never_make_the_fake_fail(http: aiohttp.ClientSession, fake: FakeUpstream) -> None:
    # Found by fuzzing through the gateway: these raised inside the fake, whose bare 500 the
    # gateway then retried as an outage. A fake that crashes on a field's type reads as a
    # provider incident in every test that happens to send one.
    headers = {"anthropic-version": "2023-06-01"}
    stream = {**BODIES["chat"], "stream": True, "stream_options": "x"}
    async with http.post(fake.url + "/chat/completions", json=stream, headers=headers) as r:
        raw = await r.read()
    assert r.status == 200 and b"data: [DONE]" in raw and b'"usage"' not in raw
    async with http.post(fake.url + "/messages/count_tokens", json={"messages": False}, headers=headers) as r:
        assert r.status == 200 and isinstance((await r.json())["input_tokens"], int)


async def test_scripted_headers_win_and_scripted_usage_is_charged(http: aiohttp.ClientSession, fake: FakeUpstream) -> None:
    fake.keys.limit("a", rpm=10, tpm=100)
    fake.script(Reply(200, {"usage": {"prompt_tokens": 1, "completion_tokens": 1}},
                      headers={"x-ratelimit-remaining-requests": "7"}))  # fmt: skip
    r = await call(http, fake, "chat", "a")
    assert r.headers["x-ratelimit-remaining-requests"] == "7" and r.headers["x-ratelimit-limit-requests"] == "10"
    assert r.headers["x-ratelimit-remaining-tokens"] == "98"


async def test_the_scenario_fake_logs_which_key_answered_and_refused(http: aiohttp.ClientSession) -> None:
    lines: list[str] = []
    async with ScenarioUpstream(log=lines.append) as fake:
        fake.keys.limit(*_limits("k1=1"))
        fake.keys.revoke("k2")
        for key in ("k1", "k1", "k2"):
            await call(http, fake, "chat", key)
    assert lines[0] == "chat key=k1 model=gpt-4o-mini scenario=ok -> answer"
    assert lines[1].startswith("chat key=k1 refused -> 429 (retry-after: ") and lines[1].endswith(" requests")
    assert lines[2] == "chat key=k2 refused -> 401 invalid_request_error"


@pytest.mark.parametrize(("text", "parsed"), [("k1=3", ("k1", 3, None)), ("k=60,40000", ("k", 60, 40000)),
                                              ("k=,500", ("k", None, 500))])  # fmt: skip
def test_limits_flag_parses(text: str, parsed: tuple[str, int | None, int | None]) -> None:
    assert _limits(text) == parsed


@pytest.mark.parametrize("text", ["k1", "=3", "k=", "k=x", "k=0", "k=,", "k=1,2,3"])
def test_limits_flag_refuses_garbage(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        _limits(text)
