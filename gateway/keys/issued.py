"""Keys issued at run time: an admin key asks for one (``POST /v1/gateway/keys``), gets its
secret once, and every replica takes it from then on as it takes a key of the file.

Only the secret's SHA-256 digest and the key's rules are kept, in the state store (this
process's memory, or Redis, where every replica reads them): the secret itself is made here,
handed to the caller, and forgotten. Each replica keeps every issued key in its own memory and
reads the store again only when its version marker has changed (one ``GET`` every
``POLL_S``, off the request path), so a request's key is still found by one dict read
(issue #38), and a key revoked on one replica is refused by the others within ``POLL_S`` and a
read. A key issued on one is taken by the others from its first request: one shaped as an
issued key that a replica does not know has the store read again before it is refused
(``look_again``, at most one such read every ``POLL_S``).

A key is issued with the same rules as a key of the file, checked by the same model
(``ClientKeyConfig``), and every issued key ends (``keys_api.default_ttl_s`` when the request
says nothing), so keys an orchestrator forgets to revoke cannot pile up; ``keys_api.max_issued``
caps how many may exist at once and ``keys_api.issued_per_minute`` how fast they are made.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import math
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson
from pydantic import ValidationError

from gateway.config import ClientKeyConfig, GatewayConfig, KeysApiConfig
from gateway.keys.periods import iso
from gateway.keys.registry import digest

log = logging.getLogger("gateway.keys")

# What every issued key starts with: a person or a secret scanner that finds one in a file or a
# log can tell what it is (and whose), as with a provider's ``sk-ant-``.
SECRET_PREFIX = "llmgw_"
# A key as ``new_secret`` makes it: the prefix, then 32 random bytes in base64url (43 characters).
_SECRET_SHAPE = re.compile(SECRET_PREFIX + r"[A-Za-z0-9_-]{43}")
# How often a replica asks the store whether the issued keys changed.
POLL_S = 0.5
# How long an expired key stays known after it ended, refused as ``expired`` (which tells its
# holder why) rather than ``invalid``; it no longer counts toward ``max_issued``.
GRACE_S = 3600.0
_CLOSE_S = 5.0  # the most a shutdown waits for the watch and for the store to close
# What the caller may not choose: the gateway makes the key, and an issued key reads only its
# own state (an admin key that could issue admin keys would outlive its own revocation).
_NOT_CHOSEN = {"key": "the gateway makes the key and answers it once",
               "key_sha256": "the gateway makes the key and answers it once",
               "admin": "an issued key cannot be an admin key",
               # Nothing could turn it on (it has no line in the file to edit): revoke it instead.
               "disabled": "an issued key is revoked (DELETE), not turned off"}  # fmt: skip

PutOutcome = Literal["ok", "taken", "full", "rate"]


class IssuedStoreDown(Exception):
    """The store did not answer: nothing was issued or revoked."""


class IssuedStore(Protocol):
    """Where issued keys are kept. A record is ``"<expires_at ms> <json>"``: the store can drop
    what has ended without reading the key's rules."""

    async def put(self, name: str, record: bytes, expires_ms: int, now_ms: int,
                  max_issued: int, per_minute: int) -> PutOutcome:  # fmt: skip
        """Atomically: forget the keys ended more than ``GRACE_S`` ago; refuse ``name`` while a
        key of that name has not ended (``taken``), more than ``max_issued`` keys not ended
        (``full``), more than ``per_minute`` issued this minute (``rate``); else keep it."""
        ...

    async def drop(self, name: str) -> bool:
        """Forget ``name``'s key; False when there was none."""
        ...

    async def version(self) -> bytes | None:
        """A marker that changes at every put and drop (None: no key was ever kept, or all
        ended long ago)."""
        ...

    async def records(self) -> list[bytes]: ...

    async def restore(self, records: Sequence[tuple[str, bytes, int]]) -> None:
        """Put back what a store that lost its data held (each ``(name, record, expires_ms)``)."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """One issued key: its rules (``config``, whose ``key_sha256`` is the one digest kept of
    it), who issued it and when (epoch seconds)."""

    config: ClientKeyConfig
    issued_by: str
    issued_at: float

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def expires_at(self) -> float:
        assert self.config.expires_at is not None  # every issued key ends
        return self.config.expires_at.timestamp()

    @property
    def digest(self) -> bytes:
        assert self.config.key_sha256 is not None
        return bytes.fromhex(self.config.key_sha256[0])

    def record(self) -> bytes:
        body = orjson.dumps({"config": self.config.model_dump(mode="json", exclude_defaults=True),
                             "issued_by": self.issued_by, "issued_at": self.issued_at})  # fmt: skip
        return f"{_ms(self.expires_at)} ".encode() + body

    @classmethod
    def of_record(cls, raw: bytes) -> IssuedKey | None:
        """None for a record this version cannot read (written by a newer one): skipped, not fatal."""
        _, _, body = raw.partition(b" ")
        try:
            doc = orjson.loads(body)
            config = ClientKeyConfig.model_validate(doc["config"])
            return cls(config, str(doc["issued_by"]), float(doc["issued_at"]))
        except (orjson.JSONDecodeError, ValidationError, KeyError, TypeError, ValueError):
            return None

    def marks(self) -> dict[str, Any]:
        """What a key's view adds for an issued key."""
        return {"issued": True, "issued_by": self.issued_by, "issued_at": iso(self.issued_at)}


@dataclass(frozen=True, slots=True)
class KeyRefused:
    """Why a request to issue a key is refused: ``status`` and ``code`` for its answer."""

    status: int
    code: str
    message: str


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)  # 256 bits


def may_be_issued(presented: Iterable[str]) -> bool:
    """Whether one of the keys a request presents has the shape of an issued key: one this
    replica does not know may have been issued on another since it last read the store."""
    return any(_SECRET_SHAPE.fullmatch(p) for p in presented)


def requested(doc: Mapping[str, Any], secret: str, cfg: GatewayConfig, issued_by: str,
              now: float) -> IssuedKey | KeyRefused:  # fmt: skip
    """The key ``doc`` asks for, judged as the file's keys are (the same model, the same team
    check), with ``ttl_s`` (seconds from now) as another way to say ``expires_at``; the key
    itself is ``secret``, kept only as its digest. Pure: no I/O."""
    for field, why in _NOT_CHOSEN.items():
        if field in doc:
            return KeyRefused(400, "invalid_key_request", f"'{field}' is not accepted: {why}")
    fields = dict(doc)
    ttl = fields.pop("ttl_s", None)
    if ttl is not None:
        if "expires_at" in fields:
            return KeyRefused(400, "invalid_key_request", "give one of 'expires_at' and 'ttl_s', not both")
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl) or ttl <= 0:
            return KeyRefused(400, "invalid_key_request", "'ttl_s' must be a positive number of seconds")
    issuer = next((k for k in cfg.keys if k.name == issued_by), None)
    # A key issued lives no longer than its issuer works (gateway.auth puts that in force): an
    # admin key that ends tonight made keys that worked for max_ttl_s after it (review).
    issuer_end = None if issuer is None or issuer.expires_at is None else issuer.expires_at.timestamp()
    if "expires_at" not in fields:
        ends = now + (ttl if ttl is not None else cfg.keys_api.default_ttl_s)
        if ttl is None and issuer_end is not None:
            ends = min(ends, issuer_end)  # what was not asked for is not refused
        try:
            fields["expires_at"] = _instant(ends)
        except (OverflowError, ValueError, OSError):  # past year 9999
            return KeyRefused(400, "invalid_key_request", "'ttl_s' is too large: give 'expires_at' instead")
    fields["key_sha256"] = digest(secret).hex()
    try:
        config = ClientKeyConfig.model_validate(fields)
    except ValidationError as e:
        return KeyRefused(400, "invalid_key_request", _problems(e))
    assert config.expires_at is not None
    if config.expires_at.timestamp() <= now:
        return KeyRefused(400, "invalid_key_request",
                       f"'expires_at' {config.expires_at.isoformat()} has passed: the key would never work")
    if config.expires_at.timestamp() > now + cfg.keys_api.max_ttl_s:
        # "Every issued key ends" was nominal: a key of 9999-12-31 held its Redis records for
        # millennia (review).
        return KeyRefused(400, "invalid_key_request",
                          f"an issued key may work {cfg.keys_api.max_ttl_s:g} s at most (keys_api.max_ttl_s)")
    if issuer_end is not None and config.expires_at.timestamp() > issuer_end:
        return KeyRefused(400, "invalid_key_request",
                          f"an issued key may not outlive the admin key that issues it ('{issued_by}' "
                          f"expires at {iso(issuer_end)})")
    if set(config.name) <= {"."}:  # "." and ".." are a URL's dot segments: DELETE could not name it
        return KeyRefused(400, "invalid_key_request", "a key's name may not be dots alone")
    if config.team is not None and config.team not in {t.name for t in cfg.teams}:
        return KeyRefused(400, "invalid_key_request",
                          f"team '{config.team}' is not one of the config's `teams:`")
    if config.name in {k.name for k in cfg.keys} or config.name == _FLAT:
        return KeyRefused(409, "key_name_taken",
                       f"a key of the config file is named '{config.name}': choose another name")
    return IssuedKey(config, issued_by, now)


def _problems(e: ValidationError) -> str:
    """Where each field is wrong and why, never the value sent (pydantic's own text quotes it)."""
    out = []
    for err in e.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in err["loc"]) or "body"
        out.append(f"{where}: {err['msg']}")
    return "; ".join(out)


_FLAT = "client_keys"  # gateway.auth.FLAT_KEY_NAME, the flat keys' one name (auth imports this module)


class IssuedKeys:
    """This replica's copy of every issued key, kept in step with the store; ``on_change`` is
    called (synchronously) whenever the copy changed, to put it in force."""

    def __init__(self, store: IssuedStore, wall: Callable[[], float], *, shared: bool, poll_s: float = POLL_S,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self._store = store
        self._wall = wall
        self._monotonic = monotonic
        self._shared = shared  # another replica may write: watch the store
        self._poll_s = poll_s
        self._sleep = sleep
        self._keys: dict[str, IssuedKey] = {}
        self._version: bytes | None = None
        self._watch: asyncio.Task[None] | None = None
        self._down_said = False
        # One read at a time: a poll's read begun before an issue, answered after it, put the
        # set without the new key in force after the issue's own read had put it there.
        self._reading = asyncio.Lock()
        self._looking: asyncio.Task[None] | None = None  # a read asked for by a request's unknown key
        self._looked_at = -math.inf  # when the last one began (monotonic)
        self.on_change: Callable[[], None] = lambda: None

    @property
    def keys(self) -> Mapping[str, IssuedKey]:
        return self._keys

    async def issue(self, key: IssuedKey, limits: KeysApiConfig) -> PutOutcome:
        """Raises IssuedStoreDown."""
        got = await self._store.put(key.name, key.record(), _ms(key.expires_at), _ms(self._wall()),
                                    limits.max_issued, limits.issued_per_minute)  # fmt: skip
        if got == "ok":
            log.info({"event": "key_issued", "key": key.name, "issued_by": key.issued_by,
                      "expires_at": iso(key.expires_at)})  # fmt: skip
            await self._known({**self._keys, key.name: key})
        return got

    async def revoke(self, name: str, by: str) -> bool:
        """Raises IssuedStoreDown."""
        dropped = await self._store.drop(name)
        if dropped:
            log.info({"event": "key_revoked", "key": name, "revoked_by": by})
            await self._known({n: k for n, k in self._keys.items() if n != name})
        return dropped

    async def _known(self, expected: dict[str, IssuedKey]) -> None:
        """In force where it was asked for, before the answer: the store's set, else (it stopped
        answering since) ``expected``, until the watch reads the store."""
        try:
            await self._refresh()
        except IssuedStoreDown:
            self._version = None
            self._put_in_force(expected)

    async def start(self) -> None:
        """The keys the store holds now (a restarted replica's, before it serves); then, on a
        shared store, watched."""
        with contextlib.suppress(IssuedStoreDown):
            await self._refresh()  # else learnt by the watch once the store answers
        if self._shared and self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watch_store())

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            # Bounded: a shutdown never waits on the store (a watch inside a call to a Redis that
            # went away first ends with that call's own timeout at the latest).
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._watch, _CLOSE_S)
            self._watch = None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._store.close(), _CLOSE_S)

    async def _watch_store(self) -> None:
        while True:
            await self._sleep(self._poll_s)
            try:
                await self._refresh()
            except IssuedStoreDown:
                if not self._down_said:
                    self._down_said = True
                    log.warning({"event": "issued_keys_unread", "keys": len(self._keys),
                                 "message": "the state store does not answer: the issued keys known "
                                 "stay in force, and none is issued or revoked until it does"})  # fmt: skip
                continue
            except Exception:  # the watch must outlive one bad answer
                log.exception("issued keys: reading the store failed")
                continue
            self._down_said = False

    async def look_again(self) -> None:
        """A request presents a key shaped as an issued one that this replica does not know:
        read the store before it is refused, in case another replica has just issued it.
        Polled alone, such a key met a final 401 for up to ``POLL_S`` after it was issued (the
        stock openai SDK called straight after the issue: 2 runs of 3; audit). One such read
        begins at most every ``poll_s``, and every request that asks before it ends waits for
        it: a flood of wrong keys costs the store one read an interval on top of the watch's,
        and holds each of them ``poll_s`` at most before its 401; keys issued one after another
        and used at once are each read, the second in the next interval. A store that does not
        answer refuses the request as before, a read's time after it began. Only on a shared
        store: this process's memory holds every key issued here."""
        if not self._shared:
            return
        looking = self._looking
        if looking is None or looking.done():
            wait = max(0.0, self._looked_at + self._poll_s - self._monotonic())
            self._looked_at = self._monotonic() + wait
            looking = self._looking = asyncio.get_running_loop().create_task(self._look(wait))
        # Shielded: a client that leaves does not cancel the read the others wait for.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(looking), max(0.0, self._looked_at - self._monotonic())
                                   + self._poll_s)  # fmt: skip

    async def _look(self, after_s: float) -> None:
        try:
            if after_s:
                await self._sleep(after_s)
            await self._refresh()
        except IssuedStoreDown:
            pass  # the watch says so, once
        except Exception:  # a request's read must not fail its request
            log.exception("issued keys: reading the store failed")

    async def _refresh(self) -> None:
        async with self._reading:
            await self._read()

    async def _read(self) -> None:
        version = await self._store.version()
        if version is None and self._lost():
            # A store that lost its data (restarted empty, flushed): what this replica knows
            # goes back, as the ledger's spend does (``state_store_lost``).
            live = [(k.name, k.record(), _ms(k.expires_at)) for k in self._keys.values()]
            log.error({"event": "issued_keys_restored", "keys": len(live)})
            await self._store.restore(live)
            version = await self._store.version()
        if version == self._version and version is not None:
            return
        keys = {}
        for raw in await self._store.records():
            key = IssuedKey.of_record(raw)
            if key is not None:
                keys[key.name] = key
        self._version = version
        self._put_in_force(keys)

    def _put_in_force(self, keys: dict[str, IssuedKey]) -> None:
        if keys != self._keys:
            self._keys = keys
            self.on_change()

    def _lost(self) -> bool:
        """Whether a key this replica knows should still be in the store (one that has not
        ended its grace): a store holding no marker then has lost it."""
        now = self._wall()
        return any(k.expires_at + GRACE_S > now for k in self._keys.values())


class MemoryIssuedStore:
    """This process's issued keys: ``state: {backend: memory}``."""

    def __init__(self) -> None:
        self._records: dict[str, tuple[int, bytes]] = {}
        self._minutes: dict[int, int] = {}
        self._version = 0

    async def put(self, name: str, record: bytes, expires_ms: int, now_ms: int,
                  max_issued: int, per_minute: int) -> PutOutcome:  # fmt: skip
        grace_ms = _ms(GRACE_S)
        for n, (exp, _) in list(self._records.items()):
            if exp + grace_ms <= now_ms:
                del self._records[n]
        live = [n for n, (exp, _) in self._records.items() if exp > now_ms]
        if name in live:
            return "taken"
        if len(live) >= max_issued:
            return "full"
        minute = now_ms // 60_000
        self._minutes = {minute: self._minutes.get(minute, 0) + 1}
        if self._minutes[minute] > per_minute:
            return "rate"
        self._records[name] = (expires_ms, record)
        self._version += 1
        return "ok"

    async def drop(self, name: str) -> bool:
        if self._records.pop(name, None) is None:
            return False
        self._version += 1
        return True

    async def version(self) -> bytes | None:
        return str(self._version).encode()

    async def records(self) -> list[bytes]:
        return [r for _, r in self._records.values()]

    async def restore(self, records: Sequence[tuple[str, bytes, int]]) -> None:
        return None  # this process's memory loses nothing while it runs

    async def close(self) -> None:
        return None


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _instant(epoch_s: float) -> str:
    return datetime.datetime.fromtimestamp(epoch_s, datetime.UTC).isoformat()

