"""``server.watch_config``: the file is looked at every second, and a change of its content
reloads it as SIGHUP does, once the new content has stayed the same for a look.

The file's mtime, size and inode say whether it may have changed (a ConfigMap's symlink swap
gives a new inode); only then is it read, and its digest, compared with what the last reload
read, says whether it did: a touch, or an editor writing the same bytes, reloads nothing. A
file that cannot be read (removed while an editor replaces it) is reported once, by the
reload it triggers, not once a second.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.config import ConfigError, read_config_text
from gateway.reload.reloader import digest

EVERY_S = 1.0

Stamp = tuple[int, int, int, int] | None  # mtime_ns, size, inode, device; None: no file


class FileLook:
    """The digest of the file's content, read again only when its stat changed."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._stamp: Stamp = None
        self._digest: str | None = None

    def digest(self) -> str | None:
        stamp = _stamp(self._path)
        if stamp is None:
            self._stamp = self._digest = None
        elif stamp != self._stamp:
            self._stamp = stamp
            try:
                self._digest = digest(read_config_text(self._path))
            except ConfigError:
                self._digest = None
        return self._digest


class Reloads(Protocol):
    """A Reloader (reloader.py), or the supervisor's check of what its workers run."""

    path: str
    seen: str | None

    async def reload(self, trigger: str, *, quiet_if_same: bool = False) -> bool: ...


def _stamp(path: str) -> Stamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev


async def watch(
    reloader: Reloads,
    enabled: Callable[[], bool],
    *,
    every_s: float = EVERY_S,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Runs until cancelled. ``enabled``: whether the config in force watches (a reload may
    turn it on or off)."""
    look = FileLook(reloader.path)
    changed_to: list[str | None] = []  # a new content seen at the last look, not loaded yet
    while True:
        await sleep(every_s)
        try:
            await _look(reloader, enabled, look, changed_to)
        except Exception:  # the reload says what went wrong; the watch must outlive it
            changed_to.clear()


async def _look(
    reloader: Reloads, enabled: Callable[[], bool], look: FileLook, changed_to: list[str | None]
) -> None:
    """One look at the file; a change that has stayed is reloaded."""
    if not enabled():
        changed_to.clear()
        return
    found = look.digest()
    if found == reloader.seen:
        changed_to.clear()
    elif reloader.seen is None or changed_to == [found]:
        # The first look finds the file the process started from: nothing to say then.
        changed_to.clear()
        await reloader.reload("file", quiet_if_same=reloader.seen is None)
    else:
        # Loaded only once it has stayed the same for a look: an editor writing in place
        # may be caught halfway, and a half that parses (a file cut before its keys:)
        # would be served for a moment.
        changed_to[:] = [found]
