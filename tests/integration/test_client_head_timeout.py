"""A client that stops waiting for the response head before the gateway's timeouts: Gemini CLI
0.61 gives up after 60 s without one (undici's headersTimeout, policy/clients.client_head_s).
Audit: a primary that read the request and never answered took timeouts.first_byte_s (300 s)
of each CLI attempt; the CLI left after 60 s, the gateway logged 499 with one attempt, and the
fallback was never asked (10 CLI attempts, ~13 minutes, no answer). Each attempt now waits at
most half of what is left of the client's 57 s (its 60 s less a margin), so the fallback
answers before the client gives up.

The clock is injected: the hung primary is a sender that moves it on by the timeout it was
given and fails as a first-byte timeout would; the fallback is the fake upstream."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import parse_config
from gateway.errors import TransportError
from gateway.fake import gemini
from gateway.fake.steps import Step
from gateway.fake.upstream import FakeUpstream
from gateway.server import make_runner
from gateway.upstream import UpstreamFailure, UpstreamRequest, UpstreamResponse, new_sender

CORPUS = Path(__file__).parents[1] / "corpus" / "requests" / "gemini-cli-0.61-first.json"
HUNG = "http://127.0.0.1:9/v1beta"


async def _ask(headers: dict[str, str], fallbacks: str = "[backup]") -> tuple[int, bytes, list[tuple[str, float]]]:
    """Gemini CLI's captured first request, with ``headers``, through a gateway whose primary
    hangs: the status, the body, and each attempt's (upstream, first-byte timeout)."""
    captured: dict[str, Any] = json.loads(CORPUS.read_text())
    fake = await FakeUpstream().start()
    cfg = parse_config(
        "upstreams:\n"
        f"  - {{name: primary, base_url: '{HUNG}', apis: [gemini], api_key: K, fallbacks: {fallbacks}}}\n"
        f"  - {{name: backup, base_url: '{fake.url.removesuffix('/v1')}/v1beta', apis: [gemini], api_key: K}}\n"
        "timeouts: {connect_s: 10, first_byte_s: 300, idle_s: 120}\n"
        "loop_breaker: {enabled: false}\n",
        env={},
    )
    clock = [1000.0]
    asked: list[tuple[str, float]] = []
    real = new_sender(cfg)

    async def sender(request: UpstreamRequest) -> UpstreamResponse:
        if request.url.startswith(HUNG):
            asked.append(("primary", request.first_byte_timeout_s))
            clock[0] += request.first_byte_timeout_s  # it never answers: its whole timeout passes
            raise UpstreamFailure(TransportError.FIRST_BYTE_TIMEOUT)
        asked.append(("backup", request.first_byte_timeout_s))
        return await real(request)

    await real.start()
    runner = make_runner(create_app(cfg, sender=sender, monotonic=lambda: clock[0], wall=lambda: clock[0]), shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{runner.addresses[0][1]}{captured['path']}"
            async with session.post(url, json=captured["body"], headers={**headers, "x-goog-api-key": "k"}) as r:
                return r.status, await r.read(), asked
    finally:
        await runner.cleanup()
        await real.close()
        await fake.close()


async def test_gemini_cli_gets_the_fallbacks_answer_before_its_60_s_head_timeout() -> None:
    headers = gemini_cli_headers()
    assert headers["User-Agent"].startswith("GeminiCLI-tui/0.61.0/")  # as captured
    status, body, asked = await _ask(headers)
    assert status == 200 and b"fakeResp0001" in body
    assert [who for who, _ in asked] == ["primary", "backup"]
    assert asked[0][1] == pytest.approx(57 / 2)  # half of the client's 57 s: the fallback fits after it
    assert asked[1][1] == pytest.approx(57 / 2)  # the last upstream: all that is left
    assert sum(s for _, s in asked) <= 57


def gemini_cli_headers() -> dict[str, str]:
    return {k: v for k, v in json.loads(CORPUS.read_text())["headers"].items() if k.lower() != "content-type"}


async def test_without_a_fallback_the_upstream_has_all_57_s_and_the_cli_gets_a_504_in_time() -> None:
    """A slow model is cut no sooner than the CLI would cut it, and the CLI gets a typed error
    it retries instead of its own timeout; no retry starts that could not answer in time."""
    status, body, asked = await _ask(gemini_cli_headers(), fallbacks="[]")
    assert status == 504 and b"DEADLINE_EXCEEDED" in body
    assert asked == [("primary", pytest.approx(57.0))]


async def test_a_client_that_waits_longer_keeps_the_gateways_own_first_byte_timeout() -> None:
    status, body, asked = await _ask({"User-Agent": "google-genai-sdk/1.30.0 gl-node/v20.20.2"})
    assert status == 200 and b"fakeResp0001" in body
    assert asked[0] == ("primary", 300.0)


# Two upstreams on one fake, told apart by the host they are called at: `A` at 127.0.0.1,
# `B` at localhost. ``heads``: how long each takes to its head (None: never), on the clock.
A, B = "127.0.0.1", "localhost"


async def _serve(
    yaml: str, heads: dict[str, float | None], asks: list[tuple[dict[str, str], str, Any]],
    hung_once: bool = False, rand: Callable[[], float] = random.random, steps: tuple[Step, ...] = (),
) -> tuple[list[tuple[int, bytes, float, dict[str, str]]], list[tuple[str, float]]]:
    """Each of ``asks`` (headers, path, body) through a gateway configured by ``yaml``, whose
    ``{A}`` and ``{B}`` are the upstreams' base URLs: each answer's status, body, seconds on the
    clock and ``x-llm-*`` headers, and each attempt's (host, first-byte timeout); ``{M}``: B's base
    URL for an upstream that speaks Messages. ``hung_once``:
    the first call never answers, whatever its host, and the rest as ``heads`` say. ``steps``:
    what the calls that reach the fake get, in turn (a step that gives None: its default)."""
    fake = await FakeUpstream().start()
    fake.script(*steps)
    base = fake.url.removesuffix("/v1") + "/v1beta"
    messages = fake.url.replace(A, B)  # {M}: B's host, for an upstream that speaks Messages
    cfg = parse_config(yaml.format(A=base, B=base.replace(A, B), M=messages) +
                       "timeouts: {connect_s: 10, first_byte_s: 300, idle_s: 120}\n", env={})  # fmt: skip
    clock = [1000.0]
    asked: list[tuple[str, float]] = []
    real = new_sender(cfg)

    async def sender(request: UpstreamRequest) -> UpstreamResponse:
        host = B if f"//{B}:" in request.url else A
        asked.append((host, request.first_byte_timeout_s))
        head = None if hung_once and len(asked) == 1 else heads[host]
        if head is None or request.first_byte_timeout_s < head:
            clock[0] += request.first_byte_timeout_s  # its whole timeout passes
            raise UpstreamFailure(TransportError.FIRST_BYTE_TIMEOUT)
        clock[0] += head
        return await real(request)

    await real.start()
    app = create_app(cfg, sender=sender, monotonic=lambda: clock[0], wall=lambda: clock[0], rand=rand)
    runner = make_runner(app, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    out = []
    try:
        async with aiohttp.ClientSession() as session:
            for headers, path, body in asks:
                start = clock[0]
                url = f"http://127.0.0.1:{runner.addresses[0][1]}{path}"
                async with session.post(url, json=body, headers={**headers, "x-goog-api-key": "k"}) as r:
                    told = {k.lower(): v for k, v in r.headers.items() if k.lower().startswith("x-llm-")}
                    out.append((r.status, await r.read(), clock[0] - start, told))
                clock[0] += 5  # the client's own pause before its next request
        return out, asked
    finally:
        await runner.cleanup()
        await real.close()
        await fake.close()


def _cli_first() -> tuple[dict[str, str], str, Any]:
    captured = json.loads(CORPUS.read_text())
    return gemini_cli_headers(), captured["path"], captured["body"]


_SDK = {"User-Agent": "google-genai-sdk/1.30.0 gl-node/v20.20.2"}
_POOL = ("upstreams:\n"
         "  - {{name: a, base_url: '{A}', apis: [gemini], api_key: K}}\n"
         "  - {{name: b, base_url: '{B}', apis: [gemini], api_key: K}}\n"
         "pools:\n  - {{name: p, models: ['gemini-*'], deployments: [a, b]}}\n"
         "loop_breaker: {{enabled: false}}\n")  # fmt: skip


async def test_through_a_pool_a_slow_model_has_all_57_s_on_the_first_key() -> None:
    """Review: every attempt through a pool had half of what was left, as if a sibling always
    followed: a model whose head takes 35 s was called at 28.5, 14.25, 7.1, 3.6 and 1.8 s and
    answered 504 at 55 s; a second version gave each sibling half in turn, two calls and a 504
    at 57 s. Siblings serve the same model, as slow on each: only a fallback halves. A hung
    first key costs the CLI a 504 at 57 s, which it retries (not remembered, nothing noted)."""
    out, asked = await _serve(_POOL, {A: 35.0, B: 35.0}, [_cli_first()])
    assert out[0][0] == 200 and out[0][2] == pytest.approx(35.0)
    assert [s for _, s in asked] == [pytest.approx(57.0)]
    out, asked = await _serve(_POOL, {A: 20.0, B: 20.0}, [_cli_first()] * 2, hung_once=True)
    assert [o[0] for o in out] == [504, 200]
    assert out[0][2] == pytest.approx(57.0)
    assert [s for _, s in asked] == [pytest.approx(57.0), pytest.approx(57.0)]


async def test_count_tokens_sent_to_one_upstream_has_all_57_s_once() -> None:
    """countTokens goes to its one upstream outside the route's chain, where nothing said it
    was the last: it had half, then retries at 14.25, 7.1 and 3.6 s (review). The body is the
    genai SDK's captured count_tokens (the CLI counts through the same SDK); the headers are
    the CLI's."""
    counted = json.loads((CORPUS.parent / "genai-3.6-count-tokens.json").read_text())
    one = "upstreams:\n  - {{name: a, base_url: '{A}', apis: [gemini], api_key: K}}\n"
    out, asked = await _serve(one, {A: None}, [(gemini_cli_headers(), counted["path"], counted["body"])])
    assert out[0][0] == 504
    assert asked == [(A, pytest.approx(57.0))]


async def test_a_cut_at_the_clients_share_does_not_open_the_circuit_for_other_clients() -> None:
    """Review: 8 CLI requests cut a healthy primary whose head takes 35 s at 28.5 s (the
    fallback answered them); counted as its failures, they opened its circuit, and an SDK
    client that waits 300 s was sent to the fallback too. The cut is the gateway's: the
    circuit hears nothing of it, and the SDK client is answered by the primary."""
    fall = ("upstreams:\n"
            "  - {{name: a, base_url: '{A}', apis: [gemini], api_key: K, fallbacks: [b]}}\n"
            "  - {{name: b, base_url: '{B}', apis: [gemini], api_key: K}}\n"
            "loop_breaker: {{enabled: false}}\n")  # fmt: skip
    captured = _cli_first()
    out, asked = await _serve(fall, {A: 35.0, B: 1.0}, [captured] * 8 + [(_SDK, captured[1], captured[2])])
    assert [o[0] for o in out] == [200] * 9
    assert [o[3].get("x-llm-upstream") for o in out] == ["b"] * 8 + ["a"]
    assert asked[-1] == (A, 300.0)


async def test_a_504_at_57_s_on_the_last_upstream_is_its_failure_as_any_timeout() -> None:
    """A first version counted nothing of a cut at the client's head time; then a hung pool key
    (or lone upstream) was never left, its circuit never told, each CLI turn a 504 at 57 s
    (review). Given all the client's time, the upstream failed it as any timeout does: the
    loop breaker remembers it (the CLI's retries within the window answered from memory, the
    window's end probing) and the circuit counts it."""
    one = ("upstreams:\n  - {{name: a, base_url: '{A}', apis: [gemini], api_key: K}}\n"
           "circuit_breaker: {{failure_threshold: 2, probe_interval_s: 300, open_s: 600}}\n")  # fmt: skip
    out, asked = await _serve(one, {A: None}, [_cli_first(), _cli_first(), _cli_first()])
    assert [o[0] for o in out] == [504, 504, 504]
    assert out[1][3].get("x-llm-from-memory") == "1"
    assert asked == [(A, pytest.approx(57.0))]
    loop_off = one + "loop_breaker: {{enabled: false}}\n"
    out, asked = await _serve(loop_off, {A: None}, [_cli_first()] * 3)
    assert [o[0] for o in out] == [504, 504, 503]  # two cuts counted: the circuit opens
    assert len(asked) == 2


async def test_a_hung_pool_key_is_left_once_its_cuts_open_its_circuit() -> None:
    """Review: uncounted, a conversation homed on a hung key got a 504 at 57 s on every turn,
    its healthy sibling never tried. Counted, its circuit opens after failure_threshold of
    them; each later request finds it half-open (probed every probe_interval_s beside a ready
    sibling) and its probe has half the time, so the sibling answers in time (the clocks, wall
    too, move as the calls take: a second review found a probe given all 57 s each time)."""
    pool = ("upstreams:\n"
            "  - {{name: a, base_url: '{A}', apis: [gemini], api_key: K, weight: 1000}}\n"
            "  - {{name: b, base_url: '{B}', apis: [gemini], api_key: K, weight: 1}}\n"
            "pools:\n  - {{name: p, models: ['gemini-*'], deployments: [a, b], strategy: weighted}}\n"
            "loop_breaker: {{enabled: false}}\n"
            "circuit_breaker: {{failure_threshold: 2}}\n")  # fmt: skip
    out, asked = await _serve(pool, {A: None, B: 1.0}, [_cli_first()] * 5)
    assert [o[0] for o in out] == [504, 504, 200, 200, 200]
    assert all(o[3].get("x-llm-upstream") == "b" for o in out[2:])
    assert all(o[2] <= 30.0 for o in out[2:])  # a probe of a at 28.5 s at most, then b's answer
    assert [s for host, s in asked if host == A][:2] == [pytest.approx(57.0), pytest.approx(57.0)]


async def test_a_slow_fallback_after_a_cut_primary_is_not_counted_against() -> None:
    """Review: the fallback after a cut primary has only the other 28.5 s; counted as its
    failure, a healthy fallback whose head takes 35 s opened its circuit after two CLI requests
    and an SDK client that waits 300 s got a 503 instead of its answer."""
    fall = ("upstreams:\n"
            "  - {{name: a, base_url: '{A}', apis: [gemini], api_key: K, fallbacks: [b]}}\n"
            "  - {{name: b, base_url: '{B}', apis: [gemini], api_key: K}}\n"
            "loop_breaker: {{enabled: false}}\n"
            "circuit_breaker: {{failure_threshold: 2, probe_interval_s: 1000, open_s: 1000}}\n")  # fmt: skip
    captured = _cli_first()
    out, asked = await _serve(fall, {A: None, B: 35.0}, [captured] * 3 + [(_SDK, captured[1], captured[2])])
    # The second CLI request goes past the primary cut moments before (policy/head_cuts.py),
    # and the fallback, with all 57 s, answers at 35 s; the third comes after the hold: two
    # 504s of the fallback, neither counted.
    assert [o[0] for o in out] == [504, 200, 504, 200]
    assert out[-1][3].get("x-llm-upstream") == "b"


_FALL = ("upstreams:\n"
         "  - {{name: a, base_url: '{A}', apis: [gemini], api_key: K, fallbacks: [b]}}\n"
         "  - {{name: b, base_url: '{B}', apis: [gemini], api_key: K}}\n"
         "loop_breaker: {{enabled: false}}\n")  # fmt: skip


async def test_after_a_cut_cli_requests_go_to_the_fallback_at_once_for_a_minute() -> None:
    """Audit: a primary that reads the request and never answers, `fallbacks: [backup]`: 9 CLI
    requests in a row each waited 28.5 s for it before the fallback answered, and its circuit
    never opened (the cut is no evidence). The cut is remembered for requests whose head time
    is as short: the next ones go to the fallback at once, until the hold (60 s) ends and one
    tries the primary again; a client that waits longer still asks the primary first."""
    captured = _cli_first()
    sdk = (_SDK, captured[1], captured[2])
    out, asked = await _serve(_FALL, {A: None, B: 1.0}, [captured] * 11 + [sdk])
    assert [o[0] for o in out] == [200] * 12
    assert [o[3].get("x-llm-upstream") for o in out] == ["b"] * 12
    took = [round(o[2], 1) for o in out]
    # 1 s each from the second on; each request and the pause after it take 6 s, so the 11th
    # starts as the hold ends and tries the primary again (cut again, held twice as long).
    assert took == [29.5] + [1.0] * 9 + [29.5, 301.0]
    assert [host for host, _ in asked] == [A] + [B] * 10 + [A, B] + [A, B]
    assert asked[-2] == (A, 300.0)  # the SDK client's own timeout: the memory is not its


async def test_an_answer_in_time_clears_the_memory_and_a_slow_one_does_not() -> None:
    """The primary answers another client within the share the cut had: CLI requests ask it
    first again. A model slower than the share answering a patient client leaves the memory:
    a CLI request would be cut there all the same."""
    captured = _cli_first()
    sdk = (_SDK, captured[1], captured[2])
    asks = [captured, captured, sdk, captured]
    out, asked = await _serve(_FALL, {A: 2.0, B: 1.0}, asks, hung_once=True)
    assert [o[3].get("x-llm-upstream") for o in out] == ["b", "b", "a", "a"]
    assert [host for host, _ in asked] == [A, B, B, A, A]
    out, asked = await _serve(_FALL, {A: 35.0, B: 1.0}, asks)
    assert [o[3].get("x-llm-upstream") for o in out] == ["b", "b", "a", "b"]
    assert [host for host, _ in asked] == [A, B, B, A, B]


async def test_a_request_only_the_cut_upstream_can_carry_is_still_sent_there() -> None:
    """Review: after one cut on a Gemini upstream whose fallback speaks Messages, CLI requests
    with Google Search (a hosted tool only Gemini runs) were answered 400
    untranslatable_request in no time, no upstream asked, where the Gemini upstream answered
    them before. Gone past for nothing, it is asked after all, with all the client's time: no
    later hop can take the request from it."""
    both = ("upstreams:\n"
            "  - {{name: g, base_url: '{A}', apis: [gemini], api_key: K, fallbacks: [c]}}\n"
            "  - {{name: c, base_url: '{M}', apis: [messages], api_key: K}}\n"
            "loop_breaker: {{enabled: false}}\n")  # fmt: skip
    headers, path, body = _cli_first()
    search = {**body, "tools": [{"googleSearch": {}}]}
    asks = [(headers, path, body), (headers, path, search)]
    out, asked = await _serve(both, {A: 2.0, B: 1.0}, asks, hung_once=True)
    assert [(o[0], o[3].get("x-llm-upstream")) for o in out] == [(200, "c"), (200, "g")]
    assert out[1][2] == pytest.approx(2.0)
    assert asked == [(A, pytest.approx(28.5)), (B, pytest.approx(28.5)), (A, pytest.approx(57.0))]
    assert "x-llm-fallbacks" not in out[1][3]  # nothing was steered past in the end


_POOL_FALL = ("upstreams:\n"
              "  - {{name: a, base_url: '{A}', apis: [gemini], api_key: K}}\n"
              "  - {{name: b, base_url: '{B}', apis: [gemini], api_key: K}}\n"
              "pools:\n  - {{name: p, models: ['gemini-*'], deployments: [a], fallbacks: [b]}}\n"
              "loop_breaker: {{enabled: false}}\n")  # fmt: skip


async def test_a_pool_deployment_cut_is_gone_past_as_a_plain_upstream_is() -> None:
    """Review: a hung pool deployment's cut was remembered, logged and counted, but only a plain
    hop read the memory: with `fallbacks: [b]` after the pool every CLI request waited 28.5 s
    for it (29.5 s each). The pool goes past it to the later hop as a plain hop does."""
    out, asked = await _serve(_POOL_FALL, {A: None, B: 1.0}, [_cli_first()] * 4)
    assert [o[0] for o in out] == [200] * 4
    assert [o[3].get("x-llm-upstream") for o in out] == ["b"] * 4
    assert [round(o[2], 1) for o in out] == [29.5, 1.0, 1.0, 1.0]
    assert [host for host, _ in asked] == [A, B, B, B, B]


async def test_a_pool_goes_past_a_cut_deployment_to_a_ready_sibling() -> None:
    """A deployment cut at its share (a circuit's probe beside a sibling, or before a later hop)
    is gone past for a sibling that may serve, while its hold lasts; the sibling's answer does
    not clear it (it is not the cut one's). Without affinity, and a draw that always names the
    first of the deployments that may serve (a): the CLI's session would move home to b."""
    pool = ("upstreams:\n"
            "  - {{name: a, base_url: '{A}', apis: [gemini], api_key: K}}\n"
            "  - {{name: b, base_url: '{B}', apis: [gemini], api_key: K}}\n"
            "  - {{name: c, base_url: '{B}', apis: [gemini], api_key: K}}\n"
            "pools:\n  - {{name: p, models: ['gemini-*'], deployments: [a, b], strategy: weighted, "
            "fallbacks: [c], affinity: {{enabled: false}}}}\n"
            "loop_breaker: {{enabled: false}}\n")  # fmt: skip
    out, asked = await _serve(pool, {A: None, B: 1.0}, [_cli_first()] * 3, rand=lambda: 0.0)
    assert [o[0] for o in out] == [200] * 3
    assert [round(o[2], 1) for o in out] == [29.5, 1.0, 1.0]
    assert [host for host, _ in asked] == [A, B, B, B]


def _weighted(fallbacks: str) -> str:
    """Pool p of a (at {A}) and b (at {B}), picked in that order while both may serve (a draw
    of 0), no affinity; c at {B} too, for ``fallbacks``."""
    return ("upstreams:\n"
            "  - {{name: a, base_url: '{A}', apis: [gemini], api_key: K}}\n"
            "  - {{name: b, base_url: '{B}', apis: [gemini], api_key: K}}\n"
            "  - {{name: c, base_url: '{B}', apis: [gemini], api_key: K}}\n"
            "pools:\n  - {{name: p, models: ['gemini-*'], deployments: [a, b], strategy: weighted, "
            f"fallbacks: [{fallbacks}], affinity: {{{{enabled: false}}}}}}}}\n"
            "loop_breaker: {{enabled: false}}\n")  # fmt: skip


async def test_a_sibling_refused_in_place_of_a_held_deployment_goes_back_to_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Review: with a held for its cut, b asked in its place answered API_KEY_INVALID, which no
    later hop is asked for: the request ended 403 with only b asked, where before the memory a
    was asked, and its cut moved the request on to c. The held one is asked before giving up,
    and is not told as gone past (it was counted as it was passed over, before b failed)."""
    caplog.set_level(logging.INFO, logger="gateway.decisions")
    steps = (lambda _: None, gemini.invalid_key())
    out, asked = await _serve(_weighted("c"), {A: None, B: 1.0}, [_cli_first()] * 2, rand=lambda: 0.0,
                              steps=steps)  # fmt: skip
    assert [(o[0], o[3].get("x-llm-upstream")) for o in out] == [(200, "b"), (200, "c")]
    assert [host for host, _ in asked] == [A, B, B, A, B]
    assert not [r for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "head_cut_skipped"]



# a, whose fallback is a pool q of one deployment b (for a held hop before a pool).
_CHAINED = ("upstreams:\n"
            "  - {{name: a, base_url: '{A}', apis: [gemini], api_key: K, fallbacks: [q]}}\n"
            "  - {{name: b, base_url: '{B}', apis: [gemini], api_key: K}}\n"
            "pools:\n  - {{name: q, models: ['never-*'], deployments: [b], affinity: {{enabled: false}}}}\n"
            "loop_breaker: {{enabled: false}}\n")  # fmt: skip


async def test_a_held_hop_is_asked_when_the_pool_after_it_answers_by_itself() -> None:
    """Review: a held for its cut, its fallback a pool whose one deployment sits out for a rate
    limit: the pool answered 429 "every deployment of pool 'q' is rate limited", no upstream
    asked, while a had recovered. No later hop carried the request: a is asked after all."""
    limited = gemini.rate_limited("gemini-3-flash-preview", 120.0)
    out, asked = await _serve(_CHAINED, {A: 1.0, B: 1.0}, [_cli_first()] * 2, hung_once=True, steps=(limited,))
    assert [o[0] for o in out] == [429, 200]
    assert out[1][3].get("x-llm-upstream") == "a"
    assert [host for host, _ in asked] == [A, B, A]


async def test_a_held_hop_still_hung_gives_way_to_the_pools_own_answer() -> None:
    """A second review: asked after the pool's own 429 with all the client's time, a held hop
    still hung turned that 429 (and its reset) into a 504 at 57 s, worse than without the
    memory. Asked with its share only, its cut gives way to the pool's answer: each request
    costs the 28.5 s it did before the memory, never a 504."""
    limited = gemini.rate_limited("gemini-3-flash-preview", 120.0)
    out, asked = await _serve(_CHAINED, {A: None, B: 1.0}, [_cli_first()] * 3, steps=(limited,))
    assert [o[0] for o in out] == [429, 429, 429]
    assert all(o[2] <= 30.0 for o in out)
    assert [host for host, _ in asked] == [A, B, A, A]
    assert all(s == pytest.approx(28.5, abs=1.0) for host, s in asked if host == A)


async def test_a_deployment_gone_past_for_a_later_hop_is_told_once(caplog: pytest.LogCaptureFixture) -> None:
    """A second review: a held for its cut, its sibling b (Messages) unable to carry a Google
    Search tool, the request went on to the fallback c, and a was told as gone past twice, by the
    pool and again by the chain: the skips' counter read 2 for one request."""
    caplog.set_level(logging.INFO, logger="gateway.decisions")
    pool = ("upstreams:\n"
            "  - {{name: a, base_url: '{A}', apis: [gemini], api_key: K}}\n"
            "  - {{name: b, base_url: '{M}', apis: [messages], api_key: K}}\n"
            "  - {{name: c, base_url: '{B}', apis: [gemini], api_key: K}}\n"
            "pools:\n  - {{name: p, models: ['gemini-*'], deployments: [a, b], strategy: weighted, "
            "fallbacks: [c], affinity: {{enabled: false}}}}\n"
            "loop_breaker: {{enabled: false}}\n")  # fmt: skip
    headers, path, body = _cli_first()
    search = {**body, "tools": [{"googleSearch": {}}]}
    out, _ = await _serve(pool, {A: None, B: 1.0}, [(headers, path, body), (headers, path, search)],
                          rand=lambda: 0.0)  # fmt: skip
    assert [(o[0], o[3].get("x-llm-upstream")) for o in out] == [(200, "b"), (200, "c")]
    skipped = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "head_cut_skipped"]
    assert [s["upstream"] for s in skipped] == ["a"]
