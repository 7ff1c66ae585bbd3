"""The loop breaker: a request identical to one that just failed is answered from memory.

Agents retry. A malformed, unauthorised, over-budget or over-long request fails the same way
every time, and a retryable one the gateway already gave up on will not succeed before its
reset. So the final failure of a request is remembered under its fingerprint, and an
identical request (same path, body bytes and credential) gets the same answer without
reaching the provider: a client's retry loop costs the provider one request.

A retryable failure the gateway gave up on (an outage, a long rate limit) is remembered in two
phases, because clients keep repeating such a turn for minutes on a schedule of their own
(Codex 5-20 s apart, Claude Code 20-45 s apart on a non-default model):

    answered   until the provider's wait (reset-at / retry-after) or the open circuit's end,
               else ``retryable_window_s`` (default: the circuit's ``open_s``): identical
               repeats are answered from memory, nothing is sent;
    probing    then, while repeats keep arriving (each within ``turn_idle_s`` of the window's
               end) and for at most ``turn_max_s`` since the turn first failed: the next
               identical repeat is sent as a *probe*, one attempt and no retries. Its failure
               starts a new answered window; its success forgets the turn.

So a permanent failure costs the gateway's own attempts once per client turn plus one probe
per window, whatever the client's backoff, and a recovered upstream is used again at most
one window (its retry-after, or the circuit's open time) after it recovered.

How the pipeline wires it::

    fp = loop.fingerprint(request.path, canonical_body, credential)  # credential: what the
                                                    # caller presented (its key, or gateway key)
    hit = await loop.recall(fp)
    if hit is not None and hit.answers(now):
        # answer hit.status / hit.body / hit.headers, classified as hit.classification,
        # with x-should-retry: false, retry-after: hit.retry_after_s(now) when the provider
        # (or an open circuit) named a wait,
        # and x-llm-attempts: 0 (nothing was sent); hit.repeats says how many times so far;
        # x-llm-upstream: hit.upstream, who answered (None when remembered without it).
        ...
    outcome = ... send (one attempt per upstream when hit is a probe), retry, rescue ...
    if the final outcome is an error (never for a success, never for a gateway 413/400
    made before sending, never once a stream's first byte reached the client):
        await loop.remember(fp, Answer(status, body, headers, upstream), classification, turn=hit)
    elif hit is not None:
        await loop.forget(fp)                       # the probe got through: the turn is over

How long an answer is answered from memory (``window_for``):

    unknown, auth, context_overflow (not rescued)   loop_breaker.window_s          (10 s)
    budget                                          loop_breaker.budget_window_s   (5 s)
    rate_limit, provider_unavailable (given up)     until reset-at, else retry-after, or the
                                                    open circuit's end, whichever is latest;
                                                    retryable_window_s (circuit open_s, 30 s)
                                                    with no hint; never more than
                                                    max_window_s (60 s); then probing

The fingerprint is a keyed BLAKE2b MAC, keyed by ``loop_breaker.secret`` (or a per-process random
key): neither the credential nor the body can be read back from it. Its first half names the
entry in the store; its second half, never stored, seals what is kept there (``sealed.py``), so
the provider's words, which may quote the request, are read only by a request that holds it.
Answers larger than ``max_body_bytes`` are not remembered; the store bounds entries and total
bytes (LRU).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import NamedTuple, Protocol

from gateway.config import LoopBreakerConfig
from gateway.errors import Classification, ErrorType
from gateway.policy.sealed import KEY_BYTES, NONCE_BYTES, seal, unseal


class AnswerStore(Protocol):
    async def answer_put(self, fingerprint: str, blob: bytes, ttl_s: float) -> None: ...

    async def answer_take(self, fingerprint: str) -> tuple[bytes, int] | None: ...

    async def answer_drop(self, fingerprint: str) -> None: ...

    def holds_answers(self) -> bool:
        """False only when no answer can be found (then a recall needs no lookup)."""
        ...


class Fingerprint(NamedTuple):
    """A request's identity for the loop breaker: two halves of one MAC."""

    name: str  # the store's key for its answer (hex)
    seal: bytes  # the key its answer is sealed with in the store; never stored


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    upstream: str | None = None  # the deployment (or pool) that answered: its repeats name it


@dataclass(frozen=True, slots=True)
class Recalled:
    status: int
    body: bytes  # the upstream's body, byte for byte
    headers: tuple[tuple[str, str], ...]  # the relevant ones only (see relevant_headers)
    classification: Classification
    repeats: int  # times this turn has been recalled, this one included
    remembered_at: float  # epoch s of the last failure
    until: float  # epoch s at which the answered window ends (then: probing)
    first_at: float = 0.0  # epoch s at which the turn first failed
    upstream: str | None = None  # who answered; None when remembered by a version that kept no name

    def answers(self, now: float) -> bool:
        """True: answer from memory. False: the window is over, send one probe attempt."""
        return now < self.until

    def retry_after_s(self, now: float) -> int | None:
        """Whole seconds until a retry makes sense, for a retryable answer; else None. The
        provider's own reset when it named one (even past the window: a client told 3600 s
        schedules itself, one told the window's 60 s comes back to probe a provider that
        said it would not recover); else the window's end."""
        c = self.classification
        if not c.retryable:
            return None
        if c.reset_at_ms is not None and c.reset_at_ms / 1000 > now:
            return math.ceil(c.reset_at_ms / 1000 - now)
        return max(0, math.ceil(self.until - now))


_NON_RETRYABLE = frozenset({ErrorType.UNKNOWN, ErrorType.AUTH, ErrorType.CONTEXT_OVERFLOW})


def window_for(
    cfg: LoopBreakerConfig,
    c: Classification,
    now: float,
    circuit_open_until: float | None = None,
    no_hint_s: float | None = None,
) -> float:
    """Seconds to answer a final failure of class ``c`` from memory (0: do not remember).
    ``no_hint_s``: a given-up retryable failure's window when nothing names a wait
    (``retryable_window_s``, or when unset the circuit's open time)."""
    if c.type is ErrorType.BUDGET:
        return cfg.budget_window_s
    if c.type in _NON_RETRYABLE:
        return cfg.window_s
    hints = []
    if c.reset_at_ms is not None:
        hints.append(c.reset_at_ms / 1000 - now)
    elif c.retry_after_s is not None:
        hints.append(c.retry_after_s)
    if circuit_open_until is not None:
        hints.append(circuit_open_until - now)
    default = cfg.retryable_window_s if cfg.retryable_window_s is not None else no_hint_s
    window = max(hints) if hints else (default if default is not None else cfg.window_s)
    return max(0.0, min(window, cfg.max_window_s))


def keep_for(cfg: LoopBreakerConfig, c: Classification, now: float, window: float, first_at: float) -> float:
    """Seconds to keep a remembered failure in the store: its window, plus for a retryable
    one the probing phase (``turn_idle_s``), never past ``turn_max_s`` after the turn began
    (nor shorter than the window)."""
    if not c.retryable or c.type is ErrorType.BUDGET:
        return window
    return max(window, min(window + cfg.turn_idle_s, first_at + cfg.turn_max_s - now))


# What a replayed answer needs from the upstream's headers: how to read the body, and the
# provider's own rate-limit and retry hints. Request ids, dates and lengths are per response.
_KEEP_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")
_KEEP = frozenset({"content-type", "retry-after", "retry-after-ms"})


def relevant_headers(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(
        (k, v) for k, v in headers if k.lower() in _KEEP or k.lower().startswith(_KEEP_PREFIXES)
    )


_LEN = struct.Struct(">I")


def encode(answer: Answer, c: Classification, remembered_at: float, until: float,
           first_at: float | None = None, repeats: int = 0) -> bytes:  # fmt: skip
    meta = {"s": answer.status, "h": relevant_headers(answer.headers), "c": asdict(c),
            "t": remembered_at, "u": until, "f": remembered_at if first_at is None else first_at,
            "r": repeats}  # fmt: skip
    if answer.upstream is not None:
        meta["n"] = answer.upstream  # an extra key: a version that does not read it decodes the rest
    head = json.dumps(meta, separators=(",", ":")).encode()
    return _LEN.pack(len(head)) + head + answer.body


def decode(blob: bytes, repeats: int) -> Recalled | None:
    """None for a blob this version cannot read (written by another), rather than an error."""
    try:
        (n,) = _LEN.unpack_from(blob)
        meta = json.loads(blob[_LEN.size : _LEN.size + n])
        raw = meta["c"]
        c = Classification(**{**raw, "type": ErrorType(raw["type"])})
        headers = tuple((str(k), str(v)) for k, v in meta["h"])
        remembered_at = float(meta["t"])
        upstream = meta.get("n")  # absent from answers remembered before it was kept
        return Recalled(int(meta["s"]), blob[_LEN.size + n :], headers, c,
                        int(meta.get("r", 0)) + repeats, remembered_at, float(meta["u"]),
                        float(meta.get("f", remembered_at)),
                        upstream if isinstance(upstream, str) else None)  # fmt: skip
    except (struct.error, ValueError, KeyError, TypeError):
        return None


class LoopBreaker:
    def __init__(
        self,
        cfg: LoopBreakerConfig,
        store: AnswerStore,
        clock: Callable[[], float],
        *,
        no_hint_window_s: float | None = None,
        on_event: Callable[[str, ErrorType], None] = lambda _e, _t: None,
        routes: bytes = b"",
        random_bytes: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self._cfg = cfg
        self.enabled = cfg.enabled  # read on every request: a plain attribute (gateway/services.py Limits)
        self._store = store
        self._clock = clock
        # A given-up outage with no named wait is answered for one circuit-open period: the
        # same bound the circuit puts on how long a recovered upstream goes unused.
        self._no_hint_s = no_hint_window_s
        self._on_event = on_event
        # Replicas only recognise each other's fingerprints when they share the secret (and
        # ``routes``: the upstreams a failure came from; a changed one remembers nothing).
        # BLAKE2b takes keys of at most 64 bytes: a configured secret of any length is hashed.
        self._key = hashlib.sha256(cfg.secret.encode() + routes).digest() if cfg.secret else os.urandom(32)
        self._random_bytes = random_bytes  # each sealed answer's nonce


    def fingerprint(self, path: str, body: bytes, credential: str | None) -> Fingerprint:
        # Keyed BLAKE2b: a MAC like HMAC-SHA256, at a third of the cost on the hot path. Its 64
        # bytes cost what 32 do; either half of a PRF's output tells nothing of the other.
        mac = hashlib.blake2b(key=self._key, digest_size=64)
        # Length prefixes: no two different (path, body, credential) triples hash the same bytes.
        for part in (path.encode(), body, (credential or "").encode()):
            mac.update(_LEN.pack(len(part)))
            mac.update(part)
        digest = mac.digest()
        return Fingerprint(digest[:32].hex(), digest[32 : 32 + KEY_BYTES])

    def may_recall(self) -> bool:
        """Whether a recall could find anything. With nothing remembered (the in-memory
        store, empty) the fingerprint and the lookup are skipped; ``remember`` still works."""
        return self.enabled and self._store.holds_answers()

    async def recall(self, fingerprint: Fingerprint) -> Recalled | None:
        """The remembered failure of an identical request, or None (then send it). When
        ``answers(now)`` is False the turn is in its probing phase: send one attempt."""
        if not self._cfg.enabled:
            return None
        found = await self._store.answer_take(fingerprint.name)
        if found is None:
            return None
        blob, repeats = found
        plain = unseal(fingerprint.seal, blob)
        hit = decode(plain, repeats) if plain is not None else None
        if hit is not None:
            probing = not hit.answers(self._clock())
            self._on_event("probed" if probing else "answered", hit.classification.type)
        return hit

    async def remember(
        self,
        fingerprint: Fingerprint,
        answer: Answer,
        classification: Classification,
        *,
        circuit_open_until: float | None = None,
        turn: Recalled | None = None,
    ) -> float:
        """Remember a request's final failure; returns the answered window in seconds (0: not
        kept). ``turn``: what the recall found when this request was a probe of that turn."""
        if not self._cfg.enabled:
            return 0.0
        now = self._clock()
        window = window_for(self._cfg, classification, now, circuit_open_until, self._no_hint_s)
        if window <= 0:
            return 0.0
        if len(answer.body) > self._cfg.max_body_bytes:
            self._on_event("skipped", classification.type)
            return 0.0
        first_at, repeats = now, 0
        if turn is not None and now - turn.first_at < self._cfg.turn_max_s:
            first_at, repeats = turn.first_at, turn.repeats
        keep = keep_for(self._cfg, classification, now, window, first_at)
        blob = encode(answer, classification, now, now + window, first_at, repeats)
        sealed = seal(fingerprint.seal, blob, self._random_bytes(NONCE_BYTES))
        await self._store.answer_put(fingerprint.name, sealed, keep)
        self._on_event("remembered", classification.type)
        return window

    async def forget(self, fingerprint: Fingerprint) -> None:
        """A probe got through: the turn it repeated is over."""
        if self._cfg.enabled:
            await self._store.answer_drop(fingerprint.name)
