"""Keys issued at run time (gateway/keys/issued.py): what a request may ask for, what is kept of
a key (its digest, never the key), the store's rules (one name, a cap, a pace, a grace), and
the ring a replica serves from."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest

from gateway.auth import ClientAuth
from gateway.config import parse_config
from gateway.keys.issued import (
    GRACE_S,
    SECRET_PREFIX,
    IssuedKey,
    IssuedKeys,
    IssuedStoreDown,
    KeyRefused,
    MemoryIssuedStore,
    may_be_issued,
    new_secret,
    requested,
)

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
CFG = parse_config("upstreams: [{name: u, base_url: 'http://127.0.0.1:9/v1'}]\n"
                   "keys: [{name: root, key: gk-root, admin: true}, {name: alice, key: gk-alice}]\n"
                   "teams: [{name: web, budget: {usd: 100}}]\n"
                   "keys_api: {default_ttl_s: 600}\n", env={})  # fmt: skip


def made(doc: dict[str, Any], secret: str = "llmgw_test-secret") -> IssuedKey:
    got = requested(doc, secret, CFG, "root", NOW)
    assert isinstance(got, IssuedKey), got
    return got


def refused(doc: dict[str, Any]) -> KeyRefused:
    got = requested(doc, "llmgw_x", CFG, "root", NOW)
    assert isinstance(got, KeyRefused)
    return got


def test_a_key_ends_by_default_and_ttl_s_says_when_otherwise() -> None:
    assert made({"name": "a"}).expires_at == NOW + 600
    assert made({"name": "a", "ttl_s": 30}).expires_at == NOW + 30
    assert made({"name": "a", "expires_at": "2027-01-15T10:00:00+01:00"}).expires_at == NOW + 3600
    key = made({"name": "a", "expires_at": "2027-01-16T08:00:00Z"})
    assert key.expires_at == NOW + 86400


def test_the_rules_are_the_file_keys_rules() -> None:
    key = made({"name": "run-1", "team": "web", "models": "claude-*", "budget": {"usd": 3, "period": "week"},
                "requests_per_minute": 10, "tokens_per_minute": 5000, "parallel": 2})  # fmt: skip
    c = key.config
    assert (c.team, c.models, c.budget and c.budget.usd, c.requests_per_minute, c.parallel) == \
        ("web", ("claude-*",), 3, 10, 2)  # fmt: skip
    assert key.digest == hashlib.sha256(b"llmgw_test-secret").digest() and c.key is None


@pytest.mark.parametrize(("doc", "status", "code"), [
    ({"name": "a", "admin": True}, 400, "invalid_key_request"),
    ({"name": "a", "key_sha256": "00" * 32}, 400, "invalid_key_request"),
    ({"name": "a", "ttl_s": True}, 400, "invalid_key_request"),
    ({"name": "a", "ttl_s": float("inf")}, 400, "invalid_key_request"),
    ({"name": "a", "ttl_s": 1e30}, 400, "invalid_key_request"),
    ({"name": "a", "expires_at": "2027-01-15"}, 400, "invalid_key_request"),
    ({"name": "a", "expires_at": "2027-01-15T07:59:59Z"}, 400, "invalid_key_request"),
    ({"name": "a", "requests_per_minute": 0}, 400, "invalid_key_request"),
    ({"name": "a", "models": ["*", "gpt-["]}, 400, "invalid_key_request"),
    ({}, 400, "invalid_key_request"),
    ({"name": "root"}, 409, "key_name_taken"),
    ({"name": "client_keys"}, 409, "key_name_taken"),
])
def test_a_request_is_refused_with_its_reason(doc: dict[str, Any], status: int, code: str) -> None:
    r = refused(doc)
    assert (r.status, r.code) == (status, code) and r.message


def test_a_refusal_quotes_where_and_why_never_what_was_sent() -> None:
    r = refused({"name": "a", "budget": {"usd": "sk-live-secret-looking"}})
    assert r.message.startswith("budget.usd: ") and "sk-live" not in r.message


def test_a_record_keeps_the_digest_and_rules_and_reads_back_whole() -> None:
    secret = new_secret()
    assert secret.startswith(SECRET_PREFIX) and len(secret) == len(SECRET_PREFIX) + 43
    key = made({"name": "r", "team": "web", "budget": {"usd": 2}}, secret)
    record = key.record()
    assert record.startswith(f"{int((NOW + 600) * 1000)} ".encode())
    assert secret.encode() not in record and secret[len(SECRET_PREFIX):].encode() not in record
    assert IssuedKey.of_record(record) == key
    assert IssuedKey.of_record(b"1 {not json") is None
    assert IssuedKey.of_record(b'1 {"config": {"name": "x"}, "issued_by": "a", "issued_at": 1}') is None


async def test_the_memory_store_holds_one_key_a_name_a_cap_and_a_pace() -> None:
    store = MemoryIssuedStore()
    ms = int(NOW * 1000)

    async def put(name: str, expires_s: float, now_ms: int = ms, cap: int = 2, pace: int = 3) -> str:
        return await store.put(name, name.encode(), int(expires_s * 1000), now_ms, cap, pace)

    assert await put("a", NOW + 60) == "ok"
    assert await put("a", NOW + 60) == "taken"
    assert await put("b", NOW + 1) == "ok"
    assert await put("c", NOW + 60) == "full"
    later = ms + 2000  # b has ended: no longer counted, its name free
    assert await put("c", NOW + 60, later) == "ok"
    assert await put("b", NOW + 60, later) == "full"
    assert sorted(await store.records()) == [b"a", b"b", b"c"]  # b kept through its grace
    assert await store.drop("a") and not await store.drop("a")
    assert await put("d", NOW + 60, later, cap=10) == "rate"  # the fourth issued this minute
    assert await put("d", NOW + 60, later + 60_000, cap=10) == "ok"  # a new minute
    assert await put("e", NOW + 60, ms + int(GRACE_S * 1000) + 2000, cap=10) == "ok"
    assert b"b" not in await store.records()  # forgotten once its grace is over


async def test_a_replica_puts_a_change_in_force_once() -> None:
    store = MemoryIssuedStore()
    keys = IssuedKeys(store, lambda: NOW, shared=False)
    changes: list[int] = []
    keys.on_change = lambda: changes.append(len(keys.keys))
    await keys.start()
    key = made({"name": "a"})
    assert await keys.issue(key, CFG.keys_api) == "ok"
    assert keys.keys == {"a": key} and changes == [1]
    assert await keys.issue(key, CFG.keys_api) == "taken" and changes == [1]
    assert await keys.revoke("a", "root") and keys.keys == {} and changes == [1, 0]
    await keys.close()


def test_an_issued_key_joins_the_ring_and_a_key_of_the_file_keeps_its_name() -> None:
    run = made({"name": "run", "team": "web"}, "llmgw_run")
    shadowed = made({"name": "shadow"}, "llmgw_shadow")
    cfg = parse_config("upstreams: [{name: u, base_url: 'http://127.0.0.1:9/v1'}]\n"
                       "keys: [{name: shadow, key: gk-shadow}, {name: root, key: gk-root, admin: true}]\n"
                       "teams: [{name: web, budget: {usd: 100}}]\n",
                       env={})  # fmt: skip
    auth = ClientAuth.from_config(cfg, [run, shadowed])
    found = auth.check({"Authorization": "Bearer llmgw_run"}, now=NOW)
    assert found.ok and found.key is not None and found.key.name == "run"
    assert found.key.team_budget is not None and found.key.team_budget.usd == 100  # its team's, from the file
    assert found.key.expires_at == NOW + 600 and not found.key.admin
    assert auth.check({"Authorization": "Bearer llmgw_shadow"}, now=NOW).outcome == "invalid"
    assert auth.check({"Authorization": "Bearer llmgw_run"}, now=NOW + 600).outcome == "expired"


class SlowReads(MemoryIssuedStore):
    """A store whose next read of the records answers what it held when asked, only once let."""

    def __init__(self) -> None:
        super().__init__()
        self.hold: asyncio.Event | None = None
        self.down = False

    async def version(self) -> bytes | None:
        if self.down:
            raise IssuedStoreDown("ConnectionError")
        return await super().version()

    async def records(self) -> list[bytes]:
        held, hold = await super().records(), self.hold
        if hold is not None:
            self.hold = None
            await hold.wait()
        return held


async def test_a_poll_answered_after_an_issue_does_not_undo_it() -> None:
    store = SlowReads()
    keys = IssuedKeys(store, lambda: NOW, shared=False)
    await keys.start()
    other = made({"name": "b"})  # another replica's issue, which the poll below reads
    assert await store.put("b", other.record(), int(other.expires_at * 1000), int(NOW * 1000), 10, 10) == "ok"
    store.hold = let = asyncio.Event()
    poll = asyncio.create_task(keys._refresh())  # reads the set before the issue, answered after
    await asyncio.sleep(0.01)
    issuing = asyncio.create_task(keys.issue(made({"name": "a"}), CFG.keys_api))
    await asyncio.sleep(0.01)
    let.set()
    await asyncio.wait_for(asyncio.gather(poll, issuing), 5)
    assert sorted(keys.keys) == ["a", "b"]


async def test_a_key_issued_as_the_store_stopped_answering_is_in_force_where_it_was_asked_for() -> None:
    store = SlowReads()
    keys = IssuedKeys(store, lambda: NOW, shared=False)
    await keys.start()
    put = store.put

    async def then_down(*args: Any) -> Any:
        got = await put(*args)
        store.down = True
        return got

    store.put = then_down  # type: ignore[method-assign]
    assert await keys.issue(made({"name": "a"}), CFG.keys_api) == "ok"
    assert list(keys.keys) == ["a"]


def test_a_gateway_without_named_keys_takes_no_issued_key() -> None:
    """Issued keys in the ring of a replica whose config names no keys were served with no
    accounts behind them, past their budget and minute, and made a keyless gateway refuse
    keyless clients (review). A gateway without `keys:` takes none of them."""
    key = made({"name": "run", "budget": {"usd": 1}}, secret="llmgw_s")
    keyless = parse_config("upstreams: [{name: u, base_url: 'http://127.0.0.1:9/v1'}]\n", env={})
    assert not ClientAuth.from_config(keyless, [key]).required
    assert ClientAuth.from_config(CFG, [key]).check({"Authorization": "Bearer llmgw_s"}).key is not None


def test_an_issued_key_ends_within_max_ttl_s_and_is_not_named_by_dots() -> None:
    """A key asked to end in 9999 held its Redis records for millennia (review); "." and ".."
    are a URL's dot segments, which DELETE could not name."""
    assert "max_ttl_s" in refused({"name": "a", "expires_at": "9999-12-31T00:00:00Z"}).message
    assert "max_ttl_s" in refused({"name": "a", "ttl_s": 31 * 86400}).message
    assert made({"name": "a", "ttl_s": 29 * 86400}).expires_at == NOW + 29 * 86400
    for name in (".", ".."):
        assert refused({"name": name}).message == "a key's name may not be dots alone"


class CountedReads(MemoryIssuedStore):
    """A store that counts its reads (``version``, which every read begins with) and answers
    each only once let."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.let = asyncio.Event()

    async def version(self) -> bytes | None:
        self.reads += 1
        await self.let.wait()
        return await super().version()


def test_only_a_key_shaped_as_an_issued_one_may_be_issued() -> None:
    assert may_be_issued([new_secret()]) and may_be_issued(["gk-alice", new_secret()])
    assert not may_be_issued(["gk-alice", "", SECRET_PREFIX, SECRET_PREFIX + "x" * 42, new_secret() + "x"])
    assert not may_be_issued([SECRET_PREFIX + "x" * 42 + "."])


async def test_unknown_keys_share_one_read_a_poll_interval() -> None:
    """A key issued on another replica a moment ago is read from the store before its request
    is refused; a flood of wrong keys costs one read an interval, however many ask at once,
    and one that asks within the interval of the last read waits for the next."""
    store = CountedReads()
    now = [100.0]
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    keys = IssuedKeys(store, lambda: NOW, shared=True, poll_s=0.5, monotonic=lambda: now[0], sleep=sleep)
    other = made({"name": "b"})  # another replica's issue, which the watch has not read yet
    assert await store.put("b", other.record(), int(other.expires_at * 1000), int(NOW * 1000), 10, 10) == "ok"
    waiting = [asyncio.create_task(keys.look_again()) for _ in range(50)]
    await asyncio.sleep(0.01)
    assert store.reads == 1 and not any(w.done() for w in waiting)  # all wait on the one read, begun at once
    store.let.set()
    await asyncio.wait_for(asyncio.gather(*waiting), 5)
    assert list(keys.keys) == ["b"] and slept == []
    now[0] += 0.4
    await asyncio.wait_for(asyncio.gather(*(keys.look_again() for _ in range(50))), 5)
    assert store.reads == 2 and slept == [pytest.approx(0.1)]  # the next read, when the interval is over
    now[0] += 0.5
    await keys.look_again()
    assert store.reads == 3 and len(slept) == 1


async def test_a_request_waits_for_a_store_that_does_not_answer_one_interval_at_most() -> None:
    store = CountedReads()  # never let
    keys = IssuedKeys(store, lambda: NOW, shared=True, poll_s=0.05)
    await asyncio.wait_for(keys.look_again(), 1)  # refused as before, after 0.05 s
    assert store.reads == 1
    store.let.set()
    await asyncio.sleep(0.01)  # the read, answered now, ends


async def test_a_store_of_this_process_alone_is_never_read_again_for_a_key() -> None:
    store = CountedReads()
    keys = IssuedKeys(store, lambda: NOW, shared=False)
    await keys.look_again()
    assert store.reads == 0
