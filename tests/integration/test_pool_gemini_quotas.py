"""A pool of Gemini keys and Google's spent quotas (the corpus bodies of tests/corpus/google.json):
a key out of its day's quota stays out until Google's midnight, and one out of one model's quota
still serves the others. Upstream calls are counted per key; the gateway's clock is injected."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from gateway.fake.steps import Reply
from gateway.fake.upstream import FakeUpstream
from gateway.policy.google_quota import next_day_s
from tests.corpus_cases import IN_SAMPLE
from tests.integration.conftest import Gateway, MakeGateway

# Google's 429 for a spent per-day quota of gemini-2.5-flash, RetryInfo "36s" beside it.
PER_DAY = next(c for c in IN_SAMPLE if c["name"] == "gemini-per-day-quota-is-budget")["body"]
HELLO = {"contents": [{"role": "user", "parts": [{"text": "hello there"}]}]}
KEYS = ("g-a", "g-b", "g-c")


async def _pool(
    make_gateway: MakeGateway, wall: Callable[[], float], keys: tuple[str, ...] = KEYS
) -> tuple[Gateway, dict[str, FakeUpstream]]:
    fakes = {k: await FakeUpstream().start() for k in keys}
    # g-a is asked first while it may serve (weight, affinity off): nothing else decides.
    upstreams = "".join(f"  - {{name: {k}, base_url: '{f.url}', apis: [gemini], api_key: AIza-{k}, "
                        f"models: ['gemini-*'], weight: {1000000 if k == 'g-a' else 1}}}\n" for k, f in fakes.items())  # fmt: skip
    pools = f"pools:\n  - {{name: gem, models: ['gemini-*'], deployments: [{', '.join(keys)}], affinity: {{enabled: false}}}}\n"
    gw = await make_gateway(pools, fake=fakes[keys[0]], upstreams=upstreams, wall=wall)
    return gw, fakes


async def _generate(gw: Gateway, model: str = "gemini-2.5-flash") -> tuple[int, Any, dict[str, Any]]:
    async with gw.session.post(gw.base + f"/v1beta/models/{model}:generateContent", json=HELLO) as r:
        return r.status, r.headers, json.loads(await r.read())


def _inside_googles_day() -> float:
    """How far to move the gateway's clock on so that these tests' 110 s stay inside one Pacific
    day: nothing, unless Google's midnight is under five minutes away; then just past it. Run
    in the 110 s before it, the day turned under the test (found with libfaketime)."""
    now = time.time()
    left = next_day_s(now) - now
    return 0.0 if left > 300 else left + 60


def _calls(fakes: dict[str, FakeUpstream]) -> int:
    return sum(len(f.gemini_requests()) for f in fakes.values())


async def test_keys_out_of_their_days_quota_stay_out_until_googles_midnight(
    make_gateway: MakeGateway,
) -> None:
    """The audit: one request every 3 s for 110 s cost 12 upstream calls (each key again at 36,
    72, 108 s: RetryInfo's wait) and the 402 said "back in 36 s". Google: "Requests per day
    (RPD) quotas reset at midnight Pacific time" (https://ai.google.dev/gemini-api/docs/rate-limits)."""
    base = _inside_googles_day()
    shift = [base]
    gw, fakes = await _pool(make_gateway, lambda: time.time() + shift[0])
    try:
        for f in fakes.values():
            f.always = Reply(429, PER_DAY)
        midnight_ms = next_day_s(time.time() + shift[0]) * 1000
        for i in range(37):  # one request every 3 s for 110 s
            shift[0] = base + 3.0 * i
            status, headers, doc = await _generate(gw)
            # The first: the last key's 429 as Google wrote it; then the pool's 402, no call made.
            assert (status, headers["x-llm-error-type"]) == ((429 if i == 0 else 402), "budget"), doc
            # The reset the gateway states is Google's midnight, not RetryInfo's 36 s.
            assert abs(int(headers["x-llm-error-reset-at"]) - midnight_ms) < 5000
        assert _calls(fakes) == 3  # each key once, to learn it
        for f in fakes.values():
            f.always = None  # a new day: the quotas are back
        shift[0] = midnight_ms / 1000 - time.time() + 1
        status, headers, _ = await _generate(gw)
        assert status == 200 and headers["x-llm-upstream"] == "g-a"
    finally:
        for f in fakes.values():
            await f.close()


async def test_a_key_out_of_one_models_daily_quota_still_serves_the_others(make_gateway: MakeGateway) -> None:
    """g-a out of gemini-2.5-flash's day (Google's quota ids count it PerModel) sat out for every
    model: 30 requests for another model never went to it, and Gemini CLI's conversations lost
    the key that held their cache (its auto mode calls flash-lite before each prompt)."""
    base = _inside_googles_day()
    gw, fakes = await _pool(make_gateway, lambda: time.time() + base, keys=("g-a", "g-b"))
    try:
        fakes["g-a"].script(Reply(429, PER_DAY))
        status, headers, _ = await _generate(gw, "gemini-2.5-flash")
        assert status == 200 and headers["x-llm-upstream"] == "g-b"
        for _ in range(30):
            status, headers, _ = await _generate(gw, "gemini-2.5-flash-lite")
            assert status == 200 and headers["x-llm-upstream"] == "g-a"
        status, headers, _ = await _generate(gw, "gemini-2.5-flash")  # the spent model stays off g-a
        assert status == 200 and headers["x-llm-upstream"] == "g-b"
        assert (len(fakes["g-a"].gemini_requests()), len(fakes["g-b"].gemini_requests())) == (31, 2)
    finally:
        for f in fakes.values():
            await f.close()
