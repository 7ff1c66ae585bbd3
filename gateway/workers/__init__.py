"""Several processes serving one port (``server.workers``): the supervisor that binds the
sockets and keeps the workers running (supervisor.py), what each worker is told (seat.py), and
one ``/metrics`` for all of them (metrics.py)."""
