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
import socket
import ssl
from collections.abc import Awaitable, Callable

from aiohttp import web

CHECK_EVERY_S = 30.0

Stamp = tuple[tuple[int, int, int] | None, ...]


class _Encrypted(Exception):
    pass


def _no_passphrase() -> str:
    # Without a callback, OpenSSL asks for an encrypted key's passphrase on the terminal: the
    # event loop (and SIGTERM) froze on a renewal with a key that has one.
    raise _Encrypted


def server_context(cert_file: str, key_file: str | None) -> ssl.SSLContext:
    """A server context serving ``cert_file`` (``OSError``, ``ssl.SSLError`` or ``ValueError``
    when the files cannot be read or served)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)  # TLS 1.2+, no compression
    context.set_alpn_protocols(["http/1.1"])  # a client offering h2 learns at once it gets HTTP/1.1
    try:
        context.load_cert_chain(cert_file, key_file, password=_no_passphrase)
    except _Encrypted:
        raise ValueError("the key is encrypted") from None
    return context


def loaded(cert_file: str, key_file: str | None) -> ssl.SSLContext | str:
    """A server context serving the pair, or why it cannot be served, in a line that names the
    setting and the file, never their content."""
    key_field, key_path = ("tls_key_file", key_file) if key_file is not None else ("tls_cert_file", cert_file)
    for field, path in (("tls_cert_file", cert_file), ("tls_key_file", key_file)):
        if path is None:
            continue
        if not os.path.isfile(path):
            return f"{field}: {path} " + ("does not exist" if not os.path.exists(path) else "is not a file")
        if not os.access(path, os.R_OK):
            return f"{field}: {path} cannot be read (permission denied)"
    try:
        with open(cert_file, "rb") as f:
            cert_pem = f.read(1 << 20)
        with open(key_path, "rb") as f:
            key_pem = f.read(1 << 20)
    except OSError as e:
        return f"tls_cert_file: the certificate and key cannot be read: {e.strerror or type(e).__name__}"
    if b"-----BEGIN CERTIFICATE-----" not in cert_pem:
        return f"tls_cert_file: {cert_file} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    if b"ENCRYPTED" in key_pem:
        return (f"{key_field}: {key_path} holds an encrypted key, and the gateway reads no passphrase: "
                "give it the key decrypted (openssl pkey -in KEY -out KEY.plain)")  # fmt: skip
    if b"PRIVATE KEY-----" not in key_pem:
        return f"{key_field}: {key_path} holds no PEM private key"
    try:
        return server_context(cert_file, key_file)
    except ValueError:
        return f"{key_field}: {key_path} holds an encrypted key, and the gateway reads no passphrase"
    except ssl.SSLError as e:
        # OpenSSL's reason (KEY_VALUES_MISMATCH, ...) names the fault, not the key.
        reason = e.reason or type(e).__name__
        return f"tls_cert_file: the certificate and key cannot be loaded together: {reason}"
    except OSError as e:
        return f"tls_cert_file: the certificate and key cannot be read: {e.strerror or type(e).__name__}"


def problem(cert_file: str, key_file: str | None) -> str | None:
    """Why the pair cannot be served (None: it can)."""
    got = loaded(cert_file, key_file)
    return got if isinstance(got, str) else None


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
        self.context = server_context(cert_file, key_file)  # the listening sockets'
        # A renewal is served from a context of its own, handed to each handshake that names a
        # server (every agent's: they connect by host name). Loaded into the sockets' context
        # instead, a certificate of another key type (RSA after ECDSA) took a slot of its own and
        # the old one went on being served to the clients that prefer it.
        self._current = self.context
        self.context.sni_callback = self._current_for
        self._stamp = _stamp(cert_file, key_file)
        self._log = log

    def _current_for(self, conn: ssl.SSLObject, _server_name: str | None, base: ssl.SSLContext) -> None:
        if self._current is not base:
            conn.context = self._current

    def reload(self, trigger: str) -> bool:
        """Re-read the files into the context in force; on any fault the certificate in force
        stays (the pair is first loaded apart: a mismatched key loaded in place would leave the
        context serving a certificate with the wrong key)."""
        self._stamp = _stamp(self.cert_file, self.key_file)
        fresh = loaded(self.cert_file, self.key_file)
        if isinstance(fresh, str):
            self._log.error({"event": "tls_reload_refused", "trigger": trigger, "problem": fresh,
                             "in_force": "the certificate loaded before"})  # fmt: skip
            return False
        self._current = fresh
        # Clients that name no server (an address) get the sockets' context: loaded in place.
        self.context.load_cert_chain(self.cert_file, self.key_file, password=_no_passphrase)
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


class HandshakeBoundSite(web.SockSite):
    """A listening socket whose TLS handshakes must end within ``handshake_s``. aiohttp's sites
    leave the loop's 60 s: a client that opened a connection and sent no (or half a) ClientHello
    held it, and a descriptor, for a minute, whatever ``server.header_timeout_s`` says (whose
    timer starts only once the handshake is done)."""

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, *, ssl_context: ssl.SSLContext,
                 handshake_s: float, backlog: int = 128) -> None:  # fmt: skip
        super().__init__(runner, sock, ssl_context=ssl_context, backlog=backlog)
        self._handshake_s = handshake_s

    async def start(self) -> None:
        # As SockSite.start, with the handshake's bound.
        self._runner._reg_site(self)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            server, sock=self._sock, ssl=self._ssl_context, backlog=self._backlog,
            ssl_handshake_timeout=self._handshake_s,
        )
