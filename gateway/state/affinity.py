"""Each conversation's home: the deployment of a pool that holds its prompt cache.

A conversation's home is decided once, at its first turn: the first of its key's rendezvous
order among the deployments the pool's strategy finds good then (routing/pools.py's
``first_home``), so replicas and workers seeing about the same state agree,
and then held here: a reload that changes a weight or adds a deployment leaves it where its
cache is, on every replica. Only a removed home is replaced (``claim``, which says so).

With a shared store the homes are the store's: a replica that meets a conversation for the
first time past its first turn (one another replica served, one this table forgot, or one
whose first turn this table only ``hold``s) claims it in one round trip
(``PoolState.claim_home``), which answers the home another replica claimed first, whatever
this replica's strategy and weights would pick now. A conversation this table knows costs no
round trip: a home changes only when its deployment is removed, which every replica sees in
its own config, or when a turn that decided it was answered elsewhere (``move``, below). Its
TTL in the store is extended with the pool's next read of its records
(``PoolState.keep_home``), at most every ``_KEEP_EVERY_S``, and the home read back in the same
round trip: one that another replica claimed or moved while the store had lost this one (Redis
restarted empty or flushed, or down for that replica) is this table's from the next turn. Left
to this copy, the two replicas sent the conversation's alternate turns to two keys for as long
as it lasted (every turn a cache miss, measured with two replicas after a ``FLUSHALL``). A home
this process saw sitting out since it last read it is read back at the conversation's next turn
here, before it is used (``current``): another replica may have moved it.
With the memory store this table is the only copy.

A conversation's first turn (no earlier answer in it) claims nothing in the store: it takes its
first home (``first_home``) and this table only ``hold``s it, unshared. Claimed at every first
turn, each one-turn request (batch, evaluation traffic: a conversation of its own each) cost a round trip
and left a key in Redis for ``idle_s`` (600 one-turn requests: 610 keys; at 1,000 a second
about 430 MB, which an eviction policy would make room for by evicting ledger keys). Its second
turn claims, proposing the held home here, elsewhere its ``first_home``: under ``weighted``
the same rendezvous pick while the weights are unchanged (a first turn that took another, its
first sitting out, claims at once: pipeline/pool.py's ``_unclaimed``); under the per-replica
strategies (``least_busy``, ``latency``, ``headroom``) a second turn on another replica whose
view finds other deployments good may be homed away from the first turn's cache, once.

A home is the deployment that answered: a turn that held or claimed the strategy's pick and was
answered by a sibling (the pick failed) ``move``s the home to that sibling, in the store too
(one round trip, for such a turn only; a first turn's pick is what every replica would propose
at the second turn), unless another replica set another home since. So does a later turn
answered by a sibling because its home failed or sat out, when it is a turn of the
conversation's main model (``follows``): the model of the largest request its home answered
here. A prompt cache is a model's own: a side call of another model (Claude Code's Haiku title
or a Bash command's prefix) moved the main model's home away from its cache.

Bounded by entries (least recently used go first) and by idleness (``idle_s``, longer than
the providers' longest prompt-cache lifetime, after which the cache is cold anyway). Each
entry is a conversation key (at most ~40 characters, hashed from what the client sent) and a
deployment name: about 200 bytes, so the default 10,000 entries hold about 2 MB.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

# The longest a conversation in use here goes without its TTL extended and its home read back
# from the store: how long a copy another replica's move made stale may last. The keep rides on
# the round trip that reads the pool's records, which a pool in use makes anyway.
_KEEP_EVERY_S = 10.0
_Entry = tuple[str, float, float | None, tuple[str, int] | None]


class Homes(Protocol):
    """Where the homes are shared (gateway/state/pools.py's PoolState)."""

    async def claim_home(self, pool: str, conversation: str, proposed: str, members: Sequence[str],
                         ttl_s: float) -> tuple[str, bool, str | None]: ...  # fmt: skip

    async def move_home(self, pool: str, conversation: str, frm: str, to: str, members: Sequence[str],
                        ttl_s: float) -> tuple[str, bool]: ...  # fmt: skip

    def keep_home(self, pool: str, conversation: str, home: str, ttl_s: float) -> None: ...

    def moved_home(self, pool: str, conversation: str) -> str | None: ...


class AffinityTable:
    def __init__(self, max_entries: int, idle_s: float, clock: Callable[[], float],
                 pool: str = "", shared: Homes | None = None) -> None:  # fmt: skip
        self._max = max_entries
        self._idle_s = idle_s
        self._clock = clock
        self._pool = pool
        self._shared = shared
        self._keep_every_s = min(_KEEP_EVERY_S, idle_s / 10)
        # conversation -> (home, last turn, when the store's TTL was last extended (None: held
        # only, not claimed in the shared store), the model and size in bytes of the largest
        # request its home answered here (None: none yet))
        self._items: OrderedDict[str, _Entry] = OrderedDict()
        # deployment -> when this process last saw it sitting out (``saw_out``): a home read from
        # the store before that may have been moved since by a replica its turn failed on.
        self._outs: dict[str, float] = {}

    def _found(self, conversation: str) -> _Entry | None:
        found = self._items.get(conversation)
        if found is not None and self._clock() - found[1] > self._idle_s:
            del self._items[conversation]
            return None
        return found

    def get(self, conversation: str, members: Collection[str] | None = None) -> str | None:
        """The conversation's home as this process knows it (no I/O), None when unknown here
        or only held (``hold``): then its turn claims it. ``members``: the pool's deployments
        in this process's config; a home read back from the store outside them is not taken."""
        found = self._found(conversation)
        if found is None:
            return None
        home, _, kept, main = found
        if kept is None:
            return None
        now = self._clock()
        if self._shared is not None:
            # The store's home, read back by the last keep, when another replica moved it since
            # this copy was made (its claim found nothing: Redis had lost the home).
            moved = self._shared.moved_home(self._pool, conversation)
            # A home outside this config is a newer (or older) config's, another replica's in a
            # rolling reload: taken, this replica claimed its own removed-elsewhere home back in
            # the store, and the two moved the conversation to and fro at each keep, each move a
            # break and a cache miss (10 breaks for 8 conversations, measured). This replica
            # follows it once its own reload has it.
            if moved is not None and (members is None or moved in members):
                home = moved
            if now - kept >= self._keep_every_s:
                self._shared.keep_home(self._pool, conversation, home, self._idle_s)
                kept = now
        self._items[conversation] = (home, now, kept, main)
        self._items.move_to_end(conversation)
        return home

    async def current(self, conversation: str, members: Collection[str]) -> str | None:
        """``get``, but a home this process saw sitting out (``saw_out``) since it last read it
        from the shared store is read back first, in one round trip (a ``claim`` proposing it),
        only then: a replica whose turn the home failed has moved the conversation to the
        sibling that answered (``move``), and the copy here would send the next turn back to the
        old key once it serves again. Left to the keep, read back every ``_KEEP_EVERY_S``, the
        other workers of 4 sent a conversation moved off a key limited for 3 s back there for
        up to 10 s, alternating two keys (``bbbb!ccbbbccbcbc``, each change a cache write;
        audit)."""
        found = self._found(conversation)
        if found is not None and found[2] is not None and self._outs.get(found[0], -1.0) > found[2]:
            await self.read_back(conversation, members)
        return self.get(conversation, members)

    async def read_back(self, conversation: str, members: Collection[str]) -> str | None:
        """The conversation's home as the shared store holds it now (one round trip: a ``claim``
        proposing this table's), kept here; None when unshared or not known here."""
        found = self._found(conversation)
        if self._shared is None or found is None or found[2] is None:
            return None
        home, _, _ = await self._shared.claim_home(self._pool, conversation, found[0], tuple(members),
                                                   self._idle_s)  # fmt: skip
        # The conversation's main model is what it was, whichever key holds it now.
        self.bind(conversation, home, main=found[3])
        return home

    def saw_out(self, deployments: Collection[str]) -> None:
        """``deployments`` sit out now, as this process reads the pool's records (no I/O): a
        conversation homed on one reads its home back at its next turn here (``current``)."""
        if deployments and self._shared is not None:
            now = self._clock()
            for name in deployments:
                self._outs[name] = now

    async def claim(self, conversation: str, proposed: str,
                    members: Collection[str]) -> tuple[str, bool, str | None]:  # fmt: skip
        """The conversation's home among ``members``: the one already held (by this table, or,
        when shared, by any replica), else ``proposed`` from now on; whether it is ``proposed``,
        claimed now; and the home it replaced (a deployment removed from the pool), else None."""
        known = self._items.get(conversation)
        before = known[0] if known is not None else None
        if self._shared is None:
            if before is not None and before in members:
                home, new, replaced = before, False, None
            else:
                home, new, replaced = proposed, True, before
        else:
            home, new, replaced = await self._shared.claim_home(self._pool, conversation, proposed,
                                                                tuple(members), self._idle_s)  # fmt: skip
            if new and replaced is None and before is not None and before not in members:
                # The store had forgotten it (idle there, a restarted Redis) and this table
                # knew it on a removed deployment: it moves. (Found on another replica's new
                # home instead, the move was that replica's to count.)
                replaced = before
        self.bind(conversation, home)
        return home, new, replaced

    async def move(self, conversation: str, frm: str, to: str, members: Sequence[str],
                   main: tuple[str, int] | None = None) -> tuple[str, bool]:  # fmt: skip
        """The home ``frm`` failed or sat out a turn, and ``to`` answered it: ``to`` holds the
        conversation's cache and is its home from now on, for every replica (claimed in the
        shared store: one round trip, only for such a turn), unless another replica set another
        home since. ``main``: the model and size of the turn (``answered``). Returns the home,
        and whether this call moved it: False when another replica's move had (to ``to``
        itself, as each replica whose turn met the same sit-out does), so that the move is
        counted once, by the replica that made it."""
        if self._shared is not None:
            home, moved = await self._shared.move_home(self._pool, conversation, frm, to, tuple(members),
                                                       self._idle_s)  # fmt: skip
        else:
            known = self._items.get(conversation)
            home, moved = to, known is None or known[0] != to
        self.bind(conversation, home, main=main if home == to else None)
        return home, moved

    def answered(self, conversation: str, home: str, model: str, size: int) -> None:
        """Its home ``home`` answered a request for ``model`` of ``size`` bytes: the largest so
        far names the conversation's main model (no I/O)."""
        found = self._items.get(conversation)
        if found is not None and found[0] == home and (found[3] is None or size >= found[3][1]):
            self._items[conversation] = (found[0], found[1], found[2], (model, size))

    def follows(self, conversation: str, model: str) -> bool | None:
        """Whether a turn for ``model`` is one of the conversation's main model (its home's
        cache is that model's): None when its home answered nothing here yet."""
        found = self._items.get(conversation)
        main = found[3] if found is not None else None
        return None if main is None else main[0] == model

    def held(self, conversation: str) -> str | None:
        """The home a first turn of the conversation took here, not claimed (``hold``), else None."""
        found = self._found(conversation)
        return found[0] if found is not None and found[2] is None else None

    def hold(self, conversation: str, deployment: str) -> None:
        """A first turn's home, kept here without a claim in the shared store (no I/O): the
        conversation's next turn here proposes it (``claim``). Unshared, it is simply its home."""
        self.bind(conversation, deployment, claimed=self._shared is None)

    def bind(self, conversation: str, deployment: str, claimed: bool = True,
             main: tuple[str, int] | None = None) -> None:  # fmt: skip
        now = self._clock()
        known = self._items.get(conversation)
        if main is None and known is not None and known[0] == deployment:
            main = known[3]  # the same home: what it answered still stands
        self._items[conversation] = (deployment, now, now if claimed else None, main)
        self._items.move_to_end(conversation)
        while len(self._items) > self._max:
            self._items.popitem(last=False)

    @property
    def shared(self) -> bool:
        """Whether the homes are the store's (other replicas read what this table claims)."""
        return self._shared is not None

    def __len__(self) -> int:
        return len(self._items)

    def renamed(self, names: Mapping[str, str]) -> None:
        """A reload renamed deployments (old name -> new, the same key): each conversation homed
        on one stays there, under its new name. With a shared store, which holds the old name,
        it is claimed again at its next turn here, proposing the new one (``removed``)."""
        if not names:
            return
        for conversation, (home, last, kept, main) in list(self._items.items()):
            if home in names:
                reclaim = self._shared is not None and kept is not None
                self._items[conversation] = (names[home], last, None if reclaim else kept, main)

    def removed(self, deployments: Collection[str]) -> None:
        """A reload took ``deployments`` out of the pool: with a shared store, each conversation
        homed on one is claimed again at its next turn here (held, proposing that home), as
        though unknown. Another replica may have moved it meanwhile, and ``get`` trusts this
        table: kept, it served a home re-added by a later reload while the store (and every
        replica that had met a turn in between) held the new one, for good (measured: G1 → b,
        G2 → a, every turn). Unshared, this table is the only copy: a turn while the home was
        out moved it here (``claim``), and none left it where its cache is."""
        if self._shared is None or not deployments:
            return
        for conversation, (home, last, kept, main) in list(self._items.items()):
            if kept is not None and home in deployments:
                self._items[conversation] = (home, last, None, main)

    def resized(self, max_entries: int, idle_s: float) -> AffinityTable:
        """The same conversations under new bounds (a reload that changed them): the most
        recent ``max_entries`` are kept, and each still ages from its last turn."""
        table = AffinityTable(max_entries, idle_s, self._clock, self._pool, self._shared)
        for conversation, entry in list(self._items.items())[-max_entries:]:
            table._items[conversation] = entry
        table._outs = self._outs
        return table
