"""Which forward proxy, if any, carries a request to an upstream (``server.upstream_proxy``).

Deployments often reach providers only through an egress proxy. The setting is ``env`` (the
default: the variables curl, the OpenAI and Anthropic SDKs and most HTTP clients read),
``direct`` (never a proxy) or a proxy's URL. An https upstream is reached through a CONNECT
tunnel (TLS end to end: the proxy sees the host name, never the request); a plain http one
by sending the request to the proxy with the URL in its request line (RFC 9112 §3.2.2).

Pure: the environment is handed in, nothing here opens a socket.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address

ENV = "env"
DIRECT = "direct"

# Lower case first: curl reads only ``http_proxy`` in lower case (an ``HTTP_PROXY`` can be set
# by a CGI request's ``Proxy:`` header), Python's urllib and the SDKs' httpx read both.
_VARIABLES = {
    "https": ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"),
    "http": ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"),
}
_NO_PROXY = ("no_proxy", "NO_PROXY")


class ProxyError(ValueError):
    """A proxy setting the gateway cannot use; the message names where it came from."""


@dataclass(frozen=True, slots=True)
class Proxy:
    host: str
    port: int
    # ``Basic ...`` from the URL's user and password; sent to the proxy only, never upstream.
    authorization: str | None = None

    def __repr__(self) -> str:  # a log or a traceback never shows the password
        return f"Proxy({self.host}:{self.port}{', with credentials' if self.authorization else ''})"


def parse_proxy(url: str, where: str) -> Proxy:
    """``url`` as a proxy (``where``: the setting or variable it came from, for the error)."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text  # "proxy.corp:3128", as curl and urllib take it
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise ProxyError(f"{where}: not a proxy URL") from None
    if parts.scheme.lower() != "http":
        raise ProxyError(
            f"{where}: a {parts.scheme}:// proxy is not supported; give an http:// proxy "
            "(https upstreams are still reached over TLS, through a CONNECT tunnel)"
        )
    if not parts.hostname:
        raise ProxyError(f"{where}: the proxy URL names no host")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode("ascii")
    return Proxy(parts.hostname, port or 80, authorization)


@dataclass(frozen=True, slots=True)
class _Bypass:
    """One ``no_proxy`` entry: a domain (and its subdomains), an address or network, and
    optionally a port."""

    domain: str | None
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    port: int | None

    def matches(self, host: str, address: _Address | None, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return address is not None and address in self.network
        assert self.domain is not None
        return host == self.domain or host.endswith("." + self.domain)


def _bypass(entry: str) -> _Bypass | None:
    text = entry.strip().lower()
    if not text:
        return None
    port = None
    if text.startswith("["):  # [::1]:8080 or [::1]
        inner, _, rest = text[1:].partition("]")
        text = inner
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif text.count(":") == 1:  # host:port (an IPv6 address has more than one colon)
        name, _, digits = text.partition(":")
        if digits.isdigit():
            text, port = name, int(digits)
    try:
        return _Bypass(None, ipaddress.ip_network(text, strict=False), port)
    except ValueError:
        return _Bypass(text.lstrip(".").rstrip("."), None, port)


def _is_loopback(host: str, address: _Address | None) -> bool:
    if address is not None:
        return address.is_loopback
    return host == "localhost" or host.endswith(".localhost")


@dataclass(frozen=True, slots=True)
class Egress:
    """The proxies for each scheme and what goes around them."""

    proxies: Mapping[str, Proxy]  # by upstream scheme; a scheme absent here goes direct
    bypass: tuple[_Bypass, ...] = ()
    everything_direct: bool = False  # no_proxy=*

    def proxy_for(self, scheme: str, host: str, port: int) -> Proxy | None:
        """The proxy a request to ``scheme://host:port`` goes through; None: straight there.
        Loopback upstreams (a local model server) always go straight: a proxy's loopback is
        not this host's."""
        proxy = self.proxies.get(scheme)
        if proxy is None or self.everything_direct:
            return None
        name = host.lower().strip("[]").rstrip(".")
        try:
            address: _Address | None = ipaddress.ip_address(name)
        except ValueError:
            address = None
        if _is_loopback(name, address):
            return None
        if any(b.matches(name, address, port) for b in self.bypass):
            return None
        return proxy


NO_EGRESS_PROXY = Egress({})


def egress(setting: str, environ: Mapping[str, str]) -> Egress:
    """The egress ``server.upstream_proxy`` describes (``ProxyError`` when it cannot be used)."""
    setting = setting.strip()
    if setting == DIRECT:
        return NO_EGRESS_PROXY
    entries = next((environ[v] for v in _NO_PROXY if environ.get(v)), "")
    bypass = tuple(b for b in map(_bypass, entries.replace(" ", ",").split(",")) if b is not None)
    everything_direct = any(b.domain == "*" for b in bypass)
    if setting != ENV:
        one = parse_proxy(setting, "server.upstream_proxy")
        return Egress({"http": one, "https": one}, bypass, everything_direct)
    proxies: dict[str, Proxy] = {}
    for scheme, names in _VARIABLES.items():
        name = next((v for v in names if environ.get(v, "").strip()), None)
        if name is not None:
            where = f"the environment variable {name} (server.upstream_proxy: env)"
            proxies[scheme] = parse_proxy(environ[name], where)
    return Egress(proxies, bypass, everything_direct)
