import pytest

from gateway.app import create_app
from gateway.config import UpstreamConfig, parse_config
from gateway.live import LIVE
from gateway.routing import (
    UnsafePath,
    in_api,
    pick_upstream,
    request_headers,
    required_for,
    response_headers,
    upstream_url,
)

A = UpstreamConfig(name="openai", base_url="https://api.example.com/v1", models=("gpt-*", "o3*"))
B = UpstreamConfig(name="local", base_url="http://127.0.0.1:8000/v1", models=("llama*", "*"))
KEYED = UpstreamConfig(name="k", base_url="http://x/v1", api_key="sk-gateway")


@pytest.mark.parametrize(
    ("model", "expected"),
    [("gpt-4o", "openai"), ("o3-mini", "openai"), ("llama3", "local"), ("anything", "local"), (None, "openai")],
)
def test_first_matching_upstream_wins(model: str | None, expected: str) -> None:
    up = pick_upstream([A, B], model)
    assert up is not None and up.name == expected


def test_no_match_is_none() -> None:
    assert pick_upstream([A], "claude-3") is None


@pytest.mark.parametrize(
    ("raw", "query", "expected"),
    [
        ("/v1/chat/completions", "", "https://api.example.com/v1/chat/completions"),
        ("/v1/models", "limit=2", "https://api.example.com/v1/models?limit=2"),
        ("/v1/files/file-abc/content", "", "https://api.example.com/v1/files/file-abc/content"),
        ("/v1/models/gpt%3A4", "", "https://api.example.com/v1/models/gpt%3A4"),
    ],
)
def test_paths_map_under_the_base(raw: str, query: str, expected: str) -> None:
    assert upstream_url(A.base_url, raw, query) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "/v1/../admin", "/v1/./models", "/v1/%2e%2e/admin", "/v1/%2E%2E/x", "/v1/%252e%252e/x",
        "/v1/a%2fb", "/v1/a%5cb", "/v2/models", "/admin", "http://evil.example/v1/models",
        "/v1/%25252e%25252e/x", "/v1/a%00b",
    ],
)
def test_traversal_and_foreign_targets_are_refused(raw: str) -> None:
    with pytest.raises(UnsafePath):
        upstream_url(A.base_url, raw, "")


def test_hop_by_hop_and_host_are_not_forwarded() -> None:
    client = [
        ("Host", "gw"), ("Connection", "keep-alive, X-Custom-Hop"), ("Keep-Alive", "5"),
        ("Transfer-Encoding", "chunked"), ("TE", "trailers"), ("Upgrade", "h2c"),
        ("Proxy-Authorization", "Basic x"), ("Proxy-Connection", "x"), ("Trailer", "x"),
        ("X-Custom-Hop", "1"), ("Content-Length", "10"), ("Accept-Encoding", "gzip"),
        ("Authorization", "Bearer client"), ("OpenAI-Organization", "org-1"), ("x-request-id", "theirs"),
        ("Expect", "100-continue"),
    ]
    out = request_headers(client, B, "rid-1")
    lowered = {k.lower(): v for k, v in out.items()}
    for dropped in ("host", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                    "proxy-authorization", "proxy-connection", "trailer", "x-custom-hop",
                    "content-length", "accept-encoding", "expect"):
        assert dropped not in lowered
    assert lowered["authorization"] == "Bearer client"  # no key configured: the client's goes through
    assert lowered["openai-organization"] == "org-1"
    assert lowered["x-request-id"] == "rid-1"


def test_configured_key_replaces_the_clients() -> None:
    out = request_headers([("Authorization", "Bearer client"), ("x-api-key", "c")], KEYED, "r")
    assert out["Authorization"] == "Bearer sk-gateway"
    assert "x-api-key" not in {k.lower() for k in out}


def test_response_headers_drop_hop_by_hop_and_ours() -> None:
    up = [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked"), ("Connection", "close"),
          ("Content-Encoding", "gzip"), ("Content-Length", "5"), ("x-should-retry", "true"),
          ("x-request-id", "req_up"), ("x-ratelimit-remaining-requests", "9")]
    out = dict(response_headers(up))
    assert out == {"Content-Type": "application/json", "x-ratelimit-remaining-requests": "9",
                   "x-upstream-request-id": "req_up"}


def test_anthropics_request_id_is_also_the_upstream_request_id() -> None:
    out = response_headers([("Content-Type", "application/json"), ("request-id", "req_011CTa")])
    assert out == [("Content-Type", "application/json"), ("request-id", "req_011CTa"),
                   ("x-upstream-request-id", "req_011CTa")]


CLIENT_CREDS = [("Authorization", "Bearer client"), ("x-api-key", "c1"), ("API-Key", "c2"), ("Accept", "*/*")]


@pytest.mark.parametrize(
    ("key_header", "name", "value"),
    [("authorization", "authorization", "Bearer sk-gateway"), ("x-api-key", "x-api-key", "sk-gateway"),
     ("api-key", "api-key", "sk-gateway")],
)
def test_configured_key_goes_in_its_header_and_no_client_credential_survives(
        key_header: str, name: str, value: str) -> None:
    up = UpstreamConfig(name="k", base_url="http://x/v1", api_key="sk-gateway", key_header=key_header)  # type: ignore[arg-type]
    out = {k.lower(): v for k, v in request_headers(CLIENT_CREDS, up, "r").items()}
    creds = {k: v for k, v in out.items() if k in ("authorization", "x-api-key", "api-key")}
    assert creds == {name: value}
    assert out["accept"] == "*/*"


def test_without_a_key_every_client_credential_header_passes_through() -> None:
    out = request_headers(CLIENT_CREDS, B, "r")
    assert {k: out[k] for k in ("Authorization", "x-api-key", "API-Key")} == {
        "Authorization": "Bearer client", "x-api-key": "c1", "API-Key": "c2"}


def test_with_client_keys_a_keyless_upstream_gets_no_client_credential() -> None:
    # The client's credential is then a gateway key: it must never reach a provider.
    cfg = parse_config("server: {client_keys: gk-1}\n"
                       "upstreams: [{name: local, base_url: 'http://127.0.0.1:8000/v1'}]", env={})
    out = {k.lower() for k in request_headers(CLIENT_CREDS, cfg.upstreams[0], "r")}
    assert not out & {"authorization", "x-api-key", "api-key"}
    assert "accept" in out


def test_a_body_written_in_messages_gets_the_version_unless_the_client_sent_one() -> None:
    sent = in_api({"content-type": "text/plain", "OpenAI-Organization": "org-1", "Accept": "*/*"}, "messages")
    assert sent == {"Accept": "*/*", "Content-Type": "application/json", "anthropic-version": "2023-06-01"}
    theirs = in_api({"Anthropic-Version": "2023-01-01", "anthropic-beta": "b"}, "messages")
    assert theirs == {"Anthropic-Version": "2023-01-01", "anthropic-beta": "b", "Content-Type": "application/json"}
    assert in_api({"anthropic-beta": "b", "OpenAI-Beta": "x"}, "chat") == {
        "OpenAI-Beta": "x", "Content-Type": "application/json"}


def test_a_path_of_no_api_gets_the_version_only_on_an_upstream_that_speaks_only_messages() -> None:
    only = UpstreamConfig(name="a", base_url="http://x/v1", apis=("messages",))
    assert required_for({}, only) == {"anthropic-version": "2023-06-01"}
    assert required_for({}, B) == {}  # every API by default: an OpenAI upstream is not told Anthropic's


def test_an_upstreams_urls_stay_bounded_when_each_path_names_another_model() -> None:
    """A Gemini upstream's path holds the model name, which comes from clients: each new one
    was kept for good."""
    cfg = parse_config("upstreams:\n  - {name: g, base_url: 'http://127.0.0.1:9/v1beta', apis: [gemini]}\n", env={})
    up = create_app(cfg, sender=object())[LIVE].services.upstreams["g"]  # type: ignore[arg-type]
    for i in range(3000):
        assert up.url_for(f"/v1/models/m{i}:generateContent", "").endswith(f"/models/m{i}:generateContent")
    assert 0 < len(up.urls) <= 1024
