"""The loop breaker: windows from a table, fingerprints, and recall through the memory store."""

import dataclasses
import json

import pytest

from gateway.config import LoopBreakerConfig
from gateway.errors import Classification, ErrorType
from gateway.policy.loop_breaker import (
    Answer,
    Fingerprint,
    LoopBreaker,
    Recalled,
    decode,
    encode,
    relevant_headers,
    window_for,
)
from gateway.state.memory import MemoryStore

NOW = 1_000_000.0
CFG = LoopBreakerConfig()


def FP(name: str) -> Fingerprint:
    """A fingerprint named ``name`` (its seal is one key for all: these tests are of windows)."""
    return Fingerprint(name, bytes(32))


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def c(t: ErrorType, **kw: object) -> Classification:
    return Classification.of(t, **kw)


@pytest.mark.parametrize(("classification", "open_until", "window"), [
    (c(ErrorType.UNKNOWN), None, 10.0),
    (c(ErrorType.AUTH), None, 10.0),
    (c(ErrorType.CONTEXT_OVERFLOW), None, 10.0),
    (c(ErrorType.BUDGET), None, 5.0),                                   # shorter: a top-up is near
    (c(ErrorType.RATE_LIMIT, reset_at_ms=int((NOW + 42) * 1000)), None, 42.0),
    (c(ErrorType.RATE_LIMIT, retry_after_s=7.0), None, 7.0),
    (c(ErrorType.RATE_LIMIT, reset_at_ms=int((NOW + 3) * 1000), retry_after_s=99.0), None, 3.0),  # reset-at wins
    (c(ErrorType.RATE_LIMIT, retry_after_s=3600.0), None, 60.0),        # capped
    (c(ErrorType.RATE_LIMIT, reset_at_ms=int((NOW - 5) * 1000)), None, 0.0),  # already passed
    (c(ErrorType.PROVIDER_UNAVAILABLE), None, 10.0),                    # no hint, no circuit: window_s
    (c(ErrorType.PROVIDER_UNAVAILABLE), NOW + 25, 25.0),                # the open circuit's end
    (c(ErrorType.PROVIDER_UNAVAILABLE, retry_after_s=5.0), NOW + 25, 25.0),  # the latest hint
    (c(ErrorType.PROVIDER_UNAVAILABLE), NOW + 500, 60.0),
])
def test_window(classification: Classification, open_until: float | None, window: float) -> None:
    assert window_for(CFG, classification, NOW, open_until) == pytest.approx(window)


def test_fingerprint_covers_path_body_and_credential_and_hides_them() -> None:
    lb = LoopBreaker(CFG, MemoryStore(Clock()), Clock())
    base = lb.fingerprint("/v1/chat/completions", b'{"a":1}', "Bearer sk-secret")
    assert base == lb.fingerprint("/v1/chat/completions", b'{"a":1}', "Bearer sk-secret")
    others = {
        lb.fingerprint("/v1/responses", b'{"a":1}', "Bearer sk-secret"),
        lb.fingerprint("/v1/chat/completions", b'{"a":2}', "Bearer sk-secret"),
        lb.fingerprint("/v1/chat/completions", b'{"a":1}', "Bearer sk-other"),
        lb.fingerprint("/v1/chat/completions", b'{"a":1}', None),
        lb.fingerprint("/v1/chat/completions{", b'"a":1}', "Bearer sk-secret"),  # no shifting of bytes
    }
    assert base not in others and len(others) == 5
    assert "secret" not in base.name and len(base.name) == 64
    assert len(base.seal) == 32 and base.seal.hex() not in base.name  # the store's key tells nothing of the seal


def test_fingerprints_match_across_processes_only_with_a_shared_secret() -> None:
    shared = LoopBreakerConfig(secret="s3")
    args = ("/v1/x", b"{}", "k")
    store = MemoryStore(Clock())
    assert LoopBreaker(shared, store, Clock()).fingerprint(*args) == LoopBreaker(shared, store, Clock()).fingerprint(*args)
    assert LoopBreaker(CFG, store, Clock()).fingerprint(*args) != LoopBreaker(CFG, store, Clock()).fingerprint(*args)


def test_encode_decode_round_trip_keeps_only_relevant_headers() -> None:
    cl = c(ErrorType.RATE_LIMIT, retry_after_s=7.0, reset_at_ms=123, provider_code="rate_limit_exceeded", message="slow")
    answer = Answer(429, b'{"error":{"message":"slow"}}\xff', (
        ("Content-Type", "application/json"), ("x-request-id", "abc"), ("Retry-After", "7"),
        ("x-ratelimit-reset-requests", "7s"), ("set-cookie", "x"), ("anthropic-ratelimit-tokens-reset", "t"),
    ))
    hit = decode(encode(answer, cl, NOW, NOW + 7), 3)
    assert hit == Recalled(429, answer.body, (
        ("Content-Type", "application/json"), ("Retry-After", "7"),
        ("x-ratelimit-reset-requests", "7s"), ("anthropic-ratelimit-tokens-reset", "t"),
    ), cl, 3, NOW, NOW + 7, NOW)
    assert relevant_headers([("Date", "x")]) == ()


def test_the_answering_upstream_round_trips_and_an_answer_stored_without_it_still_decodes() -> None:
    cl = c(ErrorType.UNKNOWN)
    hit = decode(encode(Answer(404, b"{}", (), "oai-b"), cl, NOW, NOW + 10), 1)
    assert hit is not None and hit.upstream == "oai-b"
    # What a version before the name was kept wrote (no "n"): read as before, with no name.
    head = b'{"s":404,"h":[],"c":' + json.dumps(dataclasses.asdict(cl)).encode() + b',"t":1,"u":2,"f":1,"r":0}'
    old = decode(len(head).to_bytes(4, "big") + head + b"{}", 1)
    assert old == Recalled(404, b"{}", (), cl, 1, 1.0, 2.0, 1.0) and old.upstream is None


@pytest.mark.parametrize("blob", [b"", b"\x00\x00\x00\x05{}", b"\x00\x00\x00\x02{}garbage", b"\xff\xff\xff\xff"])
def test_a_blob_this_version_cannot_read_is_a_miss(blob: bytes) -> None:
    assert decode(blob, 1) is None


async def test_an_identical_request_is_answered_from_memory_until_the_window_ends() -> None:
    clock = Clock()
    events: list[tuple[str, ErrorType]] = []
    lb = LoopBreaker(CFG, MemoryStore(clock), clock, on_event=lambda e, t: events.append((e, t)))
    fp = lb.fingerprint("/v1/chat/completions", b"{}", "k")
    assert await lb.recall(fp) is None
    window = await lb.remember(fp, Answer(400, b"bad", (("content-type", "application/json"),)), c(ErrorType.UNKNOWN))
    assert window == 10.0
    first, second = await lb.recall(fp), await lb.recall(fp)
    assert first is not None and second is not None
    assert (first.status, first.body, first.repeats, second.repeats) == (400, b"bad", 1, 2)
    assert first.retry_after_s(clock.t) is None  # not retryable: no retry-after
    clock.t += 10
    assert await lb.recall(fp) is None
    assert events == [("remembered", ErrorType.UNKNOWN), ("answered", ErrorType.UNKNOWN),
                      ("answered", ErrorType.UNKNOWN)]


async def test_a_retryable_answer_counts_its_retry_after_down() -> None:
    clock = Clock()
    lb = LoopBreaker(CFG, MemoryStore(clock), clock)
    await lb.remember(FP("fp"), Answer(429, b"slow"), c(ErrorType.RATE_LIMIT, retry_after_s=40.0))
    clock.t += 15.5
    hit = await lb.recall(FP("fp"))
    assert hit is not None and hit.retry_after_s(clock.t) == 25


async def test_too_big_disabled_and_zero_windows_are_not_remembered() -> None:
    clock = Clock()
    store = MemoryStore(clock)
    events: list[tuple[str, ErrorType]] = []
    lb = LoopBreaker(LoopBreakerConfig(max_body_bytes=4), store, clock, on_event=lambda e, t: events.append((e, t)))
    assert await lb.remember(FP("big"), Answer(400, b"12345"), c(ErrorType.UNKNOWN)) == 0
    assert events == [("skipped", ErrorType.UNKNOWN)]
    assert await lb.remember(FP("old"), Answer(429, b""), c(ErrorType.RATE_LIMIT, reset_at_ms=1)) == 0
    off = LoopBreaker(LoopBreakerConfig(enabled=False), store, clock)
    assert not off.enabled
    assert await off.remember(FP("x"), Answer(400, b""), c(ErrorType.UNKNOWN)) == 0
    await lb.remember(FP("x"), Answer(400, b""), c(ErrorType.UNKNOWN))
    assert await off.recall(FP("x")) is None  # off means off, even with answers in the store
    assert len(store.answers) == 1


async def test_memory_is_bounded_by_entries_and_bytes_least_recently_used_first() -> None:
    clock = Clock()
    store = MemoryStore(clock, max_answers=3, max_answer_bytes=100)
    for name in "abc":
        await store.answer_put(name, b"x" * 10, 60)
    assert await store.answer_take("a") is not None  # a is now the most recently used
    await store.answer_put("d", b"x" * 10, 60)
    assert await store.answer_take("b") is None
    assert {k for k in "acd" if await store.answer_take(k)} == {"a", "c", "d"}
    await store.answer_put("e", b"x" * 90, 60)  # 90 + 10s over 100 bytes: the oldest go
    assert len(store.answers) <= 2
    await store.answer_put("huge", b"x" * 101, 60)  # never fits
    assert await store.answer_take("huge") is None


def test_a_given_up_outage_without_a_hint_is_answered_for_the_circuits_open_time() -> None:
    outage = c(ErrorType.PROVIDER_UNAVAILABLE)
    assert window_for(CFG, outage, NOW, None, no_hint_s=30.0) == 30.0
    assert window_for(LoopBreakerConfig(retryable_window_s=4), outage, NOW, None, no_hint_s=30.0) == 4.0


OUTAGE = Answer(503, b'{"error":{"message":"down"}}')


async def test_after_its_window_a_repeated_turn_is_a_probe_while_repeats_keep_coming() -> None:
    """The client's backoff does not matter: inside the window a repeat is answered, after
    it (for as long as repeats keep arriving) each repeat is one probe, and each failed
    probe opens a new window."""
    clock = Clock()
    events: list[str] = []
    lb = LoopBreaker(CFG, MemoryStore(clock), clock, no_hint_window_s=30.0, on_event=lambda e, _t: events.append(e))
    outage = c(ErrorType.PROVIDER_UNAVAILABLE)
    assert await lb.remember(FP("fp"), OUTAGE, outage) == 30.0
    sends = 0
    # Claude Code on a non-default model: repeats at 0.5 s, 1.1 s, then 31, 64, 110, 158 s, ...
    for at in (0.5, 1.1, 31, 64, 110, 158, 200, 245):
        clock.t = NOW + at
        hit = await lb.recall(FP("fp"))
        assert hit is not None, at
        if not hit.answers(clock.t):
            sends += 1
            await lb.remember(FP("fp"), OUTAGE, outage, turn=hit)  # the probe failed too
    assert sends == 6  # one probe per window, never a full round
    assert events.count("probed") == 6 and events.count("answered") == 2
    hit = await lb.recall(FP("fp"))
    assert hit is not None and hit.first_at == NOW and hit.repeats == 9


async def test_a_probe_that_gets_through_ends_the_turn() -> None:
    clock = Clock()
    lb = LoopBreaker(CFG, MemoryStore(clock), clock, no_hint_window_s=30.0)
    await lb.remember(FP("fp"), OUTAGE, c(ErrorType.PROVIDER_UNAVAILABLE))
    clock.t += 31
    hit = await lb.recall(FP("fp"))
    assert hit is not None and not hit.answers(clock.t)
    await lb.forget(FP("fp"))
    assert await lb.recall(FP("fp")) is None


async def test_the_turn_is_forgotten_when_repeats_stop_or_it_lasts_too_long() -> None:
    clock = Clock()
    cfg = LoopBreakerConfig(turn_idle_s=120, turn_max_s=300)
    lb = LoopBreaker(cfg, MemoryStore(clock), clock, no_hint_window_s=30.0)
    outage = c(ErrorType.PROVIDER_UNAVAILABLE)
    await lb.remember(FP("quiet"), OUTAGE, outage)
    clock.t = NOW + 30 + 120
    assert await lb.recall(FP("quiet")) is None  # no repeat within turn_idle_s of the window's end
    clock.t = NOW
    await lb.remember(FP("long"), OUTAGE, outage)
    for _ in range(20):  # a probe every 31 s keeps the turn, until turn_max_s since it began
        clock.t += 31
        hit = await lb.recall(FP("long"))
        if hit is None:
            break
        await lb.remember(FP("long"), OUTAGE, outage, turn=hit)
    assert clock.t - NOW <= 300 + 31 and hit is None
    # A failure after turn_max_s starts a new turn: the gateway's full attempts again, once.
    await lb.remember(FP("long"), OUTAGE, outage)
    hit = await lb.recall(FP("long"))
    assert hit is not None and hit.first_at == clock.t


async def test_non_retryable_answers_have_no_probing_phase() -> None:
    clock = Clock()
    lb = LoopBreaker(CFG, MemoryStore(clock), clock, no_hint_window_s=30.0)
    for t in (ErrorType.UNKNOWN, ErrorType.AUTH, ErrorType.BUDGET):
        await lb.remember(FP(t.value), Answer(400, b"bad"), c(t))
    clock.t += 10.01
    assert [await lb.recall(FP(t.value)) for t in (ErrorType.UNKNOWN, ErrorType.AUTH, ErrorType.BUDGET)] == [None] * 3


async def test_a_long_rate_limit_is_answered_for_at_most_max_window_s_then_probed() -> None:
    clock = Clock()
    lb = LoopBreaker(CFG, MemoryStore(clock), clock, no_hint_window_s=30.0)
    assert await lb.remember(FP("fp"), Answer(429, b"slow"), c(ErrorType.RATE_LIMIT, retry_after_s=3600.0)) == 60.0
    clock.t += 59
    hit = await lb.recall(FP("fp"))
    assert hit is not None and hit.answers(clock.t) and hit.retry_after_s(clock.t) == 1
    clock.t += 2
    hit = await lb.recall(FP("fp"))
    assert hit is not None and not hit.answers(clock.t)


async def test_a_remembered_long_rate_limit_tells_the_providers_own_wait() -> None:
    """A client told the window's end would come back just to be probed; told the provider's
    hour, it schedules itself (the AI SDK waits out a retry-after under 60 s only)."""
    clock = Clock()
    lb = LoopBreaker(CFG, MemoryStore(clock), clock)
    reset = int((NOW + 3600) * 1000)
    await lb.remember(FP("fp"), Answer(429, b"slow"), c(ErrorType.RATE_LIMIT, retry_after_s=3600.0, reset_at_ms=reset))
    clock.t += 10
    hit = await lb.recall(FP("fp"))
    assert hit is not None and hit.answers(clock.t) and hit.retry_after_s(clock.t) == 3590


async def test_the_store_holds_an_answer_sealed_by_the_request_it_answers() -> None:
    """The state store (Redis, read by whoever reaches it) holds neither the body, which may quote
    the request, nor the classification; the seal's key is the fingerprint's other half."""
    clock = Clock()
    store = MemoryStore(clock)
    lb = LoopBreaker(CFG, store, clock, random_bytes=lambda n: b"\x01" * n)
    fp = lb.fingerprint("/v1/chat/completions", b'{"messages":"the prompt"}', "Bearer k")
    said = c(ErrorType.UNKNOWN, message="Input should be a valid list, got 'the prompt'")
    await lb.remember(fp, Answer(422, b'{"detail":[{"input":"the prompt"}]}'), said)
    found = await store.answer_take(fp.name)
    assert found is not None and b"the prompt" not in found[0] and b"unknown" not in found[0]
    hit = await lb.recall(fp)
    assert hit is not None and hit.body == b'{"detail":[{"input":"the prompt"}]}' and hit.classification == said
    assert await lb.recall(Fingerprint(fp.name, bytes(32))) is None  # the name alone opens nothing
