"""`python -m gateway.healthcheck [CONFIG]`: exit 0 when the running gateway answers
``/healthz``, else 1. The container's HEALTHCHECK runs it.

It asks the address the running gateway took, from the file ``$LLM_GATEWAY_ADDRESS_FILE``
names (the image sets it; gateway/listening.py writes it once listening), not the one CONFIG
says now: a config edit the gateway refused on reload, or a port change that waits for a
restart, must not mark a healthy gateway unhealthy. Without that file (the variable unset, or
a file system the gateway could not write, which it warned of at start-up) it asks the address
CONFIG names, so a config mounted over the default with another host or port is still checked
where the gateway listens."""

from __future__ import annotations

import ssl
import sys
import urllib.request
from urllib.parse import urlsplit

from gateway.config import ConfigError, load_config
from gateway.listening import recorded_address

DEFAULT_CONFIG = "/etc/llm-gateway/gateway.yaml"


def health_url(host: str, port: int, scheme: str = "http") -> str:
    # A wildcard address is reached over loopback from inside the same container.
    if host in ("0.0.0.0", "", "*"):
        host = "127.0.0.1"
    elif host in ("::", "[::]"):
        host = "::1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}/healthz"


def recorded_health_url() -> str | None:
    """``/healthz`` where the running gateway said it listens, if it said."""
    listen = recorded_address()
    if listen is None:
        return None
    parts = urlsplit(listen[0])
    if parts.hostname is None or parts.port is None:
        return None
    return health_url(parts.hostname, parts.port, parts.scheme or "http")


def main(argv: list[str]) -> int:
    url = recorded_health_url()
    if url is None:
        path = argv[0] if argv else DEFAULT_CONFIG
        try:
            cfg = load_config(path)
        except (ConfigError, OSError) as e:
            print(f"healthcheck: {e}", file=sys.stderr)
            return 1
        url = health_url(cfg.server.host, cfg.server.port, "https" if cfg.server.tls_cert_file else "http")
    # Never through a proxy the container's environment names (HTTP_PROXY): the gateway is
    # on this host, and a proxy would answer for it, or not, whatever the gateway's state.
    # Over TLS, unverified: this asks whether the gateway on this host answers, by an address
    # (127.0.0.1) its certificate does not name; whom the certificate convinces is the clients'.
    unverified = ssl.create_default_context()
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=unverified))  # fmt: skip
    try:
        with direct.open(url, timeout=2) as r:
            return 0 if r.status == 200 else 1
    except OSError as e:
        print(f"healthcheck: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
