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
from gateway.upstream.deadline import shared_timer


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
    timer = shared_timer(asyncio.get_running_loop())
    d = _Deadline()
    d.arm(0.01)
    d.disarm()
    await asyncio.sleep(0.03)  # the timer fires, finds nothing armed
    assert not d.expired()
    assert timer.pending_at is None
    d.arm(0.05)
    first = timer.pending_at
    d.arm(0.2)  # later: the pending timer is kept
    assert timer.pending_at == first is not None
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(1)  # the timer re-checks at 0.05 and re-arms for 0.2
    assert d.expired()
    d.close()


async def test_one_loop_timer_serves_every_deadline_and_each_expires_at_its_own_time() -> None:
    loop = asyncio.get_running_loop()
    timer = shared_timer(loop)
    timed_out: list[tuple[str, float]] = []

    async def wait(name: str, seconds: float, *, closed_early: bool = False) -> None:
        d = _Deadline(loop, timer)
        d.arm(seconds)
        started = loop.time()
        try:
            if closed_early:
                d.close()  # finished before its time: never expires
            await asyncio.sleep(0.3)
        except asyncio.CancelledError:
            if not d.expired():
                raise
            timed_out.append((name, loop.time() - started))
        finally:
            d.close()

    waits = [asyncio.create_task(wait("late", 0.15)), asyncio.create_task(wait("early", 0.05))]
    await asyncio.sleep(0)
    earliest = timer.pending_at
    waits.append(asyncio.create_task(wait("closed", 0.01, closed_early=True)))
    waits.append(asyncio.create_task(wait("later", 0.2)))
    await asyncio.sleep(0)
    assert timer.pending_at is not None and earliest is not None
    assert timer.pending_at <= earliest  # only an earlier deadline moves the timer
    await asyncio.gather(*waits)
    assert [name for name, _ in timed_out] == ["early", "late", "later"]
    for (name, waited), due in zip(timed_out, (0.05, 0.15, 0.2), strict=True):
        assert due <= waited + 0.005 < due + 0.1, name
    assert not timer._armed  # nothing armed is left behind


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
