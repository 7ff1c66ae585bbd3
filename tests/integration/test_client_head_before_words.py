"""A stream that begins at once and shows its first words late, for a client that waits for
the response head no longer than 60 s (Gemini CLI 0.61: undici's ``headersTimeout`` 60 s, its
``bodyTimeout`` 300 s; policy/clients.client_head_s).

Review: the gateway sends a stream's head with its first visible event, and cut the wait for it
at the client's 57 s. An upstream whose head came at once and whose first token took 75 s (a
long prompt's prefill on a local server, a reasoning model that streams nothing while it
thinks) answered Gemini CLI with a 504 at 57 s, then from memory, for every one of its retries:
`gemini -p "hi" -m gemini-2.5-flash` through the gateway to such a chat upstream got no answer
(504 at 57 s, then from memory and a 57 s probe per window), where pointed at a Gemini API fake
that waits the same way it printed the answer at 77 s. Now, when no fallback follows, the head
goes to the client when its time is due and the words are waited for as for any client.

Real time: the client's 60 s is patched down to 3 s (a head due 2 s after the request)."""

from __future__ import annotations

import time

import aiohttp
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import parse_config
from gateway.fake import gemini
from gateway.fake.chat import chunk
from gateway.fake.steps import Stream
from gateway.fake.upstream import FakeUpstream
from gateway.policy import clients, retry
from gateway.server import make_runner

CLIENT = {"User-Agent": "GeminiCLI-tui/0.61.0/gemini-2.5-flash (linux; x64; terminal)", "x-goog-api-key": "k"}
ASK = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
HEAD_DUE_S = 2.0  # the patched 3 s, less the 1 s margin


@pytest.fixture(autouse=True)
def short_client_head(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clients, "_GEMINI_CLI_HEAD_S", HEAD_DUE_S + 1.0)


def gemini_slow(words_after_s: float) -> Stream:
    s = gemini.stream(gemini.stream_chunks(words=("Slow", " answer.")), "sse-crlf")
    s.pause_s, s.pause_after = words_after_s, 0
    return s


def chat_slow(words_after_s: float) -> Stream:
    return Stream([chunk({"role": "assistant", "content": "Slow"}), chunk({"content": " answer."}), chunk({}, "stop")],
                  pause_s=words_after_s, pause_after=0)  # fmt: skip


async def _ask(yaml: str, *steps: Stream, idle_s: float = 120,
               first_token_s: float = 300) -> tuple[int, float, bytes, list[str]]:  # fmt: skip
    """The status, the seconds to the response head, the body, and the paths the fake was asked."""
    fake = await FakeUpstream().start()
    fake.script(*steps)
    root = fake.url.removesuffix("/v1")
    cfg = parse_config(yaml.format(ROOT=root) + f"timeouts: {{connect_s: 5, first_byte_s: 300, idle_s: {idle_s}, first_token_s: {first_token_s}}}\n", env={})
    runner = make_runner(create_app(cfg), shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        async with aiohttp.ClientSession() as session:
            t0 = time.monotonic()
            url = f"http://127.0.0.1:{runner.addresses[0][1]}{PATH}"
            async with session.post(url, json=ASK, headers=CLIENT) as r:
                head_s = time.monotonic() - t0
                return r.status, head_s, await r.read(), [q.path for q in fake.requests]
    finally:
        await runner.cleanup()
        await fake.close()


GEMINI_ONE = "upstreams:\n  - {{name: a, base_url: '{ROOT}/v1beta', apis: [gemini], api_key: K}}\n"
CHAT_ONE = "upstreams:\n  - {{name: a, base_url: '{ROOT}/v1', apis: [chat], api_key: K}}\n"


@pytest.mark.parametrize(("yaml", "step"), [(GEMINI_ONE, gemini_slow), (CHAT_ONE, chat_slow)], ids=["gemini", "chat"])
async def test_a_begun_stream_gets_its_head_in_time_and_its_late_words_after(yaml: str, step: type[Stream]) -> None:
    status, head_s, body, asked = await _ask(yaml, step(HEAD_DUE_S + 1.5))  # type: ignore[operator]
    assert status == 200, body
    assert HEAD_DUE_S - 0.3 < head_s < HEAD_DUE_S + 0.9  # before the client's own 3 s
    assert b"Slow" in body and b" answer." in body and b'"finishReason": "STOP"' in body.replace(b'":"', b'": "')
    assert len(asked) == 1


async def test_a_begun_stream_that_never_speaks_ends_with_the_error_the_cli_retries() -> None:
    """Its head sent, a silent upstream is left at ``idle_s`` as any stream is: the client gets
    Google's error event and the bare error Gemini CLI raises on, never an end that says done."""
    status, head_s, body, _ = await _ask(GEMINI_ONE, gemini_slow(60.0), idle_s=HEAD_DUE_S + 1.0)
    assert status == 200 and head_s < HEAD_DUE_S + 0.9
    assert b'"status": "UNAVAILABLE"' in body.replace(b'":"', b'": "') and b"finishReason" not in body
    assert body.rstrip().endswith(b"}}") and b"\n{" in body  # the bare copy, after the event


async def test_a_begun_stream_of_pings_only_is_still_left_at_first_token_s() -> None:
    """timeouts.first_token_s bounds a stream that only pings, its head sent or not."""
    pings = Stream([chunk({"role": "assistant", "content": ""}), *[b": ping\n\n"] * 40], delay_s=0.25)
    t0 = time.monotonic()
    status, head_s, body, _ = await _ask(CHAT_ONE, pings, first_token_s=HEAD_DUE_S + 1.5)
    assert status == 200 and head_s < HEAD_DUE_S + 0.9
    assert b"first_token_s" in body and b"finishReason" not in body
    assert time.monotonic() - t0 < HEAD_DUE_S + 4.0  # not the 10 s of pings


async def test_with_a_fallback_a_stream_without_words_is_still_cut_at_half_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a fallback follows, the primary keeps half of the client's time, its head or not:
    the fallback answers before the client gives up. (The floor below which a share is not
    halved, 10 s, scaled down with the client's time.)"""
    monkeypatch.setattr(retry, "HEAD_FLOOR_S", 0.5)
    yaml = ("upstreams:\n"
            "  - {{name: a, base_url: '{ROOT}/v1beta', apis: [gemini], api_key: K, fallbacks: [b]}}\n"
            "  - {{name: b, base_url: '{ROOT}/v1', apis: [chat], api_key: K}}\n")  # fmt: skip
    status, head_s, body, asked = await _ask(yaml, gemini_slow(30.0), chat_slow(0.0))
    assert status == 200, (body, asked)
    assert head_s < HEAD_DUE_S + 0.9 and b"Slow" in body
    assert [p.split(":")[0] for p in asked] == ["/v1beta/models/gemini-2.5-flash", "/v1/chat/completions"]
