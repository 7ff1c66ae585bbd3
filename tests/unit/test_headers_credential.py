"""Where a forwarded client credential goes on an upstream that takes it in another place."""

import pytest

from gateway.config import UpstreamConfig
from gateway.routing import Outbound, credential_moved, in_api, request_headers
from gateway.routing.headers import is_jwt

GOOGLE = ("x-goog-api-key", "")
BEARER = ("Authorization", "Bearer ")


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


# Anthropic's API takes a key (sk-ant-api03-...) in x-api-key and an OAuth token (sk-ant-oat01-...)
# as a bearer token, and refuses each in the other's place (config.py, ANTHROPIC_HOST).
ANTHROPIC_OPEN = UpstreamConfig(name="a", base_url="https://api.anthropic.com/v1")
KEY, OAUTH = "sk-ant-api03-k", "sk-ant-oat01-t"


@pytest.mark.parametrize(("api_key", "sent"), [
    (KEY, {"x-api-key": KEY}),
    (OAUTH, {"Authorization": f"Bearer {OAUTH}"}),
])  # fmt: skip
@pytest.mark.parametrize("api", [None, "messages", "chat"])
def test_anthropics_api_gets_a_configured_credential_where_its_kind_is_taken(
    api_key: str, sent: dict[str, str], api: str | None
) -> None:
    up = UpstreamConfig.model_validate({"name": "a", "base_url": "https://api.anthropic.com/v1", "api_key": api_key})
    client = [("Authorization", "Bearer sk-client"), ("x-api-key", "sk-client"), ("Accept", "*/*")]
    out = request_headers(client, up, "rid", api)
    assert {k: v for k, v in out.items() if k.lower() in ("authorization", "x-api-key")} == sent


@pytest.mark.parametrize(("client", "forwarded"), [
    ({"Authorization": f"Bearer {KEY}"}, {"x-api-key": KEY}),  # refused as Bearer: "Invalid bearer token"
    ({"authorization": f"bearer  {KEY}"}, {"x-api-key": KEY}),
    ({"Authorization": f"Bearer {OAUTH}"}, {"Authorization": f"Bearer {OAUTH}"}),  # Claude Code's login
    ({"x-api-key": OAUTH}, {"Authorization": f"Bearer {OAUTH}"}),  # refused there: "invalid x-api-key"
    ({"x-api-key": KEY}, {"x-api-key": KEY}),
    ({"Authorization": "Bearer other"}, {"Authorization": "Bearer other"}),  # no kind known: as it came
    ({"Authorization": f"Bearer {KEY}", "x-api-key": KEY}, {"Authorization": f"Bearer {KEY}", "x-api-key": KEY}),
    ({}, {}),
])  # fmt: skip
def test_a_forwarded_credential_reaches_anthropics_api_where_its_kind_is_taken(
    client: dict[str, str], forwarded: dict[str, str]
) -> None:
    outbound = Outbound.of(ANTHROPIC_OPEN)
    for api in (None, "messages"):  # the client's own request, or one under another model name
        out = request_headers(client.items(), outbound, "rid", api)
        assert {k: v for k, v in out.items() if k.lower() in ("authorization", "x-api-key")} == forwarded
    # Elsewhere (an Anthropic-compatible server) it goes as it came: vLLM reads only Authorization.
    local = UpstreamConfig(name="l", base_url="http://127.0.0.1:8000/v1", apis=("messages",))
    assert request_headers(client.items(), local, "rid") == {**client, "X-Request-Id": "rid"}


@pytest.mark.parametrize(("client", "query_key", "moved"), [
    ({"Authorization": f"Bearer {KEY}"}, None, {"x-api-key": KEY}),  # an OpenAI client's
    ({"Authorization": f"Bearer {OAUTH}"}, None, {"Authorization": f"Bearer {OAUTH}"}),
    ({"Authorization": "Bearer other"}, None, {"x-api-key": "other"}),  # the API's documented place
    ({"x-goog-api-key": "AIza-h"}, None, {"x-api-key": "AIza-h"}),  # a Gemini client's
    ({}, OAUTH, {"Authorization": f"Bearer {OAUTH}"}),
    ({"x-api-key": OAUTH}, None, {"Authorization": f"Bearer {OAUTH}"}),
])  # fmt: skip
def test_a_translated_requests_credential_moves_to_where_anthropic_takes_its_kind(
    client: dict[str, str], query_key: str | None, moved: dict[str, str]
) -> None:
    outbound = Outbound.of(ANTHROPIC_OPEN)
    assert outbound.moves_to == ("x-api-key", "")
    out = request_headers(client.items(), outbound, "rid", "messages", outbound.moves_to, query_key)
    assert {k: v for k, v in out.items() if k.lower() in ("authorization", "x-api-key", "x-goog-api-key")} == moved
    # The model listing moves it after the fact (pipeline/models.py): to the same place.
    listed = request_headers(client.items(), outbound, "rid")
    credential_moved(listed, outbound.moves_to, query_key, outbound.by_kind)
    assert {k: v for k, v in listed.items() if k.lower() in ("authorization", "x-api-key", "x-goog-api-key")} == moved


@pytest.mark.parametrize("client", [
    [("Authorization", f"Bearer {KEY}"), ("Accept", "*/*")],
    [("authorization", f"bearer {OAUTH}"), ("anthropic-beta", "oauth-2025-04-20")],
    [("x-api-key", OAUTH), ("Connection", "close")],
    [("Authorization", f"Bearer {KEY}"), ("x-api-key", KEY)],
    [("x-goog-api-key", "AIza")],
])  # fmt: skip
@pytest.mark.parametrize("api", ["chat", "messages", "responses", "gemini"])
@pytest.mark.parametrize(("moving", "query_key"), [(False, None), (True, None), (True, OAUTH)])
def test_one_pass_makes_what_two_passes_make_on_anthropics_api(
    client: list[tuple[str, str]], api: str, moving: bool, query_key: str | None,
) -> None:  # fmt: skip
    outbound = Outbound.of(ANTHROPIC_OPEN)
    moves_to = outbound.moves_to if moving else None
    two = in_api(request_headers(client, outbound, "rid"), api, moves_to, query_key, outbound.by_kind)
    one = request_headers(client, outbound, "rid", api, moves_to, query_key)
    assert list(one.items()) == list(two.items())


@pytest.mark.parametrize(("named", "header", "template"), [
    ("authorization", "Authorization", "Bearer {}"), ("x-api-key", "x-api-key", "{}"),
])  # fmt: skip
def test_a_key_header_the_config_names_takes_a_forwarded_credential_of_either_kind(
    named: str, header: str, template: str
) -> None:
    """The placement by kind is a default: an operator who names `key_header` is sent the
    client's credential there, as docs/configuration.md says of every upstream."""
    up = UpstreamConfig(name="a", base_url="https://api.anthropic.com/v1", key_header=named)
    outbound = Outbound.of(up)
    assert not outbound.by_kind
    for token in (KEY, OAUTH):
        client = {"Authorization": f"Bearer {token}"}
        out = request_headers(client.items(), outbound, "rid", "messages", outbound.moves_to)
        assert {k: v for k, v in out.items() if k.lower() in ("authorization", "x-api-key")} == {
            header: template.format(token)}


# Azure OpenAI takes an API key in `api-key` and a Microsoft Entra ID token as a bearer token
# (config.AZURE_OPENAI_SUFFIX); a token moved to `api-key` (its default key_header) is refused.
AZURE_OPEN = UpstreamConfig(name="z", base_url="https://res.openai.azure.com/openai/v1")
ENTRA = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJodHRwczovL2NvZ25pdGl2ZXNlcnZpY2VzIn0.c2ln-_x"
AZKEY = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(("token", "jwt"), [
    (ENTRA, True),
    ("eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0.", True),  # unsigned: an empty third part
    (AZKEY, False),
    ("eyJhbGciOiJub25lIn0", False),  # one part
    ("eyJa.b", False),  # two parts
    ("abc.def.ghi", False),  # not a JSON header
    ("eyJa.b.c.d", False),
    ("eyJa.b c.d", False),
    ("sk-ant-oat01-t", False),
    ("", False),
])  # fmt: skip
def test_a_json_web_token_is_told_by_its_shape(token: str, jwt: bool) -> None:
    assert is_jwt(token) is jwt


@pytest.mark.parametrize(("client", "query_key", "sent"), [
    ({"Authorization": f"Bearer {ENTRA}"}, None, {"Authorization": f"Bearer {ENTRA}"}),  # not to api-key
    ({"authorization": f"bearer  {ENTRA}"}, None, {"Authorization": f"Bearer {ENTRA}"}),
    ({"x-api-key": ENTRA}, None, {"Authorization": f"Bearer {ENTRA}"}),  # an anthropic SDK's
    ({"api-key": ENTRA}, None, {"Authorization": f"Bearer {ENTRA}"}),
    ({}, ENTRA, {"Authorization": f"Bearer {ENTRA}"}),
    ({"Authorization": f"Bearer {AZKEY}"}, None, {"api-key": AZKEY}),  # a key: the host's key_header
    ({"x-api-key": AZKEY}, None, {"api-key": AZKEY}),
    ({}, AZKEY, {"api-key": AZKEY}),
])  # fmt: skip
@pytest.mark.parametrize("named", [None, "api-key"])
def test_a_translated_requests_entra_id_token_reaches_azure_as_a_bearer_token(
    client: dict[str, str], query_key: str | None, sent: dict[str, str], named: str | None
) -> None:
    """A key_header the config names changes nothing for a token: Azure reads one nowhere else."""
    up = AZURE_OPEN if named is None else UpstreamConfig(name="z", base_url=AZURE_OPEN.base_url, key_header=named)
    assert up.key_header_given is (named is not None)
    outbound = Outbound.of(up)
    assert outbound.moves_to == ("api-key", "")
    names = ("authorization", "api-key", "x-api-key", "x-goog-api-key")
    out = request_headers(client.items(), outbound, "rid", "chat", outbound.moves_to, query_key)
    assert {k: v for k, v in out.items() if k.lower() in names} == sent
    listed = request_headers(client.items(), outbound, "rid")  # the model listing's, moved after
    credential_moved(listed, outbound.moves_to, query_key, outbound.by_kind)
    assert {k: v for k, v in listed.items() if k.lower() in names} == sent
    assert list(in_api(request_headers(client.items(), outbound, "rid"), "chat", outbound.moves_to, query_key,
                       outbound.by_kind).items()) == list(out.items())  # fmt: skip


@pytest.mark.parametrize(("client", "sent"), [
    ({"Authorization": f"Bearer {ENTRA}"}, {"Authorization": f"Bearer {ENTRA}"}),
    ({"api-key": ENTRA}, {"Authorization": f"Bearer {ENTRA}"}),
    ({"api-key": AZKEY}, {"api-key": AZKEY}),
    ({"Authorization": f"Bearer {AZKEY}"}, {"Authorization": f"Bearer {AZKEY}"}),  # as it came
    ({"api-key": ENTRA, "Authorization": f"Bearer {ENTRA}"}, {"api-key": ENTRA, "Authorization": f"Bearer {ENTRA}"}),
])  # fmt: skip
def test_an_azure_clients_own_credential_goes_as_it_came_but_a_token_in_api_key(
    client: dict[str, str], sent: dict[str, str]
) -> None:
    out = request_headers(client.items(), Outbound.of(AZURE_OPEN), "rid")
    assert {k: v for k, v in out.items() if k.lower() in ("authorization", "api-key")} == sent
    # Elsewhere (an OpenAI-compatible server) nothing moves.
    assert request_headers(client.items(), OPEN, "rid") == {**client, "X-Request-Id": "rid"}


def test_an_azure_upstream_with_its_own_key_sends_that_key_whatever_the_client_sent() -> None:
    up = UpstreamConfig.model_validate({"name": "z", "base_url": AZURE_OPEN.base_url, "api_key": AZKEY})
    outbound = Outbound.of(up)
    assert outbound.by_kind is None
    out = request_headers({"Authorization": f"Bearer {ENTRA}"}.items(), outbound, "rid", "chat")
    assert {k: v for k, v in out.items() if k.lower() in ("authorization", "api-key")} == {"api-key": AZKEY}
