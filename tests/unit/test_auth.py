"""Client keys: who may use the gateway, and when start-up must refuse."""

from __future__ import annotations

import hashlib

import pytest
from multidict import CIMultiDict

from gateway.auth import ClientAuth, startup_check
from gateway.config import ConfigError, parse_config

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
    assert result.outcome == "ok" and result.ok and result.required and result.message == ""
    assert result.key is not None and result.key.name == "client_keys"  # the flat list: one holder


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


def test_keys_are_looked_up_by_digest_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing compares key bytes: what is sent is hashed and looked up by its SHA-256 digest,
    which a sender cannot steer toward a configured key's (gateway/keys/registry.py)."""
    a = ClientAuth.from_keys(["k1-aaaa", "k2-bbbb", "k3-cccc"])
    assert set(a.ring.by_digest) == {hashlib.sha256(k.encode()).digest() for k in ("k1-aaaa", "k2-bbbb", "k3-cccc")}
    assert a.check({"x-api-key": "k3-cccc"}).ok and not a.check({"x-api-key": "k3-ccc"}).ok


def test_keys_are_never_kept_or_shown() -> None:
    a = client_auth()
    assert "gk-alpha" not in repr(a)
    assert not any(b"gk-alpha" in d for d in a.ring.by_digest)
    assert "gk-" not in repr(a.check({"x-api-key": "gk-alpha-0001"}))


def test_named_keys_come_back_with_their_rules_and_are_accepted_in_every_agents_header() -> None:
    cfg = parse_config(KEYED_UP + (
        "keys:\n"
        "  - {name: alice, key: gk-alice-1, team: web, models: ['claude-*'], requests_per_minute: 60,"
        "     budget: {usd: 50, period: day}}\n"
        f"  - {{name: ci-bot, key_sha256: {hashlib.sha256(b'gk-ci-2').hexdigest()}, parallel: 2}}\n"
        "teams: [{name: web, budget: {usd: 500}}]\n"), env={})
    a = ClientAuth.from_config(cfg)
    for header, value in (("Authorization", "Bearer gk-alice-1"), ("x-api-key", "gk-alice-1"),
                          ("api-key", "gk-alice-1"), ("x-goog-api-key", "gk-alice-1")):  # fmt: skip
        r = a.check({header: value})
        assert r.ok and r.key is not None and r.key.name == "alice", header
    alice = a.check({"x-api-key": "gk-alice-1"}).key
    assert alice is not None and alice.team == "web" and alice.requests_per_minute == 60
    assert alice.budget is not None and (alice.budget.usd, alice.budget.period) == (50, "day")
    assert alice.team_budget is not None and alice.team_budget.usd == 500
    assert alice.allows("claude-sonnet-4-5") and not alice.allows("gpt-4o")
    ci = a.check({"Authorization": "Bearer gk-ci-2"}).key
    assert ci is not None and ci.name == "ci-bot" and ci.parallel == 2 and ci.allows("anything")


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


EXPIRING = OPEN_UP + "keys: [{name: temp, key: gk-temp, expires_at: '2026-12-31T23:00:00+01:00'}]\n"
AT = 1798754400.0  # 2026-12-31T22:00:00Z


@pytest.mark.parametrize(("now", "outcome"), [(None, "ok"), (AT - 1, "ok"), (AT, "expired"), (AT + 86400, "expired")])
def test_a_key_past_its_expiry_is_expired(now: float | None, outcome: str) -> None:
    result = client_auth(EXPIRING).check({"Authorization": "Bearer gk-temp"}, now=now)
    assert result.outcome == outcome and result.ok is (outcome == "ok")
    if outcome == "expired":  # in UTC, whatever zone the config gave it in
        assert result.message_for("chat") == ("the gateway key 'temp' expired at 2026-12-31T22:00:00Z; "
                                              "ask the gateway's operator for a new one")  # fmt: skip


def test_an_expired_key_is_still_invalid_to_anyone_without_it() -> None:
    assert client_auth(EXPIRING).check({"Authorization": "Bearer gk-other"}, now=AT + 1).outcome == "invalid"


@pytest.mark.parametrize(("given", "says"), [
    ("2026-12-31", "is a day, not an instant: give the time and its zone, e.g. 2026-12-31T23:59:59Z"),
    ("2026-12-31T10:00:00", "has no time zone: add one, e.g. 2026-12-31T10:00:00Z"),
    ("'next friday'", "expires_at"),
])  # fmt: skip
def test_an_expiry_that_is_no_instant_is_refused_at_load(given: str, says: str) -> None:
    with pytest.raises(ConfigError, match="expires_at") as e:
        parse_config(OPEN_UP + f"keys: [{{name: temp, key: gk-temp, expires_at: {given}}}]\n", env={})
    assert says in str(e.value)


TWO = OPEN_UP + ("keys:\n  - {name: old, key: gk-old, expires_at: '2020-01-01T00:00:00Z'}\n"
                 "  - {name: new, key: gk-new}\n")  # fmt: skip


@pytest.mark.parametrize("headers", [
    {"Authorization": "Bearer gk-old", "x-api-key": "gk-new"},
    {"Authorization": "Bearer gk-new", "x-api-key": "gk-old"},
])  # fmt: skip
def test_an_expired_key_beside_a_good_one_lets_the_request_in_on_the_good_one(headers: dict[str, str]) -> None:
    """Claude Code sends ANTHROPIC_AUTH_TOKEN and ANTHROPIC_API_KEY both when both are set."""
    result = client_auth(TWO).check(headers, now=AT)
    assert result.ok and result.key is not None and result.key.name == "new"


def test_an_expired_key_beside_an_unknown_one_is_expired() -> None:
    result = client_auth(TWO).check({"Authorization": "Bearer gk-bogus", "x-api-key": "gk-old"}, now=AT)
    assert result.outcome == "expired" and result.key is not None and result.key.name == "old"


def test_every_value_of_a_rotated_key_is_the_same_named_key() -> None:
    cfg = parse_config(KEYED_UP + (
        "keys:\n"
        "  - {name: alice, key: [gk-alice-old, gk-alice-new], budget: {usd: 5, period: day}}\n"
        f"  - {{name: ci-bot, key_sha256: ['{hashlib.sha256(b'gk-ci-1').hexdigest()}',"
        f" '{hashlib.sha256(b'gk-ci-2').hexdigest()}']}}\n"), env={})  # fmt: skip
    a = ClientAuth.from_config(cfg)
    old, new = (a.check({"x-api-key": k}).key for k in ("gk-alice-old", "gk-alice-new"))
    assert old is not None and old is new  # one spec: one spend, one set of limits
    assert {a.check({"Authorization": f"Bearer gk-ci-{n}"}).key.name for n in (1, 2)} == {"ci-bot"}  # type: ignore[union-attr]
    assert not a.check({"x-api-key": "gk-alice"}).ok


OFF = OPEN_UP + ("keys:\n  - {name: alice, key: gk-alice, disabled: true}\n"
                 "  - {name: bob, key: gk-bob, team: web}\n  - {name: carol, key: gk-carol, team: ops}\n"
                 "teams: [{name: web, disabled: true}, {name: ops}]\n")  # fmt: skip


@pytest.mark.parametrize(("key", "by", "why"), [
    ("gk-alice", "key", "it is disabled"),
    ("gk-bob", "team", "its team 'web' is disabled"),
])  # fmt: skip
def test_a_disabled_key_or_team_is_refused_naming_the_key_and_whom_to_ask(key: str, by: str, why: str) -> None:
    result = client_auth(OFF).check({"Authorization": f"Bearer {key}"}, now=AT)
    assert result.outcome == "disabled" and not result.ok
    assert result.key is not None and result.key.disabled == by
    name = result.key.name
    assert result.message_for("messages") == (f"the gateway key '{name}' is turned off ({why} in the gateway's "
                                              "config); ask the gateway's operator to turn it back on")


def test_a_disabled_key_beside_a_good_one_lets_the_request_in_on_the_good_one() -> None:
    result = client_auth(OFF).check({"Authorization": "Bearer gk-alice", "x-api-key": "gk-carol"}, now=AT)
    assert result.ok and result.key is not None and result.key.name == "carol"
    assert client_auth(OFF).check({"x-api-key": "gk-bogus", "Authorization": "Bearer gk-alice"}).outcome == "disabled"
