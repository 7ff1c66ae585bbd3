"""Reloading the config without a restart: on SIGHUP, and when ``server.watch_config`` is on,
when the file's content changes.

    watch.py          the file's content, checked every second
    restart_only.py   what only a restart can change (the running value is kept, and said)
    reloader.py       read, check as start-up does, build, swap; one log line either way

The swap itself, and closing what a replaced config alone used once its last request ends,
is gateway/live.py. With ``server.workers`` each worker reloads on its own: the supervisor
passes SIGHUP on to every worker (gateway/workers/supervisor.py), and each watches the file.
"""
