"""Where the gateway listens: the one line an operator reads when it cannot take its address,
and the file that tells the container's health check where it really does."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Mapping


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


# The file the listening process writes its addresses to, once listening (unset: none). The
# container image sets it: its HEALTHCHECK (gateway/healthcheck.py) asks the address the running
# gateway took, not the one the config file says now, which a refused reload or a port change
# that needs a restart have made another.
ADDRESS_FILE_ENV = "LLM_GATEWAY_ADDRESS_FILE"


def record_address(listen: list[str], env: Mapping[str, str] = os.environ) -> None:
    """Writes ``listen`` (URLs, as the started line has them) where ``$LLM_GATEWAY_ADDRESS_FILE``
    says, whole or not at all. One that cannot be written is a warning, not a refusal: the
    gateway serves all the same, and the health check falls back to the config's address."""
    path = env.get(ADDRESS_FILE_ENV)
    if not path:
        return
    part = f"{path}.{os.getpid()}.part"
    try:
        with open(part, "w", encoding="utf-8") as f:
            json.dump({"listen": listen, "pid": os.getpid()}, f)
        os.replace(part, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(part)
        reason = os.strerror(e.errno) if e.errno else str(e)
        print(f"llm-gateway: warning: cannot write {ADDRESS_FILE_ENV} ({path}): {reason}; the health "
              "check will ask the address in the config file instead", file=sys.stderr, flush=True)


def forget_address(env: Mapping[str, str] = os.environ) -> None:
    """Removes the file on the way out, when this process wrote it: nothing listens there now."""
    path = env.get(ADDRESS_FILE_ENV)
    if path and _recorded_pid(path) == os.getpid():
        with contextlib.suppress(OSError):
            os.unlink(path)


def recorded_address(env: Mapping[str, str] = os.environ) -> list[str] | None:
    """The URLs the running gateway wrote, or None (no file named, or none written yet)."""
    path = env.get(ADDRESS_FILE_ENV)
    doc = _read(path) if path else None
    listen = doc.get("listen") if doc is not None else None
    if isinstance(listen, list) and listen and all(isinstance(u, str) for u in listen):
        return listen
    return None


def _recorded_pid(path: str) -> int | None:
    doc = _read(path)
    pid = doc.get("pid") if doc is not None else None
    return pid if isinstance(pid, int) else None


def _read(path: str) -> dict[str, object] | None:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
