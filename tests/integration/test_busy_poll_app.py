"""server.busy_poll_us in the app: answers are unchanged, the loop polls after the pipeline's
activity, and a reload that keeps the setting keeps the window the traffic has opened."""

from __future__ import annotations

import logging
from pathlib import Path

from gateway.busy_poll import NO_BUSY_POLL, BusyPoll
from gateway.live import LIVE
from gateway.reload.reloader import Reloader
from tests.fakeupstream import FakeUpstream, Stream, chunk, data_events
from tests.integration.conftest import MakeGateway

STREAM = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def file_text(url: str, busy_poll_us: int) -> str:
    return (
        f"server: {{busy_poll_us: {busy_poll_us}}}\n"
        f"upstreams:\n  - {{name: primary, base_url: '{url}'}}\n"
        "timeouts: {connect_s: 2, first_byte_s: 1.0, idle_s: 1.0}\nloop_breaker: {enabled: false}\n"
    )


async def test_off_by_default(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    assert gw.app[LIVE].services.busy_poll is NO_BUSY_POLL
    assert (await gw.chat())[0] == 200


async def test_answers_are_the_same_and_the_loop_polls_between_requests(make_gateway: MakeGateway) -> None:
    gw = await make_gateway("server: {busy_poll_us: 2000}\n")
    poll = gw.app[LIVE].services.busy_poll
    assert isinstance(poll, BusyPoll)
    for _ in range(5):
        status, _, body = await gw.chat()
        assert status == 200 and b"chat.completion" in body
    gw.fake.script(Stream([chunk({"content": "a"}), chunk({"content": "b"}), chunk({}, "stop")]))
    status, _, body = await gw.chat(STREAM)
    assert status == 200 and data_events(body)[-1] == "[DONE]"
    # Requests on loopback come well within 2 ms of each other: the window opened and the loop
    # ran its polling callback between them.
    assert poll.window_s > 0
    assert poll.spins > 0


async def test_a_reload_keeps_the_window_unless_the_setting_changes(
    make_gateway: MakeGateway, tmp_path: Path
) -> None:
    async with FakeUpstream() as fake:
        gw = await make_gateway("server: {busy_poll_us: 2000}\n", fake=fake)
        live = gw.app[LIVE]
        for _ in range(3):
            assert (await gw.chat())[0] == 200
        opened = live.services.busy_poll
        path = tmp_path / "gateway.yaml"
        reloader = Reloader(str(path), live, log=logging.getLogger("tests.integration.busy_poll"), env={})
        path.write_text(file_text(fake.url, 2000))
        assert await reloader.reload("SIGHUP", quiet_if_same=True)
        assert live.services.busy_poll is opened
        path.write_text(file_text(fake.url, 0))
        assert await reloader.reload("SIGHUP")
        assert live.services.busy_poll is NO_BUSY_POLL
        assert (await gw.chat())[0] == 200
