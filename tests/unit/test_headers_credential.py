"""Where a forwarded client credential goes on an upstream that takes it in another place."""

import pytest

from gateway.config import UpstreamConfig
from gateway.routing import Outbound, credential_moved, in_api, request_headers

GOOGLE = ("x-goog-api-key", "{}")
BEARER = ("Authorization", "Bearer {}")


@pytest.mark.parametrize(("sent", "query_key", "to", "expected"), [
    ({"Authorization": "Bearer sk-1"}, None, GOOGLE, {"x-goog-api-key": "sk-1"}),
    ({"x-api-key": "sk-ant-1"}, None, GOOGLE, {"x-goog-api-key": "sk-ant-1"}),
    ({}, "AIza-q", GOOGLE, {"x-goog-api-key": "AIza-q"}),
    ({"x-goog-api-key": "AIza-h"}, "AIza-q", GOOGLE, {"x-goog-api-key": "AIza-h"}),  # the header wins
    ({"x-goog-api-key": "AIza-h", "Authorization": "Bearer other"}, None, GOOGLE, {"x-goog-api-key": "AIza-h"}),
    ({"x-api-key": "sk-ant-1"}, None, BEARER, {"Authorization": "Bearer sk-ant-1"}),
    ({"authorization": "bearer sk-2"}, None, BEARER, {"Authorization": "bearer sk-2"}),  # as it came
    ({"Accept": "*/*"}, None, GOOGLE, {"Accept": "*/*"}),  # none sent: none made up
])  # fmt: skip
def test_the_credential_goes_where_the_upstream_takes_it(
    sent: dict[str, str], query_key: str | None, to: tuple[str, str], expected: dict[str, str]
) -> None:
    assert credential_moved(dict(sent), to, query_key) == expected


# A translated call's headers are made in one pass (request_headers with api=...): the same
# headers, in the same order, as request_headers and then in_api.
OPEN = UpstreamConfig(name="u", base_url="http://127.0.0.1:1/v1")  # forwards the client's key
KEYED = UpstreamConfig(name="k", base_url="http://127.0.0.1:1/v1", api_key="sk-ours")


@pytest.mark.parametrize("client", [
    [("Content-Type", "application/json"), ("x-api-key", "sk-ant-1"), ("anthropic-version", "2023-06-01"),
     ("Host", "gw"), ("Content-Length", "12"), ("User-Agent", "claude-cli/2.1")],
    [("Authorization", "Bearer sk-1"), ("OpenAI-Organization", "org-1"), ("anthropic-beta", "x")],
    [("x-api-key", "sk-1"), ("Connection", "keep-alive, x-api-key"), ("Accept", "*/*")],  # hop-by-hop
    [("Connection", "close"), ("connection", "X-Extra"), ("X-Extra", "1"), ("x-goog-api-key", "AIza")],
    [("Content-Type", "text/plain"), ("X-Request-Id", "theirs")],
    [],
])  # fmt: skip
@pytest.mark.parametrize("upstream", [OPEN, KEYED])
@pytest.mark.parametrize("api", ["chat", "messages", "responses", "gemini"])
@pytest.mark.parametrize(("moving", "query_key"), [(False, None), (True, None), (True, "AIza-q")])
def test_one_pass_makes_what_two_passes_make(
    client: list[tuple[str, str]], upstream: UpstreamConfig, api: str, moving: bool, query_key: str | None,
) -> None:  # fmt: skip
    outbound = Outbound.of(upstream)
    moves_to = outbound.moves_to if moving else None  # None where the gateway sends its own key
    two = in_api(request_headers(client, outbound, "rid"), api, moves_to, query_key)
    one = request_headers(client, outbound, "rid", api, moves_to, query_key)
    assert list(one.items()) == list(two.items())
    assert list(in_api(request_headers(client, outbound, "rid"), api).items()) == list(
        request_headers(client, outbound, "rid", api).items()
    )
