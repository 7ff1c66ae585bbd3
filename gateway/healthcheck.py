"""`python -m gateway.healthcheck [CONFIG]`: exit 0 when the gateway that CONFIG describes
answers ``/healthz``, else 1. The container's HEALTHCHECK runs it, so a config mounted over the
default with another host or port is still checked where the gateway really listens."""

from __future__ import annotations

import sys
import urllib.request

from gateway.config import ConfigError, load_config

DEFAULT_CONFIG = "/etc/llm-gateway/gateway.yaml"


def health_url(host: str, port: int) -> str:
    # A wildcard address is reached over loopback from inside the same container.
    if host in ("0.0.0.0", "", "*"):
        host = "127.0.0.1"
    elif host in ("::", "[::]"):
        host = "::1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}/healthz"


def main(argv: list[str]) -> int:
    path = argv[0] if argv else DEFAULT_CONFIG
    try:
        cfg = load_config(path)
    except (ConfigError, OSError) as e:
        print(f"healthcheck: {e}", file=sys.stderr)
        return 1
    try:
        with urllib.request.urlopen(health_url(cfg.server.host, cfg.server.port), timeout=2) as r:
            return 0 if r.status == 200 else 1
    except OSError as e:
        print(f"healthcheck: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
