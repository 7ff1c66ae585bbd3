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
