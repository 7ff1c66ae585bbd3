"""Client keys: who may use the gateway, and when start-up must refuse."""

from __future__ import annotations

import hmac

import pytest
from multidict import CIMultiDict

from gateway import auth
from gateway.auth import AuthResult, ClientAuth, startup_check
from gateway.config import parse_config

KEYS = "server: {client_keys: 'gk-alpha-0001,gk-beta-0002'}\n"
KEYED_UP = "upstreams: [{name: openai, base_url: 'https://api.example.com/v1', api_key: sk-operator}]\n"
OPEN_UP = "upstreams: [{name: local, base_url: 'http://127.0.0.1:8000/v1'}]\n"


def client_auth(text: str = KEYS + KEYED_UP) -> ClientAuth:
    return ClientAuth.from_config(parse_config(text, env={}))


def test_no_client_keys_means_nothing_is_required() -> None:
    a = client_auth(KEYED_UP)
    assert not a.required
    result = a.check({})
    assert result.ok and not result.required and result.outcome == "not_required"


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer gk-alpha-0001"},
        {"authorization": "bearer gk-beta-0002"},
        {"Authorization": "Bearer   gk-beta-0002  "},
        {"x-api-key": "gk-alpha-0001"},
        {"X-Api-Key": "gk-alpha-0001"},
        {"api-key": "gk-beta-0002"},
        # An SDK's own header next to the gateway key: any one match lets the request in.
        {"Authorization": "Bearer sk-something-else", "x-api-key": "gk-alpha-0001"},
    ],
)
def test_a_configured_key_in_any_accepted_header_is_let_in(headers: dict[str, str]) -> None:
    result = client_auth().check(headers)
    assert result == AuthResult("ok") and result.ok and result.required and result.message == ""


def test_works_on_aiohttp_style_case_insensitive_headers_and_pairs() -> None:
    a = client_auth()
    assert a.check(CIMultiDict({"X-API-KEY": "gk-alpha-0001"})).ok
    assert a.check([("Authorization", "Bearer gk-beta-0002")]).ok


@pytest.mark.parametrize(
    ("headers", "outcome"),
    [
        ({}, "missing"),
        ({"Accept": "*/*"}, "missing"),
        ({"Authorization": "Bearer "}, "missing"),
        ({"Authorization": "Basic Z2stYWxwaGEtMDAwMQ=="}, "missing"),
        ({"Authorization": "gk-alpha-0001"}, "missing"),  # no scheme: not a bearer token
        ({"Authorization": "Bearer gk-alpha-000"}, "invalid"),  # a prefix is not the key
        ({"Authorization": "Bearer gk-alpha-00011"}, "invalid"),
        ({"x-api-key": "GK-ALPHA-0001"}, "invalid"),
        ({"api-key": "sk-operator"}, "invalid"),  # the upstream key is not a client key
    ],
)
def test_missing_or_wrong_keys_are_refused(headers: dict[str, str], outcome: str) -> None:
    result = client_auth().check(headers)
    assert not result.ok and result.required and result.outcome == outcome
    assert result.message and "gk-" not in result.message


def test_every_key_is_compared_with_no_early_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    a = ClientAuth.from_keys(["k1-aaaa", "k2-bbbb", "k3-cccc"])
    assert a.check({"x-api-key": "k1-aaaa"}).ok  # the first key matches ...
    assert len(calls) == 3  # ... and the other two are still compared
    # Same-length digests: the key's length does not change the comparison either.
    assert {len(x) for pair in calls for x in pair} == {32}


def test_keys_are_never_kept_or_shown() -> None:
    a = client_auth()
    assert "gk-alpha" not in repr(a)
    assert not any(b"gk-alpha" in d for d in a._digests)
    assert "gk-" not in repr(a.check({"x-api-key": "gk-alpha-0001"}))


def test_startup_refuses_an_open_gateway_with_the_operators_key_off_loopback() -> None:
    cfg = parse_config("server: {host: 0.0.0.0}\n" + KEYED_UP, env={})
    verdict = startup_check(cfg)
    assert verdict.refusal is not None and verdict.warning is None
    assert "0.0.0.0:8080" in verdict.refusal and "openai" in verdict.refusal
    assert "server.client_keys" in verdict.refusal and "allow_unauthenticated" in verdict.refusal
    assert "sk-operator" not in verdict.refusal and "\n" not in verdict.refusal


def test_allow_unauthenticated_turns_the_refusal_into_a_warning() -> None:
    cfg = parse_config("server: {host: 0.0.0.0, allow_unauthenticated: true}\n" + KEYED_UP, env={})
    verdict = startup_check(cfg)
    assert verdict.refusal is None
    assert verdict.warning is not None and verdict.warning.startswith("WARNING:")


def test_loopback_without_client_keys_is_a_loud_warning() -> None:
    verdict = startup_check(parse_config(KEYED_UP, env={}))
    assert verdict.refusal is None
    assert verdict.warning is not None and verdict.warning.startswith("WARNING:")
    assert "\n" not in verdict.warning and "sk-operator" not in verdict.warning


@pytest.mark.parametrize(
    "text",
    [
        "server: {host: 0.0.0.0}\n" + OPEN_UP,  # no operator key to give away: pass-through
        "server: {host: 0.0.0.0, client_keys: gk-1}\n" + KEYED_UP,
        "server: {client_keys: gk-1}\n" + KEYED_UP,
    ],
)
def test_nothing_to_say_when_no_operator_key_is_exposed(text: str) -> None:
    verdict = startup_check(parse_config(text, env={}))
    assert verdict.refusal is None and verdict.warning is None
