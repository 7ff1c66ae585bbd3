"""The one line an operator reads when the gateway cannot take its address."""

from __future__ import annotations

import os


class ListenError(Exception):
    """The gateway cannot listen where its config says; ``str()`` is the line to print after
    ``llm-gateway: ``, and the process exits 2, as for any config it cannot run."""


def cannot_listen(host: str, port: int, error: OSError) -> ListenError:
    # asyncio words a failed bind "error while attempting to bind on address ('h', 8080):
    # address already in use", the address a second time and in Python's syntax: only the
    # reason is kept, from the errno itself, which both asyncio and a bare socket carry.
    reason = os.strerror(error.errno).lower() if error.errno else str(error)
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return ListenError(f"cannot listen on {where}: {reason}")


def raise_open_files_limit() -> int | None:
    """The soft limit on open files raised to the hard one, as proxies do (nginx's
    ``worker_rlimit_nofile``, HAProxy by itself): each client connection and each upstream one
    is a descriptor, and the soft limit many systems start processes with (1024) is reached by
    a few hundred concurrent streams. The hard limit is the administrator's and stays. Returns
    the soft limit in force (None where the platform has none)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # An unlimited hard limit is not a value the kernel takes for open files (Linux caps them at
    # fs.nr_open, macOS at kern.maxfilesperproc): the usual stand-in is asked for instead.
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, _UNLIMITED_STAND_IN)
    if soft != resource.RLIM_INFINITY and wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            return soft
        return wanted
    return soft


_UNLIMITED_STAND_IN = 65536
