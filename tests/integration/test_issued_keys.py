"""Keys issued at run time (``POST /v1/gateway/keys``, gateway/keys/issued.py): an orchestrator
holding an admin key gives each agent run its own key, budget and expiry without editing the
operator's file; the key works as a key of the file does, on every API, and is revoked with
``DELETE /v1/gateway/keys/{name}``. Here on ``state: {backend: memory}``; across replicas on
Redis: test_issued_keys_redis.py."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.live import LIVE
from gateway.reload.reloader import Reloader
from tests.integration.conftest import Gateway, MakeGateway, eventually, same_minute

PRICES = "prices: {'gpt-4o-mini*': {input: 1000000, output: 2000000}, 'claude-*': {input: 1000000, output: 2000000}}\n"
ROOT = {"x-api-key": "gk-root"}
FILE_KEYS = ("keys:\n"
             "  - {name: alice, key: gk-alice, team: web}\n"
             "  - {name: root, key: gk-root, admin: true}\n"
             "teams: [{name: web, budget: {usd: 1000, period: month}}]\n")  # fmt: skip


async def issue(gw: Gateway, body: Any, headers: dict[str, str] = ROOT) -> tuple[int, dict[str, Any]]:
    async with gw.session.post(gw.base + "/v1/gateway/keys", json=body, headers=headers) as r:
        return r.status, await r.json()


async def revoke(gw: Gateway, name: str, headers: dict[str, str] = ROOT) -> tuple[int, dict[str, Any]]:
    async with gw.session.delete(gw.base + f"/v1/gateway/keys/{name}", headers=headers) as r:
        return r.status, await r.json()


async def listed(gw: Gateway) -> dict[str, dict[str, Any]]:
    async with gw.session.get(gw.base + "/v1/gateway/keys", headers=ROOT) as r:
        assert r.status == 200
        return {k["name"]: k for k in (await r.json())["keys"]}


async def settled(gw: Gateway, name: str) -> dict[str, Any]:
    """The key's state once every reservation is settled (settling runs after the answer)."""
    for _ in range(100):
        state = (await listed(gw))[name]
        held = sum(state.get(b, {}).get("reserved_usd", 0) for b in ("budget", "team_budget"))
        if held == 0 and state["in_flight"] == 0:
            return state
        await asyncio.sleep(0.02)
    raise AssertionError(f"never settled: {state}")


async def test_an_issued_key_works_as_a_key_of_the_file_on_every_api(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture,
) -> None:
    gw = await make_gateway(PRICES + FILE_KEYS)
    before = time.time()
    with caplog.at_level(logging.INFO):
        status, made = await issue(gw, {"name": "run-17", "team": "web", "budget": {"usd": 500, "period": "day"},
                                        "requests_per_minute": 100, "models": ["gpt-4o-mini*", "claude-*"],
                                        "ttl_s": 3600})  # fmt: skip
        assert status == 201, made
        secret = made["key"]
        assert secret.startswith("llmgw_") and len(secret) > 40
        assert made["name"] == "run-17" and made["issued"] is True and made["issued_by"] == "root"
        assert made["team"] == "web" and made["budget"]["usd"] == 500 and made["budget"]["period"] == "day"
        assert made["limits"]["requests_per_minute"] == 100
        expires = datetime.strptime(made["expires_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
        assert before + 3600 - 2 <= expires <= time.time() + 3600
        # Every API, each client at its stock settings.
        async with openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key=secret) as chat:
            got = await chat.chat.completions.create(model="gpt-4o-mini",
                                                     messages=[{"role": "user", "content": "hi"}])  # fmt: skip
            assert got.choices[0].message.content
            assert (await chat.responses.create(model="gpt-4o-mini", input="hi")).output_text
            with pytest.raises(openai.PermissionDeniedError) as refused:  # its models are held
                await chat.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
            assert refused.value.code == "model_not_allowed"
        async with anthropic.AsyncAnthropic(base_url=gw.base, api_key=secret) as claude:
            message = await claude.messages.create(model="claude-sonnet-4-6", max_tokens=16,
                                                   messages=[{"role": "user", "content": "hi"}])  # fmt: skip
            assert message.content
        async with gw.session.post(gw.base + f"/v1beta/models/gpt-4o-mini:generateContent?key={secret}",
                                   json={"contents": [{"parts": [{"text": "hi"}]}]}) as r:  # fmt: skip
            assert r.status == 200
        async with gw.session.get(gw.base + "/v1/gateway/key", headers={"Authorization": f"Bearer {secret}"}) as r:
            own = await r.json()
        await eventually(lambda: gw.metric("llm_gateway_key_spend_usd_total", key="run-17", team="web",
                                           model="gpt-4o-mini") > 0, "the issued key's spend counted")  # fmt: skip
    assert own["name"] == "run-17" and own["issued"] is True and own["this_minute"]["requests"] >= 4
    assert own["budget"]["spent_usd"] > 0 and own["team_budget"]["spent_usd"] == own["budget"]["spent_usd"]
    access = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert {line.get("key") for line in access if line.get("path", "").startswith(("/v1/chat", "/v1/messages",
                                                                                   "/v1beta", "/v1/responses"))} \
        == {"run-17"}  # fmt: skip
    issued_lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "key_issued"]
    assert issued_lines and issued_lines[0]["key"] == "run-17" and issued_lines[0]["issued_by"] == "root"
    assert secret not in caplog.text and secret[6:] not in caplog.text  # the secret is never logged
    # Its budget is watched as any key's; its end, which every issued key has, raises no alert.
    assert [k for k in await gw.scraped("llm_gateway_budget_usd") if ("name", "run-17") in k]
    assert not [k for k in await gw.scraped("llm_gateway_key_expires_at_seconds") if ("key", "run-17") in k]
    keys = await listed(gw)
    assert keys["run-17"]["issued"] is True and keys["run-17"]["issued_by"] == "root"
    assert "issued" not in keys["alice"] and "issued" not in keys["root"]
    assert secret not in json.dumps(keys)


async def test_only_an_admin_key_issues_or_revokes(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(FILE_KEYS)
    status, body = await issue(gw, {"name": "x"}, headers={"Authorization": "Bearer gk-alice"})
    assert status == 403 and body["error"]["code"] == "admin_required"
    status, body = await issue(gw, {"name": "x"}, headers={})
    assert status == 401 and body["error"]["code"] == "missing_client_key"
    status, made = await issue(gw, {"name": "x"})
    assert status == 201
    # An issued key is never an admin key: it reads its own state, and issues nothing.
    status, body = await issue(gw, {"name": "y"}, headers={"Authorization": f"Bearer {made['key']}"})
    assert status == 403 and body["error"]["code"] == "admin_required"
    status, body = await revoke(gw, "x", headers={"Authorization": f"Bearer {made['key']}"})
    assert status == 403
    assert gw.fake.requests == []


@pytest.mark.parametrize(("body", "status", "code", "words"), [
    ({"name": "a", "budget": {"usd": -1}}, 400, "invalid_key_request", "budget.usd: Input should be greater than 0"),
    ({"name": "a b"}, 400, "invalid_key_request", "name: String should match pattern"),
    ({"name": "a", "admin": True}, 400, "invalid_key_request", "an issued key cannot be an admin key"),
    ({"name": "a", "key": "mine"}, 400, "invalid_key_request", "'key' is not accepted"),
    # Issued off, it was a key no one could turn on (nothing in the file to edit), counted in
    # max_issued, whose refusal told its holder to ask for it to be turned on in the config.
    ({"name": "a", "disabled": True}, 400, "invalid_key_request", "'disabled' is not accepted"),
    ({"name": "a", "ttl_s": 60, "expires_at": "2099-01-01T00:00:00Z"}, 400, "invalid_key_request", "not both"),
    ({"name": "a", "ttl_s": 0}, 400, "invalid_key_request", "'ttl_s' must be a positive number"),
    ({"name": "a", "expires_at": "2099-01-01T00:00:00"}, 400, "invalid_key_request", "has no time zone"),
    ({"name": "a", "expires_at": "2001-01-01T00:00:00Z"}, 400, "invalid_key_request", "has passed"),
    ({"name": "a", "team": "nobody"}, 400, "invalid_key_request", "team 'nobody' is not one of"),
    ({"name": "a", "parallel": "lots"}, 400, "invalid_key_request", "parallel: Input should be a valid integer"),
    ({"name": "a", "colour": "red"}, 400, "invalid_key_request", "colour: Extra inputs are not permitted"),
    ({"name": "alice"}, 409, "key_name_taken", "a key of the config file is named 'alice'"),
])
async def test_a_key_is_judged_as_a_key_of_the_file_is(
    make_gateway: MakeGateway, body: dict[str, Any], status: int, code: str, words: str,
) -> None:
    gw = await make_gateway(FILE_KEYS)
    got, answer = await issue(gw, body)
    assert got == status and answer["error"]["code"] == code and words in answer["error"]["message"], answer
    assert "lots" not in answer["error"]["message"]  # what was sent is not quoted back
    assert "a" not in await listed(gw)


async def test_the_answer_that_carries_the_key_is_never_stored_by_a_cache(make_gateway: MakeGateway) -> None:
    """The one answer holding the secret said nothing of caching: a proxy or client cache
    between the orchestrator and the gateway was free to keep it (OAuth's token answer must say
    no-store, RFC 6749 5.1)."""
    gw = await make_gateway(FILE_KEYS)
    async with gw.session.post(gw.base + "/v1/gateway/keys", json={"name": "cached"}, headers=ROOT) as r:
        assert r.status == 201 and (await r.json())["key"].startswith("llmgw_")
        assert r.headers.get("cache-control") == "no-store"
        assert r.headers.get("pragma") == "no-cache"  # an HTTP/1.0 cache reads this alone


async def test_a_name_is_one_key_and_the_set_is_capped_and_paced(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(FILE_KEYS + "keys_api: {max_issued: 2, issued_per_minute: 3}\n")
    await same_minute(15)  # the issues counted below are one minute's
    assert (await issue(gw, {"name": "a"}))[0] == 201
    status, body = await issue(gw, {"name": "a"})
    assert status == 409 and body["error"]["code"] == "key_name_taken"
    assert (await issue(gw, {"name": "b"}))[0] == 201
    status, body = await issue(gw, {"name": "c"})
    assert status == 409 and body["error"]["code"] == "issued_keys_full" and "max_issued" in body["error"]["message"]
    assert (await revoke(gw, "a"))[0] == 200
    assert (await issue(gw, {"name": "c"}))[0] == 201  # the third this minute (refusals count none)
    assert (await revoke(gw, "c"))[0] == 200
    async with gw.session.post(gw.base + "/v1/gateway/keys", json={"name": "d"}, headers=ROOT) as r:
        assert r.status == 429 and (await r.json())["error"]["code"] == "issue_rate_limited"
        assert r.headers["x-llm-error-type"] == "rate_limit" and 0 < int(r.headers["retry-after"]) <= 60


async def test_a_revoked_key_is_refused_at_once_and_its_team_keeps_its_spend(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(PRICES + FILE_KEYS)
    _, made = await issue(gw, {"name": "run-1", "team": "web"})
    run = {"Authorization": f"Bearer {made['key']}"}
    assert (await gw.chat(headers=run))[0] == 200
    team_spent = (await settled(gw, "run-1"))["team_budget"]["spent_usd"]
    assert team_spent == 26  # 12 prompt and 7 completion tokens at $1 and $2 each
    assert await revoke(gw, "run-1") == (200, {"name": "run-1", "revoked": True})
    status, _, body = await gw.chat(headers=run)
    assert status == 401 and json.loads(body)["error"]["code"] == "invalid_client_key"
    assert (await listed(gw))["alice"]["team_budget"]["spent_usd"] == team_spent  # the team paid it
    assert "run-1" not in await listed(gw)
    status, body = await revoke(gw, "run-1")
    assert status == 404 and body["error"]["code"] == "issued_key_not_found"
    status, body = await revoke(gw, "alice")
    assert status == 409 and body["error"]["code"] == "key_in_config"
    # As a removed key of the file's: its series go, so a key per run does not stay in every scrape.
    assert not [k for k in await gw.scraped("llm_gateway_key_spend_usd_total") if ("key", "run-1") in k]


async def test_an_issued_key_ends_by_default(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(FILE_KEYS + "keys_api: {default_ttl_s: 1}\n")
    _, made = await issue(gw, {"name": "short"})
    run = {"Authorization": f"Bearer {made['key']}"}
    assert (await gw.chat(headers=run))[0] == 200
    await eventually(lambda: time.time() > datetime.strptime(made["expires_at"], "%Y-%m-%dT%H:%M:%SZ")
                     .replace(tzinfo=UTC).timestamp() + 1.1, "the key's end", timeout_s=5)  # fmt: skip
    status, _, body = await gw.chat(headers=run)
    assert status == 401
    error = json.loads(body)["error"]
    assert error["code"] == "expired_client_key" and "the gateway key 'short' expired at" in error["message"]


async def test_a_reload_keeps_the_issued_keys(make_gateway: MakeGateway, tmp_path: Path) -> None:
    gw = await make_gateway(FILE_KEYS)
    _, made = await issue(gw, {"name": "kept", "requests_per_minute": 50})
    path = tmp_path / "gateway.yaml"
    path.write_text(f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\n"
                    "loop_breaker: {enabled: false}\n" + FILE_KEYS.replace("keys:\n", "keys:\n  - {name: bob, key: gk-bob}\n"))  # fmt: skip
    reloader = Reloader(str(path), gw.app[LIVE], log=logging.getLogger("tests.issued_keys"), env={})
    assert await reloader.reload("SIGHUP", quiet_if_same=True)
    assert (await gw.chat(headers={"Authorization": f"Bearer {made['key']}"}))[0] == 200
    assert (await gw.chat(headers={"Authorization": "Bearer gk-bob"}))[0] == 200
    assert (await listed(gw))["kept"]["limits"]["requests_per_minute"] == 50


async def test_issuing_on_separate_workers_memories_is_refused(make_gateway: MakeGateway) -> None:
    gw = await make_gateway("keys: [{name: root, key: gk-root, admin: true}]\nserver: {workers: 2}\n")
    status, body = await issue(gw, {"name": "x"})
    assert status == 501 and body["error"]["code"] == "keys_api_off" and "backend: redis" in body["error"]["message"]


async def test_no_key_is_issued_where_the_operator_turned_it_off(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(FILE_KEYS + "keys_api: {max_issued: 0}\n")
    status, body = await issue(gw, {"name": "x"})
    assert status == 501 and body["error"]["code"] == "keys_api_off"



async def test_an_issued_key_a_reload_hid_behind_a_file_key_is_revoked_all_the_same(
    make_gateway: MakeGateway, tmp_path: Path,
) -> None:
    """A reload gave a file key the name of an issued one: the issued key was hidden, DELETE
    answered 409 `key_in_config`, and once the file's key was removed the old secret worked
    again (review). DELETE revokes it, and the file's key stays."""
    gw = await make_gateway(FILE_KEYS)
    _, made = await issue(gw, {"name": "coll"})
    path = tmp_path / "gateway.yaml"
    head = f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\nloop_breaker: {{enabled: false}}\n"
    path.write_text(head + FILE_KEYS.replace("keys:\n", "keys:\n  - {name: coll, key: gk-coll}\n"))
    reloader = Reloader(str(path), gw.app[LIVE], log=logging.getLogger("tests.issued_keys"), env={})
    assert await reloader.reload("SIGHUP", quiet_if_same=True)
    assert (await gw.chat(headers={"Authorization": f"Bearer {made['key']}"}))[0] == 401
    status, body = await revoke(gw, "coll")
    assert status == 200 and body["revoked"] is True and "stays" in body["note"]
    assert (await gw.chat(headers={"Authorization": "Bearer gk-coll"}))[0] == 200
    path.write_text(head + FILE_KEYS)
    assert await reloader.reload("SIGHUP", quiet_if_same=True)
    assert (await gw.chat(headers={"Authorization": f"Bearer {made['key']}"}))[0] == 401  # gone, not hidden
    assert (await revoke(gw, "coll"))[0] == 404



async def test_the_keys_an_admin_key_issued_go_off_with_it(make_gateway: MakeGateway, tmp_path: Path) -> None:
    """An operator who took a leaked admin key out of the file (or turned it off) still had
    every key it had issued in force, up to keys_api.max_issued of them for up to 30 days:
    the children of a removed admin key answered 200 (review). They are turned off with it, and
    back on when it comes back."""
    gw = await make_gateway(FILE_KEYS)
    _, made = await issue(gw, {"name": "child"})
    run = {"Authorization": f"Bearer {made['key']}"}
    assert (await gw.chat(headers=run))[0] == 200
    path = tmp_path / "gateway.yaml"
    head = f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\nloop_breaker: {{enabled: false}}\n"
    reloader = Reloader(str(path), gw.app[LIVE], log=logging.getLogger("tests.issued_keys"), env={})
    other_admin = "  - {name: root, key: gk-root, admin: true}\n"
    for root in ("",  # removed, another admin in its place
                 "  - {name: root, key: gk-root}\n",  # no longer an admin key
                 "  - {name: root, key: gk-root, admin: true, disabled: true}\n"):  # turned off
        path.write_text(head + FILE_KEYS.replace(other_admin, root + "  - {name: ops, key: gk-ops, admin: true}\n"))
        assert await reloader.reload("SIGHUP", quiet_if_same=True)
        status, _, body = await gw.chat(headers=run)
        error = json.loads(body)["error"]
        assert status == 401 and error["code"] == "disabled_client_key", (root, body)
        assert error["message"] == ("the gateway key 'child' is turned off (the admin key 'root' that issued it "
                                    "is no longer one in the gateway's config); ask for a new key")
        async with gw.session.get(gw.base + "/v1/gateway/keys", headers={"x-api-key": "gk-ops"}) as r:
            assert {k["name"]: k.get("disabled") for k in (await r.json())["keys"]}["child"] == "issuer"
    path.write_text(head + FILE_KEYS)
    assert await reloader.reload("SIGHUP", quiet_if_same=True)
    assert (await gw.chat(headers=run))[0] == 200  # its admin key is back: so is the key


async def test_an_issued_key_ends_no_later_than_the_admin_key_that_issued_it(
    make_gateway: MakeGateway, tmp_path: Path,
) -> None:
    """An admin key that ends issued keys that outlived it by up to keys_api.max_ttl_s: a
    contractor's orchestrator key ending tonight made a key working for 30 days (review)."""
    end = datetime.fromtimestamp(time.time() + 3600, UTC).replace(microsecond=0)
    gw = await make_gateway(FILE_KEYS.replace("admin: true}", f"admin: true, expires_at: '{end.isoformat()}'}}"))
    status, body = await issue(gw, {"name": "later", "ttl_s": 7200})
    assert status == 400 and body["error"]["code"] == "invalid_key_request"
    assert "may not outlive the admin key that issues it" in body["error"]["message"]
    status, made = await issue(gw, {"name": "default"})  # a day by default: its issuer's end instead
    assert status == 201 and made["expires_at"] == end.strftime("%Y-%m-%dT%H:%M:%SZ")
    _, child = await issue(gw, {"name": "child", "ttl_s": 1800})
    run = {"Authorization": f"Bearer {child['key']}"}
    # A reload that ends the admin key sooner ends what it issued as soon.
    path = tmp_path / "gateway.yaml"
    path.write_text(f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\nloop_breaker: {{enabled: false}}\n"
                    + FILE_KEYS.replace("admin: true}", "admin: true, expires_at: '2026-01-01T00:00:00Z'}"))
    assert await Reloader(str(path), gw.app[LIVE], log=logging.getLogger("tests.issued_keys"), env={}).reload(
        "SIGHUP", quiet_if_same=True)
    status, _, body = await gw.chat(headers=run)
    assert status == 401 and json.loads(body)["error"]["code"] == "expired_client_key"


async def test_an_issued_key_of_a_team_a_reload_removed_is_turned_off(
    make_gateway: MakeGateway, tmp_path: Path,
) -> None:
    """A file's key of a team the file no longer names is refused at load; an issued key of it
    went on, with no team budget at all: a $1 team budget spent, the team removed, and its key
    answered 200 (review). It is turned off, and on again when the team is back."""
    gw = await make_gateway(FILE_KEYS)
    _, made = await issue(gw, {"name": "teamed", "team": "web"})
    run = {"Authorization": f"Bearer {made['key']}"}
    assert (await gw.chat(headers=run))[0] == 200
    path = tmp_path / "gateway.yaml"
    head = f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\nloop_breaker: {{enabled: false}}\n"
    reloader = Reloader(str(path), gw.app[LIVE], log=logging.getLogger("tests.issued_keys"), env={})
    path.write_text(head + "keys:\n  - {name: alice, key: gk-alice}\n  - {name: root, key: gk-root, admin: true}\n")
    assert await reloader.reload("SIGHUP", quiet_if_same=True)
    status, _, body = await gw.chat(headers=run)
    error = json.loads(body)["error"]
    assert status == 401 and error["code"] == "disabled_client_key", body
    assert error["message"] == ("the gateway key 'teamed' is turned off (its team 'web' is no longer in the "
                                "gateway's config); ask the gateway's operator to turn it back on")
    assert (await listed(gw))["teamed"]["disabled"] == "team_removed"
    path.write_text(head + FILE_KEYS)
    assert await reloader.reload("SIGHUP", quiet_if_same=True)
    assert (await gw.chat(headers=run))[0] == 200
