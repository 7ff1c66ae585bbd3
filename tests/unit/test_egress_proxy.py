"""Which forward proxy carries a request (server.upstream_proxy), read as curl and the provider
SDKs read the same variables; and what the h1 client writes when one does."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_config
from gateway.upstream.h1.codec import parse_target, request_head
from gateway.upstream.h1.tunnel import connect_request, tunnel_status
from gateway.upstream.proxy import Proxy, ProxyError, egress, parse_proxy

PROXY = Proxy("proxy.corp", 3128)


def test_the_environment_names_a_proxy_per_scheme_lower_case_first() -> None:
    env = {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2", "HTTP_PROXY": "plain:3"}
    e = egress("env", env)
    assert e.proxy_for("https", "api.anthropic.com", 443) == Proxy("lower", 2)
    assert e.proxy_for("http", "models.internal", 80) == Proxy("plain", 3)  # no scheme: http://


def test_all_proxy_serves_a_scheme_that_has_none_of_its_own() -> None:
    e = egress("env", {"ALL_PROXY": "http://all:8080", "http_proxy": "http://web:80"})
    assert e.proxy_for("https", "api.openai.com", 443) == Proxy("all", 8080)
    assert e.proxy_for("http", "api.openai.com", 80) == Proxy("web", 80)


def test_no_variables_and_direct_mean_no_proxy() -> None:
    assert egress("env", {}).proxy_for("https", "api.openai.com", 443) is None
    assert egress("direct", {"https_proxy": "http://p:1"}).proxy_for("https", "api.openai.com", 443) is None


def test_an_explicit_url_serves_both_schemes_with_its_credentials() -> None:
    e = egress("http://us%40er:p%3Ass@proxy.corp:3128", {"https_proxy": "http://ignored:1"})
    proxy = e.proxy_for("https", "api.anthropic.com", 443)
    assert proxy is not None and (proxy.host, proxy.port) == ("proxy.corp", 3128)
    assert proxy.authorization == "Basic dXNAZXI6cDpzcw=="  # base64("us@er:p:ss")
    assert e.proxy_for("http", "api.anthropic.com", 80) == proxy
    assert "p:ss" not in repr(proxy) and "p%3Ass" not in repr(proxy)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]", "api.localhost"])
def test_loopback_upstreams_always_go_direct(host: str) -> None:
    assert egress("http://proxy.corp:3128", {}).proxy_for("http", host, 8000) is None


@pytest.mark.parametrize(
    ("no_proxy", "host", "port", "direct"),
    [
        ("internal.corp", "internal.corp", 443, True),
        ("internal.corp", "llm.internal.corp", 443, True),  # subdomains too, as curl
        (".internal.corp", "internal.corp", 443, True),
        (".internal.corp", "llm.internal.corp", 443, True),
        ("internal.corp", "notinternal.corp", 443, False),  # a suffix is not a subdomain
        ("10.0.0.0/8", "10.1.2.3", 443, True),
        ("10.0.0.0/8", "11.1.2.3", 443, False),
        ("10.0.0.0/8", "ten.example", 443, False),  # a network matches addresses, not names
        ("fd00::/8", "fd00::5", 443, True),
        ("[fd00::5]:8443", "fd00::5", 8443, True),
        ("models.corp:8443", "models.corp", 8443, True),
        ("models.corp:8443", "models.corp", 443, False),
        ("a.corp, b.corp ,c.corp", "b.corp", 443, True),
        ("a.corp b.corp", "b.corp", 443, True),
        ("*", "api.openai.com", 443, True),
        ("API.OpenAI.com", "api.openai.com", 443, True),
        ("", "api.openai.com", 443, False),
    ],
)
def test_no_proxy_names_what_goes_direct(no_proxy: str, host: str, port: int, direct: bool) -> None:
    for setting in ("env", "http://proxy.corp:3128"):
        e = egress(setting, {"https_proxy": "http://proxy.corp:3128", "NO_PROXY": no_proxy})
        assert (e.proxy_for("https", host, port) is None) is direct, (setting, no_proxy, host)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("socks5://proxy:1080", "a socks5:// proxy is not supported"),
        ("https://proxy:443", "a https:// proxy is not supported"),
        ("http://:3128", "names no host"),
        ("http://proxy:notaport", "not a proxy URL"),
    ],
)
def test_a_proxy_the_gateway_cannot_use_is_refused_naming_where_it_came_from(value: str, said: str) -> None:
    with pytest.raises(ProxyError, match=said) as e:
        egress("env", {"HTTPS_PROXY": value})
    assert "the environment variable HTTPS_PROXY" in str(e.value)
    with pytest.raises(ProxyError, match=said) as e:
        parse_proxy(value, "server.upstream_proxy")
    assert str(e.value).startswith("server.upstream_proxy: ")


def test_the_config_refuses_an_unusable_setting_in_one_line_without_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("https_proxy", raising=False)
    base = "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]\n"
    with pytest.raises(ConfigError, match="socks5:// proxy is not supported") as e:
        parse_config(base + "server: {upstream_proxy: 'socks5://u:hunter2@p:1080'}\n")
    assert "server.upstream_proxy" in str(e.value) and "hunter2" not in str(e.value)
    monkeypatch.setenv("https_proxy", "socks5://u:hunter2@p:1080")
    with pytest.raises(ConfigError, match="the environment variable https_proxy") as e:
        parse_config(base)
    assert "hunter2" not in str(e.value)
    assert parse_config(base + "server: {upstream_proxy: direct}\n")  # the environment is not read then


def test_through_a_proxy_an_http_request_names_its_whole_url_and_the_proxys_credentials() -> None:
    e = egress("http://alice:s3cret@proxy.corp:3128", {})
    target = parse_target("http://models.corp:8000/v1/chat/completions?x=1", e)
    assert target.key == ("http", "models.corp", 8000) and target.proxy is not None
    head = request_head("POST", target, {"Proxy-Authorization": "Basic client's", "X-A": "1"}, 2).decode()
    assert head.startswith("POST http://models.corp:8000/v1/chat/completions?x=1 HTTP/1.1\r\nHost: models.corp:8000\r\n")
    assert head.count("Proxy-Authorization") == 1 and "Proxy-Authorization: Basic YWxpY2U6czNjcmV0\r\n" in head


def test_through_a_proxy_an_https_request_is_written_as_to_the_server_itself() -> None:
    e = egress("http://alice:s3cret@proxy.corp:3128", {})
    target = parse_target("https://api.anthropic.com/v1/messages", e)
    assert target.proxy is not None and target.target == "/v1/messages"
    head = request_head("POST", target, {"X-A": "1"}, 2).decode()
    assert head.startswith("POST /v1/messages HTTP/1.1\r\nHost: api.anthropic.com\r\n")
    assert "Proxy-Authorization" not in head  # the proxy's credentials went on the CONNECT only
    assert connect_request(target.proxy, "api.anthropic.com", 443) == (
        b"CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\n"
        b"Proxy-Authorization: Basic YWxpY2U6czNjcmV0\r\n\r\n"
    )
    assert connect_request(PROXY, "fd00::5", 8443).startswith(b"CONNECT [fd00::5]:8443 HTTP/1.1\r\n")


def test_a_client_never_sends_its_own_proxy_credentials_upstream() -> None:
    head = request_head("POST", parse_target("http://models.corp/v1/x"), {"Proxy-Authorization": "Basic x"}, 0)
    assert b"Proxy-Authorization" not in head


@pytest.mark.parametrize(
    ("head", "status"),
    [(b"HTTP/1.1 200 Connection established\r\n\r\n", 200), (b"HTTP/1.0 407 Proxy Authentication Required\r\n", 407),
     (b"HTTP/1.1 200\r\n\r\n", 200)],
)  # fmt: skip
def test_the_proxys_answer_to_connect_is_read_by_its_status(head: bytes, status: int) -> None:
    assert tunnel_status(head) == status


def test_an_answer_to_connect_that_is_not_http_is_a_connect_failure() -> None:
    from gateway.errors import TransportError
    from gateway.upstream import UpstreamFailure

    with pytest.raises(UpstreamFailure) as e:
        tunnel_status(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
    assert e.value.kind is TransportError.CONNECT
