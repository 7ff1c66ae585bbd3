"""HTTPS on the listening side (``server.tls_cert_file``, ``server.tls_key_file``).

Agents send their keys with every request: where no load balancer or ingress terminates TLS
in front, the gateway does. The certificate is re-read in place, without a restart, when a
reload is asked for (SIGHUP) and when its files change (checked every ``CHECK_EVERY_S``):
certificates are renewed every few weeks (cert-manager, certbot) into the same paths. Open
connections keep the certificate they were made with; new handshakes get the new one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Awaitable, Callable

CHECK_EVERY_S = 30.0

Stamp = tuple[tuple[int, int, int] | None, ...]


def server_context(cert_file: str, key_file: str | None) -> ssl.SSLContext:
    """A server context serving ``cert_file`` (``OSError`` or ``ssl.SSLError`` when the files
    cannot be read or do not belong together)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)  # TLS 1.2+, no compression
    context.set_alpn_protocols(["http/1.1"])  # a client offering h2 learns at once it gets HTTP/1.1
    context.load_cert_chain(cert_file, key_file)
    return context


def problem(cert_file: str, key_file: str | None) -> str | None:
    """Why the pair cannot be served, in a line that names the files, never their content."""
    for path in (cert_file, key_file):
        if path is not None and not os.path.isfile(path):
            return f"{path} does not exist" if not os.path.exists(path) else f"{path} is not a file"
        if path is not None and not os.access(path, os.R_OK):
            return f"{path} cannot be read (permission denied)"
    try:
        server_context(cert_file, key_file)
    except ssl.SSLError as e:
        # OpenSSL's reason (KEY_VALUES_MISMATCH, NO_START_LINE, ...) names the fault, not the key.
        return f"the certificate and key cannot be loaded: {e.reason or type(e).__name__}"
    except OSError as e:
        return f"the certificate and key cannot be read: {e.strerror or type(e).__name__}"
    return None


def _stamp(*paths: str | None) -> Stamp:
    out: list[tuple[int, int, int] | None] = []
    for path in paths:
        if path is None:
            continue
        try:
            st = os.stat(path)  # follows links: a Kubernetes secret volume swaps a symlink
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


class ServerTLS:
    """The listening sockets' context, and its certificate kept current."""

    def __init__(self, cert_file: str, key_file: str | None, log: logging.Logger) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.context = server_context(cert_file, key_file)
        self._stamp = _stamp(cert_file, key_file)
        self._log = log

    def reload(self, trigger: str) -> bool:
        """Re-read the files into the context in force; on any fault the certificate in force
        stays (the pair is first loaded apart: a mismatched key loaded in place would leave the
        context serving a certificate with the wrong key)."""
        self._stamp = _stamp(self.cert_file, self.key_file)
        why = problem(self.cert_file, self.key_file)
        if why is not None:
            self._log.error({"event": "tls_reload_refused", "trigger": trigger, "problem": why,
                             "in_force": "the certificate loaded before"})  # fmt: skip
            return False
        self.context.load_cert_chain(self.cert_file, self.key_file)
        self._log.info({"event": "tls_certificate_reloaded", "trigger": trigger, "cert_file": self.cert_file})
        return True

    def changed(self) -> bool:
        return _stamp(self.cert_file, self.key_file) != self._stamp

    async def watch(
        self, every_s: float = CHECK_EVERY_S, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    ) -> None:
        """Runs until cancelled: a renewed certificate is served within ``every_s``."""
        while True:
            await sleep(every_s)
            if self.changed():
                self.reload("file")
