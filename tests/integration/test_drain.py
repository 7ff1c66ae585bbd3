"""A stream still relaying when drain_s runs out is ended by the gateway itself (as
gateway/server.py does on SIGTERM): a rollout, so it must not be counted as the provider's
failure, while the client is still told to retry (elsewhere)."""

import asyncio
import json

from gateway.live import LIVE
from tests.fakeupstream import Stream, chunk, data_events


async def test_a_stream_cut_at_drain_timeout_is_not_a_provider_failure(make_gateway) -> None:
    gw = await make_gateway(real_sleep=True)
    gw.fake.script(Stream([chunk({"content": f"w{i}"}) for i in range(40)] + [chunk({}, "stop")], delay_s=0.05))
    life = gw.app[LIVE].life

    async def client() -> bytes:
        return (await gw.chat({"model": "gpt-4o-mini", "stream": True,
                               "messages": [{"role": "user", "content": "long"}]}))[2]

    reading = asyncio.create_task(client())
    for _ in range(500):  # until the relay has registered itself (polled: it offers no event)
        if life.relaying:
            break
        await asyncio.sleep(0.01)
    assert life.relaying
    # What serve() does once drain_s has run out.
    life.shutting_down = True
    for task in list(life.relaying):
        task.cancel()
    body = await reading
    last = json.loads(data_events(body)[-1])
    assert last["error"]["code"] == "gateway_shutdown" and last["error"]["x_llm_error_type"] == "provider_unavailable"
    series = {"upstream": "primary", "model": "gpt-4o-mini", "status": "200"}
    assert gw.metric("llm_gateway_requests_total", **series, error_type="gateway_shutdown") == 1
    assert gw.metric("llm_gateway_requests_total", **series, error_type="provider_unavailable") == 0
    assert gw.metric("llm_gateway_upstream_attempts_total", upstream="primary", outcome="provider_unavailable") == 0
