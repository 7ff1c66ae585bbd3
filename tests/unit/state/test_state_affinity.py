"""Conversations' homes (gateway/state/affinity.py): each pool's table, this process's copy of
the homes the store holds. Two tables, each with its own PoolState, on one store play two
replicas (a store that says it is shared, as Redis does); the clock is a list the test moves."""

from __future__ import annotations

from typing import Any

from gateway.state.affinity import AffinityTable
from gateway.state.memory import MemoryStore
from gateway.state.pools import PoolState

T0 = 1_800_000_000.0
IDLE_S = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Shared(MemoryStore):
    """One store every replica reads (as Redis is), counting its round trips."""

    backend = "redis"

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.claims = 0
        self.kept: list[tuple[str, str, float]] = []

    async def home_claim(self, *a: Any, **kw: Any) -> Any:
        self.claims += 1
        return await super().home_claim(*a, **kw)

    async def records_sync(self, *a: Any, **kw: Any) -> Any:
        self.kept += kw.get("homes") or (a[4] if len(a) > 4 else [])
        return await super().records_sync(*a, **kw)


def replica(store: MemoryStore, clock: Clock) -> tuple[AffinityTable, PoolState]:
    ps = PoolState(store, clock, clock)
    return AffinityTable(10_000, IDLE_S, clock, "p", ps if ps.shared else None), ps


async def test_a_replica_new_to_a_conversation_gets_the_home_another_claimed_whatever_it_would_pick() -> None:
    """After a reload that changed a weight, a replica meeting a conversation for the first
    time picked by the new weights: the conversation moved off its cache, uncounted."""
    clock = Clock()
    store = Shared(clock)
    (a, _), (b, _) = replica(store, clock), replica(store, clock)
    assert await a.claim("id:1", "key-c", ("key-a", "key-b", "key-c")) == ("key-c", True, None)
    # B's weights (reloaded: key-b raised) or a deployment added would pick key-b now.
    assert await b.claim("id:1", "key-b", ("key-a", "key-b", "key-c", "key-d")) == ("key-c", False, None)
    assert b.get("id:1") == "key-c"
    claims = store.claims
    for _ in range(5):  # known here: no round trip
        assert b.get("id:1") == a.get("id:1") == "key-c"
    assert store.claims == claims


async def test_a_removed_home_is_replaced_once_for_every_replica_and_the_move_reported_once() -> None:
    clock = Clock()
    store = Shared(clock)
    (a, _), (b, _) = replica(store, clock), replica(store, clock)
    await a.claim("id:1", "key-c", ("key-a", "key-b", "key-c"))
    await b.claim("id:1", "key-a", ("key-a", "key-b", "key-c"))
    after = ("key-a", "key-b")  # key-c removed by a reload on both
    assert a.get("id:1") == "key-c" not in after  # the pipeline then claims again
    assert await a.claim("id:1", "key-b", after) == ("key-b", True, "key-c")  # A moved it: A counts
    # B knew it on key-c too; A's new home is the conversation's, and the move is not B's to count.
    assert await b.claim("id:1", "key-a", after) == ("key-b", False, None)


async def test_a_home_removed_then_re_added_is_the_stores_on_a_replica_that_met_no_turn_in_between() -> None:
    """G1 and G2 knew a conversation on key-b; a reload took key-b out and G2 moved it to
    key-a; a reload put key-b back. G1 still knew key-b and trusted it: G1 → key-b, G2 → key-a
    on every turn after, for good (a prompt-cache miss each alternation)."""
    clock = Clock()
    store = Shared(clock)
    (g1, _), (g2, _) = replica(store, clock), replica(store, clock)
    pool, without = ("key-a", "key-b", "key-c"), ("key-a", "key-c")
    await g1.claim("id:1", "key-b", pool)
    assert await g2.claim("id:1", "key-a", pool) == ("key-b", False, None)
    for table in (g1, g2):  # the reload without key-b, on both
        table.removed({"key-b"})
    assert await g2.claim("id:1", "key-a", without) == ("key-a", True, "key-b")  # G2 moves it
    # key-b is back: G1 met no turn while it was out, and claims again instead of serving it.
    assert g1.get("id:1") is None and g1.held("id:1") == "key-b"
    assert await g1.claim("id:1", "key-b", pool) == ("key-a", False, None)
    for _ in range(4):
        assert g1.get("id:1") == g2.get("id:1") == "key-a"
    # Unshared, the table is the only copy: nothing to re-read.
    alone, _ = replica(MemoryStore(clock), clock)
    await alone.claim("id:1", "b", ("a", "b"))
    alone.removed({"b"})
    assert alone.get("id:1") == "b"


async def test_a_removed_home_the_store_forgot_is_still_reported_as_a_move() -> None:
    clock = Clock()
    store = Shared(clock)
    a, _ = replica(store, clock)
    await a.claim("id:1", "key-c", ("key-a", "key-b", "key-c"))
    store._homes.pop("p:id:1")  # a restarted Redis
    assert await a.claim("id:1", "key-a", ("key-a", "key-b")) == ("key-a", True, "key-c")


async def test_in_one_process_the_table_alone_holds_the_homes() -> None:
    clock = Clock()
    table, ps = replica(MemoryStore(clock), clock)
    assert not ps.shared
    assert await table.claim("id:1", "b", ("a", "b", "c")) == ("b", True, None)
    assert await table.claim("id:1", "a", ("a", "b", "c", "d")) == ("b", False, None)  # a weight or a member changed
    assert await table.claim("id:1", "a", ("a", "c")) == ("a", True, "b")  # b removed


async def test_a_conversation_in_use_keeps_its_home_in_the_store_with_the_pools_next_read() -> None:
    """Kept at most every 10 s each, in the round trip that reads the pool's records: no
    round trip of its own while the pool serves."""
    clock = Clock()
    store = Shared(clock)
    a, ps = replica(store, clock)
    await a.claim("id:1", "key-a", ("key-a", "key-b"))
    clock.now += 5
    a.get("id:1")
    await ps._sync([], 0)
    assert store.kept == []  # claimed 5 s ago: nothing to keep yet
    clock.now += 6
    a.get("id:1")
    a.get("id:1")
    await ps._sync([], 0)
    assert store.kept == [("p:id:1", "key-a", IDLE_S)]
    # Its TTL runs from the keep: an hour after it, not after the claim.
    clock.now += IDLE_S - 1
    (b, _) = replica(store, clock)
    assert await b.claim("id:1", "key-b", ("key-a", "key-b")) == ("key-a", False, None)


async def test_a_home_another_replica_claimed_after_the_store_lost_it_is_followed_from_the_next_keep() -> None:
    """Audit (pools across replicas, 2026-11-30): A claimed a conversation's home; Redis lost it
    (restarted empty, flushed); B, new to the conversation, claimed another (its pick sat out,
    or failed and B moved it). A kept serving its own copy and B the store's: with two gateway
    processes, every conversation so homed alternated between two keys with its turns, each a
    prompt-cache miss, for as long as it went on."""
    clock = Clock()
    store = Shared(clock)
    (a, pa), (b, _) = replica(store, clock), replica(store, clock)
    members = ("key-a", "key-b")
    await a.claim("id:1", "key-a", members)
    store._homes.pop("p:id:1")  # Redis restarted empty
    assert await b.claim("id:1", "key-b", members) == ("key-b", True, None)
    clock.now += 5
    assert a.get("id:1") == "key-a"  # A's copy, until it is kept
    await pa._sync([], 0)
    assert a.get("id:1") == "key-a"
    clock.now += 6
    assert a.get("id:1") == "key-a"  # this turn's keep reads it back, with the pool's read
    await pa._sync([], 0)
    for _ in range(3):
        assert a.get("id:1") == b.get("id:1") == "key-b"
        clock.now += 11
        await pa._sync([], 0)
    assert store._homes.get("p:id:1") == "key-b"  # A's keeps never wrote its own over it


async def test_a_home_moved_by_another_replica_after_the_store_lost_it_is_followed_too() -> None:
    clock = Clock()
    store = Shared(clock)
    (a, pa), (b, _) = replica(store, clock), replica(store, clock)
    members = ("key-a", "key-b")
    await a.claim("id:1", "key-a", members)
    store._homes.pop("p:id:1")
    assert await b.claim("id:1", "key-a", members) == ("key-a", True, None)
    assert await b.move("id:1", "key-a", "key-b", members) == ("key-b", True)  # its 429: key-b answered
    clock.now += 11
    a.get("id:1")
    await pa._sync([], 0)
    assert a.get("id:1") == "key-b"


async def test_a_keep_that_finds_its_own_home_changes_nothing_and_costs_no_digest_after() -> None:
    clock = Clock()
    store = Shared(clock)
    a, pa = replica(store, clock)
    await a.claim("id:1", "key-a", ("key-a", "key-b"))
    clock.now += 11
    a.get("id:1")
    await pa._sync([], 0)
    assert pa._moved == {} and a.get("id:1") == "key-a"


async def test_a_conversation_idle_past_idle_s_is_new_again() -> None:
    clock = Clock()
    store = Shared(clock)
    a, _ = replica(store, clock)
    await a.claim("id:1", "key-a", ("key-a", "key-b"))
    clock.now += IDLE_S + 1
    assert a.get("id:1") is None
    assert await a.claim("id:1", "key-b", ("key-a", "key-b")) == ("key-b", True, None)


async def test_resized_tables_keep_the_homes_and_share_them_as_before() -> None:
    clock = Clock()
    store = Shared(clock)
    a, _ = replica(store, clock)
    await a.claim("id:1", "key-a", ("key-a", "key-b"))
    smaller = a.resized(5, IDLE_S)
    assert smaller.get("id:1") == "key-a"
    store._homes.pop("p:id:1")
    assert await smaller.claim("id:2", "key-b", ("key-a", "key-b")) == ("key-b", True, None)
    assert store.claims == 2  # the resized table claims through the store too


# -- a conversation's first turn claims nothing (pipeline/pool.py's _hold, then _claim) ---------


def _pool(names: tuple[str, ...], strategy: str = "weighted") -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(cfg=SimpleNamespace(name="p", strategy=strategy), names=frozenset(names))


def _svc() -> Any:
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry

    from gateway.telemetry import Telemetry

    one_worker = SimpleNamespace(server=SimpleNamespace(worker_count=1))
    return SimpleNamespace(rand=lambda: 0.5, telemetry=Telemetry(CollectorRegistry(), ()), cfg=one_worker)


def _ready(weights: dict[str, float]) -> list[Any]:
    from gateway.routing.pools import Deployment

    return [Deployment(i, n, w) for i, (n, w) in enumerate(weights.items())]


def _hold(svc: Any, pool: Any, table: AffinityTable, conversation: str, ready: list[Any]) -> tuple[str, bool]:
    """A first turn as send_pool makes it: the home it proposes (held here, else the
    strategy's pick among ``ready``), held."""
    from gateway.pipeline.pool import _held_or_first, _hold

    return _hold(table, conversation, _held_or_first(svc, pool, table, conversation, ready))


async def _claim(svc: Any, pool: Any, table: AffinityTable, conversation: str, ready: list[Any]) -> tuple[str, bool]:
    """A later turn that finds no home here: the one claimed, proposing what a first turn would."""
    from gateway.pipeline.pool import _claim, _held_or_first

    return await _claim(svc, pool, table, conversation, _held_or_first(svc, pool, table, conversation, ready))


async def test_a_first_turn_claims_no_home_and_leaves_no_key_its_second_turn_claims_the_same() -> None:
    """Every one-turn request (batch, evaluation traffic) claimed a home: a round trip and a
    Redis key for an hour each (600 requests: 610 keys)."""
    clock = Clock()
    store = Shared(clock)
    (a, _), (b, _) = replica(store, clock), replica(store, clock)
    pool, svc, weights = _pool(("key-a", "key-b", "key-c")), _svc(), {"key-a": 1.0, "key-b": 1.0, "key-c": 1.0}
    homes = {}
    for i in range(50):
        homes[i], new = _hold(svc, pool, a, f"open:{i}", _ready(weights))
        assert new
    assert store.claims == 0 and len(store._homes) == 0
    assert a.get("open:1") is None and a.held("open:1") == homes[1]  # its next turn claims
    # The second turn, here or on another replica (under weighted the same rendezvous pick):
    for i in range(50):
        table = a if i % 2 else b
        assert await _claim(svc, pool, table, f"open:{i}", _ready(weights)) == (homes[i], True)
        assert table.get(f"open:{i}") == homes[i]
    assert store.claims == 50
    claims = store.claims
    for i in range(50):  # every later turn: from the table, no round trip
        assert (a if i % 2 else b).get(f"open:{i}") == homes[i]
    assert store.claims == claims


async def test_a_reload_between_the_first_and_second_turn_keeps_the_held_home_and_holds_it_after() -> None:
    clock = Clock()
    store = Shared(clock)
    (a, _), (b, _) = replica(store, clock), replica(store, clock)
    pool, svc = _pool(("key-a", "key-b", "key-c")), _svc()
    before = {"key-a": 1.0, "key-b": 1.0, "key-c": 1.0}
    homes = {i: _hold(svc, pool, a, f"open:{i}", _ready(before))[0] for i in range(40)}
    after = {"key-a": 1.0, "key-b": 5.0, "key-c": 1.0}  # key-b raised by a reload
    # Turn 2 where turn 1 was: the held home, whatever the new weights pick.
    for i in range(40):
        assert (await _claim(svc, pool, a, f"open:{i}", _ready(after)))[0] == homes[i]
    # From turn 2 on it is the store's: another replica, even after a second reload, is answered it.
    again = {"key-a": 1.0, "key-b": 1.0, "key-c": 9.0}
    for i in range(40):
        assert (await _claim(svc, pool, b, f"open:{i}", _ready(again)))[0] == homes[i]


def test_a_first_turn_away_from_its_rendezvous_pick_is_claimed_under_weighted_only() -> None:
    """Held only, a first turn that took another deployment than the first of its rendezvous
    order (sitting out) had its second turn on another replica proposing that first, away from
    its cache (6 conversations of 30, measured)."""
    from gateway.pipeline.pool import _held_or_first, _unclaimed

    clock = Clock()
    (a, _) = replica(Shared(clock), clock)
    members = ("key-a", "key-b", "key-c")
    views, svc = _ready(dict.fromkeys(members, 1.0)), _svc()
    for strategy, shared, claimed in (("weighted", a, 1), ("least_busy", a, 0),
                                      ("weighted", AffinityTable(10_000, IDLE_S, clock, "p", None), 0)):  # fmt: skip
        pool = _pool(members, strategy)
        moved = 0
        for i in range(30):
            first = _held_or_first(svc, _pool(members), shared, f"open:{i}", views)
            assert _unclaimed(svc, pool, shared, f"open:{i}", views, first)  # all serve: held
            ready = [v for v in views if v.name != first]  # its first sits out
            proposed = _held_or_first(svc, pool, shared, f"open:{i}", ready)
            moved += not _unclaimed(svc, pool, shared, f"open:{i}", views, proposed)
        assert moved == 30 * claimed, strategy


async def test_a_first_turn_on_a_memory_store_is_simply_its_home() -> None:
    clock = Clock()
    table = AffinityTable(10_000, IDLE_S, clock, "p", None)
    home, _ = _hold(_svc(), _pool(("key-a", "key-b")), table, "open:1", _ready({"key-a": 1.0, "key-b": 1.0}))
    assert table.get("open:1") == home


# -- a home is the deployment that answered (pipeline/pool.py moves one a sibling answered) ------


async def test_a_home_claimed_for_a_turn_a_sibling_answered_moves_to_that_sibling_for_every_replica() -> None:
    """The strategy's pick was claimed before the send; it failed and a sibling answered, so the
    sibling holds the prompt cache. The home stayed on the pick: the next turns went to a key
    that never held the conversation (audit: turns on an-b, an-b, then an-c, an-c)."""
    clock = Clock()
    store = Shared(clock)
    (a, _), (b, _) = replica(store, clock), replica(store, clock)
    members = ("key-a", "key-b", "key-c")
    assert await a.claim("id:1", "key-c", members) == ("key-c", True, None)
    assert await a.move("id:1", "key-c", "key-b", members) == ("key-b", True)
    assert a.get("id:1") == "key-b"
    assert await b.claim("id:1", "key-c", members) == ("key-b", False, None)


async def test_a_first_turn_a_sibling_answered_claims_that_sibling_so_no_replica_proposes_the_pick() -> None:
    """A first turn holds its home here only; under weighted every other replica would propose
    the same rendezvous pick at the second turn, the one that failed: the sibling is claimed."""
    clock = Clock()
    store = Shared(clock)
    (a, _), (b, _) = replica(store, clock), replica(store, clock)
    members = ("key-a", "key-b", "key-c")
    picked, _ = _hold(_svc(), _pool(members), a, "open:1", _ready(dict.fromkeys(members, 1.0)))
    answered = next(m for m in members if m != picked)
    assert await a.move("open:1", picked, answered, members) == (answered, True)
    assert len(store._homes) == 1  # a key in the store: only for a first turn that moved
    assert a.get("open:1") == answered
    assert await b.claim("open:1", picked, members) == (answered, False, None)


async def test_a_move_never_takes_a_home_another_replica_set_since() -> None:
    clock = Clock()
    store = Shared(clock)
    (a, _), (b, _) = replica(store, clock), replica(store, clock)
    members = ("key-a", "key-b", "key-c")
    await a.claim("id:1", "key-c", members)
    await b.claim("id:1", "key-a", members)
    assert await b.move("id:1", "key-c", "key-a", members) == ("key-a", True)  # b's own turn moved it first
    assert await a.move("id:1", "key-c", "key-b", members) == ("key-a", False)
    assert a.get("id:1") == "key-a"


async def test_a_home_seen_sitting_out_is_read_back_once_at_the_next_turn_so_another_replicas_move_is_followed() -> None:
    """Workers of 4 sharing Redis: B's turn met key-b's 429 and moved the conversation to key-c;
    A, which had read key-b sitting out with the pool's records, kept its own copy and sent
    its turns back to key-b once it served again, for up to 10 s (``bbbb!ccbbbccbcbc``, audit).
    Now A reads the home back at the conversation's next turn here, one round trip, only then."""
    clock = Clock()
    store = Shared(clock)
    (a, _), (b, _) = replica(store, clock), replica(store, clock)
    members = ("key-a", "key-b", "key-c")
    for table in (a, b):
        assert await table.claim("id:1", "key-b", members) == ("key-b", table is a, None)
        await table.claim("id:2", "key-a", members)
    clock.now += 1
    assert await b.move("id:1", "key-b", "key-c", members) == ("key-c", True)
    clock.now += 0.5
    a.saw_out(["key-b"])  # A's pool read found key-b sitting out
    clock.now += 3  # its 429's reset is past: key-b serves again, and A's keep is 10 s away
    claims = store.claims
    assert await a.current("id:1", members) == "key-c"
    assert store.claims == claims + 1
    clock.now += 1
    assert await a.current("id:1", members) == "key-c"  # read once: no round trip more
    assert await a.current("id:2", members) == "key-a"  # homed on a key that never sat out
    assert store.claims == claims + 1
    # Unshared, the table is the only copy: nothing to read back, and nothing noted.
    alone, _ = replica(MemoryStore(clock), clock)
    await alone.claim("id:1", "key-b", members)
    alone.saw_out(["key-b"])
    clock.now += 1
    assert await alone.current("id:1", members) == "key-b"


async def test_a_move_another_replica_made_already_is_not_this_replicas_move() -> None:
    """Both replicas' turns met the home's sit-out and were answered by the same sibling (its
    rendezvous order is every replica's): each moved the home, and each counted the break,
    3 moves read as 6 in ``llm_gateway_affinity_breaks_total`` (audit). The second is told the
    store held the new home already, so the pool counts it once."""
    clock = Clock()
    store = Shared(clock)
    (a, _), (b, _) = replica(store, clock), replica(store, clock)
    members = ("key-a", "key-b", "key-c")
    await a.claim("id:1", "key-a", members)
    await b.claim("id:1", "key-a", members)
    assert await a.move("id:1", "key-a", "key-c", members) == ("key-c", True)
    assert await b.move("id:1", "key-a", "key-c", members) == ("key-c", False)
    assert b.get("id:1") == "key-c"


async def test_in_one_process_a_move_is_the_tables_alone() -> None:
    clock = Clock()
    table, _ = replica(MemoryStore(clock), clock)
    await table.claim("id:1", "b", ("a", "b", "c"))
    assert await table.move("id:1", "b", "c", ("a", "b", "c")) == ("c", True)
    assert await table.move("id:1", "b", "c", ("a", "b", "c")) == ("c", False)  # moved already
    assert await table.claim("id:1", "a", ("a", "b", "c")) == ("c", False, None)


async def test_the_store_names_a_conversation_by_a_keyed_mac_that_replicas_sharing_the_secret_agree_on() -> None:
    """A conversation known by its opening was named in Redis by a plain SHA-256 of the system
    prompt and first user message: a reader of the store could confirm a guessed prompt."""
    clock = Clock()
    store = Shared(clock)
    (a, pa), (b, pb) = replica(store, clock), replica(store, clock)
    pa.home_key = pb.home_key = b"k" * 32  # app.py: from loop_breaker.secret
    await a.claim("open:0123456789abcdef01234567", "key-c", ("key-a", "key-c"))
    assert await b.claim("open:0123456789abcdef01234567", "key-a", ("key-a", "key-c")) == ("key-c", False, None)
    [name] = store._homes._items  # what a reader of the store sees
    assert name.startswith("p:open:") and "0123456789abcdef01234567" not in name
    (c, _) = replica(store, clock)  # no secret: the plain digest, as before
    await c.claim("open:0123456789abcdef01234567", "key-a", ("key-a", "key-c"))
    assert "p:open:0123456789abcdef01234567" in store._homes._items
