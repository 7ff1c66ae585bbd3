"""What the supervisor holds once SIGTERM has reached its workers: nothing a worker has stopped
listening on. Real sockets in one SO_REUSEPORT group, each "worker" holding its own descriptor
of its socket as an inherited one would be (no processes: the kernel's part is what matters).

Before: the supervisor held every socket until it noticed its worker's exit. A worker done
draining had closed its own descriptor, the supervisor's kept the socket in the group, and the
kernel went on giving it its share of new connections, which nobody accepted and which were
reset when the supervisor let go (tests/e2e/test_workers.py met ConnectionResetError under load).
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import socket

from gateway.workers.seat import WorkerSeat
from gateway.workers.supervisor import Worker, _stop_all, bind_sockets


def test_after_the_stop_a_socket_its_worker_closed_takes_no_more_connections() -> None:
    groups = bind_sockets("127.0.0.1", 0, 2)
    workers = [Worker(WorkerSeat(i, 2, tuple(s.fileno() for s in g), "/nonexistent"), g)
               for i, g in enumerate(groups)]  # fmt: skip
    # Each worker's own descriptor of its socket (what pass_fds gives the worker process).
    held = [socket.socket(fileno=os.dup(g[0].fileno())) for g in groups]
    port = groups[0][0].getsockname()[1]
    clients: list[socket.socket] = []
    try:
        stop = asyncio.Event()
        _stop_all(workers, stop, signal.SIGTERM)
        assert stop.is_set()
        held[0].close()  # worker 1 drained and stopped listening; worker 2 still drains a stream
        for _ in range(32):  # each its own connection, spread by the kernel over the group
            clients.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        held[1].setblocking(False)
        accepted = 0
        while accepted < len(clients) and select.select([held[1]], [], [], 5)[0]:
            conn, _ = held[1].accept()
            conn.close()
            accepted += 1
        assert accepted == len(clients)  # every one reached the worker still listening
    finally:
        for s in (*clients, *held):
            s.close()
        for g in groups:
            for s in g:
                s.close()
