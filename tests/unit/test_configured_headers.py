"""upstreams[].headers: what the config takes, and where the headers land among the client's."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, UpstreamConfig, parse_config
from gateway.routing.headers import Outbound, _filtered, request_headers

BASE = "upstreams: [{name: a, base_url: 'https://api.example/v1', headers: %s}]\n"


def _outbound(**headers: str) -> Outbound:
    return Outbound.of(UpstreamConfig(name="a", base_url="https://api.example/v1", headers=headers))


def test_the_configs_headers_replace_the_clients_whatever_the_case() -> None:
    out = request_headers({"x-title": "client", "Accept": "*/*"}.items(), _outbound(**{"X-Title": "app"}), "rid")
    assert out == {"Accept": "*/*", "X-Request-Id": "rid", "X-Title": "app"}


def test_they_come_after_the_apis_own_and_the_moved_credential() -> None:
    plan = _outbound(**{"anthropic-version": "2023-01-01", "anthropic-beta": "b1"})
    client = {"authorization": "Bearer sk-c", "anthropic-beta": "client", "openai-organization": "org"}
    out = request_headers(client.items(), plan, "rid", "messages", ("x-api-key", ""))
    assert out["anthropic-version"] == "2023-01-01" and out["anthropic-beta"] == "client,b1"
    assert out["x-api-key"] == "sk-c" and "openai-organization" not in out


def test_an_empty_value_is_not_sent() -> None:
    cfg = parse_config(BASE % "{X-Title: '', HTTP-Referer: ' https://app '}")
    assert cfg.upstreams[0].headers == {"HTTP-Referer": "https://app"}


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("{Host: x}", "Host is the gateway's to write"),
        ("{Content-Length: '1'}", "Content-Length is the gateway's to write"),
        ("{x-request-id: x}", "x-request-id is the gateway's to write"),
        ("{Proxy-Authorization: x}", "Proxy-Authorization is the gateway's to write"),
        ("{Authorization: 'Bearer sk-secret-1'}", "Authorization carries the credential: set api_key"),
        ("{x-api-key: sk-secret-1}", "x-api-key carries the credential"),
        ("{'bad name': x}", "'bad name' is not a header name"),
        ('{X-A: "sk-secret-1\\r\\nX-B: y"}', "the value of X-A has a line break"),
        ("{X-A: '1', x-a: '2'}", "x-a is given twice"),
    ],
)
def test_a_header_the_config_cannot_send_is_refused_naming_it_never_quoting_its_value(given: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said) as e:
        parse_config(BASE % given)
    assert "sk-secret-1" not in str(e.value)
    assert str(e.value).startswith("upstreams[0].headers: ")


def test_their_values_are_not_in_the_configs_repr() -> None:
    cfg = parse_config(BASE % "{cf-aig-authorization: 'Bearer cf-secret'}")
    assert "cf-secret" not in repr(cfg) and "cf-secret" not in repr(cfg.upstreams[0])


def test_a_beta_of_the_configs_joins_the_clients_once() -> None:
    """Claude Code sends eight betas and needs them (2.1.197's; 2.1.332's as many, other
    ones): the config's extend the list."""
    plan = _outbound(**{"anthropic-beta": "context-1m-2025-08-07, fine-grained-tool-streaming-2025-05-14"})
    client = {"Anthropic-Beta": "mid-conversation-system-2026-04-07,fine-grained-tool-streaming-2025-05-14"}
    out = request_headers(client.items(), plan, "rid")
    assert out == {"X-Request-Id": "rid", "anthropic-beta": "mid-conversation-system-2026-04-07,"
                   "fine-grained-tool-streaming-2025-05-14,context-1m-2025-08-07"}  # fmt: skip
    alone = request_headers({}.items(), plan, "rid")
    assert alone["anthropic-beta"] == "context-1m-2025-08-07, fine-grained-tool-streaming-2025-05-14"



def test_a_header_sent_on_several_lines_goes_on_as_one_list() -> None:
    """RFC 9110 §5.3: repeated field lines of a list combine with commas; the last line alone
    went upstream (audit of Claude Code through a pool: `anthropic-beta: foo-1` then
    `anthropic-beta: bar-2` reached Anthropic as bar-2). Cookies join with "; " (RFC 6265 §5.4)."""
    lines = [("anthropic-beta", "foo-1"), ("anthropic-beta", "bar-2")]
    assert request_headers(lines, _outbound(), "rid")["anthropic-beta"] == "foo-1,bar-2"
    # (Cookies are withheld unless server.forward_client_headers names them; then they join so.)
    out, _, _ = _filtered([("Cookie", "a=1"), ("Cookie", "b=2")], frozenset(), None, False)
    assert out == {"Cookie": "a=1; b=2"}
    plan = _outbound(**{"anthropic-beta": "context-1m-2025-08-07"})
    out = request_headers(lines[:2], plan, "rid", "messages", ("x-api-key", ""))
    assert out["anthropic-beta"] == "foo-1,bar-2,context-1m-2025-08-07"

def test_values_yaml_reads_as_dates_or_numbers_are_sent_as_written() -> None:
    cfg = parse_config(BASE % "{anthropic-version: 2023-06-01, X-Priority: 1}")
    assert cfg.upstreams[0].headers == {"anthropic-version": "2023-06-01", "X-Priority": "1"}
    with pytest.raises(ConfigError, match="the value of X-On reads as a boolean: quote it"):
        parse_config(BASE % "{X-On: yes}")
