"""The sender's one-timer-per-exchange deadline behaves like asyncio.timeout: it turns its
own expiry into a timeout, leaves anyone else's cancellation alone, and re-arming later is
lazy (a pending earlier timer is kept and simply re-checks)."""

import asyncio

import pytest
from aiohttp import web

from gateway.config import TimeoutsConfig
from gateway.errors import TransportError
from gateway.upstream import UpstreamFailure, UpstreamRequest
from gateway.upstream.aiohttp_sender import AiohttpSender
from gateway.upstream.deadline import Deadline as _Deadline


async def test_expiry_while_armed_is_a_timeout_and_the_task_is_uncancelled() -> None:
    d = _Deadline()
    d.arm(0.02)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(1)
    assert d.expired()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    d.close()


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    started = asyncio.Event()

    async def body() -> str:
        d = _Deadline()
        d.arm(10)
        started.set()
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            return "timeout" if d.expired() else "cancelled"
        finally:
            d.close()
        return "done"

    task = asyncio.create_task(body())
    await started.wait()
    task.cancel()
    assert await task == "cancelled"


async def test_disarmed_deadline_never_fires_and_later_rearm_keeps_the_timer() -> None:
    d = _Deadline()
    d.arm(0.01)
    handle = d._handle
    d.disarm()
    await asyncio.sleep(0.03)  # the timer fires, finds nothing armed
    assert not d.expired()
    d.arm(0.05)
    first = d._handle
    d.arm(0.2)  # later: the pending timer is kept
    assert d._handle is first and first is not handle
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(1)  # the first timer re-checks at 0.05 and re-arms for 0.2
    assert d.expired()
    d.close()


async def _serve(handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/x", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/x"


@pytest.mark.parametrize("stall", ["head", "body"])
async def test_sender_times_out_the_head_and_the_idle_body(stall: str) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        if stall == "head":
            await asyncio.sleep(2)
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(b"part")
        await asyncio.sleep(2)
        return resp

    runner, url = await _serve(handler)
    sender = AiohttpSender(TimeoutsConfig(connect_s=1, first_byte_s=1, idle_s=0.1), 4)
    await sender.start()
    try:
        request = UpstreamRequest("POST", url, {}, b"{}", first_byte_timeout_s=0.1)
        if stall == "head":
            with pytest.raises(UpstreamFailure) as e:
                await sender(request)
            assert e.value.kind is TransportError.FIRST_BYTE_TIMEOUT
        else:
            resp = await sender(request)
            chunks = resp.iter_chunks()
            assert await anext(chunks) == b"part"
            with pytest.raises(UpstreamFailure) as e:
                await anext(chunks)
            assert e.value.kind is TransportError.IDLE_TIMEOUT
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
    finally:
        await sender.close()
        await runner.cleanup()
