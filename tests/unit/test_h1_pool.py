"""The h1 client's pool: the limit, first come first served, cancellation, idle reuse."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.errors import TransportError
from gateway.upstream import UpstreamFailure
from gateway.upstream.h1.pool import Pool


@pytest.fixture
async def server() -> AsyncIterator[tuple[int, list[asyncio.StreamWriter]]]:
    accepted: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        await reader.read()  # until the client closes

    srv = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    yield port, accepted
    for w in accepted:
        w.close()
    srv.close()
    await srv.wait_closed()


async def test_waiters_get_the_slot_in_order_and_a_cancelled_one_passes_it_on(server) -> None:
    port, _ = server
    pool = Pool(asyncio.get_running_loop(), limit=1, connect_s=1)
    key = ("http", "127.0.0.1", port)
    first = await pool.acquire(key)
    order: list[str] = []

    async def wait(name: str) -> None:
        conn = await pool.acquire(key)
        order.append(name)
        pool.release(conn, reusable=True)

    second = asyncio.create_task(wait("second"))
    third = asyncio.create_task(wait("third"))
    await asyncio.sleep(0)
    assert pool.in_use == 1 and not second.done()
    second.cancel()
    await asyncio.sleep(0)
    newcomer = asyncio.create_task(wait("newcomer"))  # arrives after third: must not overtake it
    await asyncio.sleep(0)
    pool.release(first, reusable=True)
    await asyncio.gather(third, newcomer)
    assert order == ["third", "newcomer"]
    assert pool.in_use == 0
    pool.close()


async def test_an_idle_connection_is_reused_and_a_closed_one_is_not(server) -> None:
    port, accepted = server
    pool = Pool(asyncio.get_running_loop(), limit=4, connect_s=1)
    key = ("http", "127.0.0.1", port)
    conn = await pool.acquire(key)
    pool.release(conn, reusable=True)
    assert await pool.acquire(key) is conn
    pool.release(conn, reusable=True)
    await _until(lambda: len(accepted) == 1)
    accepted[0].close()  # the server ends the idle connection
    await _until(lambda: conn.closed)
    fresh = await pool.acquire(key)
    assert fresh is not conn and not fresh.closed
    pool.release(fresh, reusable=False)
    assert fresh.closed and pool.in_use == 0
    pool.close()


async def test_idle_connections_expire_after_keepalive(server) -> None:
    port, _ = server
    loop = asyncio.get_running_loop()
    pool = Pool(loop, limit=2, connect_s=1, keepalive_s=0.05)
    key = ("http", "127.0.0.1", port)
    conn = await pool.acquire(key)
    pool.release(conn, reusable=True)
    await _until(lambda: conn.closed)  # the sweeper closed it
    again = await pool.acquire(key)
    assert again is not conn
    pool.close()


async def test_connect_failures_free_the_slot() -> None:
    pool = Pool(asyncio.get_running_loop(), limit=1, connect_s=1)
    with pytest.raises(UpstreamFailure) as e:
        await pool.acquire(("http", "127.0.0.1", 1))  # nothing listens on port 1
    assert e.value.kind is TransportError.CONNECT
    assert pool.in_use == 0
    pool.close()


async def test_a_closed_pool_refuses_and_fails_its_waiters(server) -> None:
    port, _ = server
    pool = Pool(asyncio.get_running_loop(), limit=1, connect_s=1)
    key = ("http", "127.0.0.1", port)
    conn = await pool.acquire(key)
    waiter = asyncio.create_task(pool.acquire(key))
    await asyncio.sleep(0)
    pool.close()
    with pytest.raises(UpstreamFailure):
        await waiter
    with pytest.raises(UpstreamFailure):
        await pool.acquire(key)
    assert conn.closed


async def _until(condition, timeout_s: float = 2.0) -> None:  # type: ignore[no-untyped-def]
    # The pool has no hook to wait on (a socket closing is the loop's business): poll it.
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def test_an_exchange_dropped_unfinished_gives_its_slot_back(server) -> None:
    """A response nobody read nor closed (a code path that forgot it) frees its pool slot
    when it is dropped, instead of holding it for good."""
    from gateway.upstream.deadline import Deadline
    from gateway.upstream.h1.connection import H1Response

    port, _ = server
    loop = asyncio.get_running_loop()
    pool = Pool(loop, limit=1, connect_s=1)
    conn = await pool.acquire(("http", "127.0.0.1", port))
    conn.begin(loop, head_only=False)
    response = H1Response(conn, pool, 1.0, Deadline(loop))
    assert pool.in_use == 1
    del response  # the last reference: freed at once (nothing refers back to it)
    assert pool.in_use == 0 and conn.closed  # an unfinished exchange's socket is not reused
    pool.close()
