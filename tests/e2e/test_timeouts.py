"""Scenarios that need short timeouts: a gateway from `python -m gateway --config`."""

from __future__ import annotations

import asyncio
import itertools
import time

import openai
import pytest

from tests.fakeupstream import FakeUpstream, Hang, Reply, Stream, chunk

pytestmark = pytest.mark.e2e
_count = itertools.count()


def msg() -> list[dict[str, str]]:
    """A fresh conversation per call: the gateway answers an identical request that just
    failed from memory (the loop breaker), and these tests each want a fresh exchange."""
    return [{"role": "user", "content": f"hi #{next(_count)}"}]




def test_hung_upstream_times_out_then_succeeds(sdk, fast_gateway, upstream: FakeUpstream) -> None:
    upstream.script(Hang(60))
    r = sdk(fast_gateway, max_retries=0).chat.completions.with_raw_response.create(model="m", messages=msg())
    assert r.parse().choices[0].message.content and r.headers["x-llm-attempts"] == "2"


def test_stalled_stream_raises_instead_of_hanging(sdk, fast_gateway, upstream: FakeUpstream) -> None:
    upstream.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "partial"})], then="stall"))
    t0 = time.monotonic()
    with pytest.raises(openai.APIError, match="stalled"):
        for _ in sdk(fast_gateway).chat.completions.create(model="m", messages=msg(), stream=True):
            pass
    assert time.monotonic() - t0 < 10


def test_circuit_opens_and_recovers(sdk, fast_gateway, upstream: FakeUpstream) -> None:
    c = sdk(fast_gateway, max_retries=0)
    # The gateway is the session's: a stream another test stalled counts against the circuit
    # (a broken stream is a failed request). A success first ends any such streak.
    assert c.chat.completions.create(model="m", messages=msg()).choices[0].message.content
    # 6 attempts, then the outage is noted (docs/errors/loop-breaker.md): 1 attempt each.
    upstream.script(*[Reply(503, "down")] * 8)
    for _ in range(3):
        with pytest.raises(openai.InternalServerError):
            c.chat.completions.create(model="m", messages=msg())
    sent = len(upstream.chat_requests())
    with pytest.raises(openai.InternalServerError) as e:
        c.chat.completions.create(model="m", messages=msg())
    assert e.value.status_code == 503 and e.value.response.headers["x-llm-attempts"] == "0"
    assert len(upstream.chat_requests()) == sent
    time.sleep(1.1)
    assert c.chat.completions.create(model="m", messages=msg()).choices[0].message.content


def test_storm_of_60_is_held_to_about_1_2x_attempts(fake: FakeUpstream, upstream: FakeUpstream, tmp_path) -> None:
    from tests.e2e.conftest import FAST_RETRIES, launch_cli

    gw = launch_cli(fake, tmp_path, FAST_RETRIES
                    + "  budget: {ttl_s: 10, min_retries_per_s: 0, percent_can_retry: 20}\n"
                    + "circuit_breaker: {failure_threshold: 1000, open_s: 1}\n")
    try:
        upstream.script(*[Reply(503, "down")] * 1000)

        async def storm() -> list[int]:
            ac = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=2)

            async def one() -> int:
                try:
                    await ac.chat.completions.create(model="m", messages=msg())
                    return 200
                except openai.APIStatusError as e:
                    return e.status_code

            try:
                return await asyncio.gather(*(one() for _ in range(60)))
            finally:
                await ac.close()

        statuses = asyncio.run(storm())
        assert statuses == [503] * 60
        attempts = len(upstream.chat_requests())
        assert 60 <= attempts <= 75, attempts  # 60 x 1.2 = 72; unprotected: 60 x 6 x 3 = 1080
    finally:
        gw.stop()
