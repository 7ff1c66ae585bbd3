"""Fallback chains, the loop breaker, per-model circuits and the client's own deadline:
a failing request reaches a provider no more often than it can help."""

import asyncio
import json

import pytest

from tests.fakeupstream import FakeUpstream, Reply

UNAVAILABLE = Reply(503, {"error": {"message": "The server is overloaded", "type": "server_error", "code": None}})
BAD = Reply(400, {"error": {"message": "Invalid 'messages[0].role'", "type": "invalid_request_error",
                            "code": "invalid_value"}})
QUOTA = Reply(429, {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                              "code": "insufficient_quota"}})
LB_ON = "loop_breaker: {enabled: true}\n"


@pytest.fixture
async def make_pair(make_gateway):
    fakes: list[FakeUpstream] = []

    async def make(extra: str = "", primary_extra: str = "", backup_extra: str = ""):
        primary = await FakeUpstream().start()
        backup = await FakeUpstream().start()
        fakes.extend((primary, backup))
        gw = await make_gateway(extra, fake=primary, upstreams=(
            f"  - {{name: primary, base_url: '{primary.url}', fallbacks: [backup]{primary_extra}}}\n"
            f"  - {{name: backup, base_url: '{backup.url}', models: ['never-routed-here']{backup_extra}}}\n"))
        return gw, primary, backup

    yield make
    for fake in fakes:
        await fake.close()


async def test_primary_down_is_served_by_the_fallback_within_one_chain(make_pair) -> None:
    gw, primary, backup = await make_pair()
    primary.script(*[UNAVAILABLE] * 10)
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-upstream"] == "backup" and headers["x-llm-fallbacks"] == "1"
    # One retry on the primary (fallback.retries_per_upstream), then the backup.
    assert len(primary.chat_requests()) == 2 and len(backup.chat_requests()) == 1
    assert headers["x-llm-attempts"] == "3"
    assert gw.metric("llm_gateway_fallbacks_total", upstream="primary", fallback="backup",
                     error_type="provider_unavailable") == 1


async def test_everything_down_costs_at_most_the_retry_count_plus_one_per_fallback(make_pair) -> None:
    gw, primary, backup = await make_pair()
    primary.script(*[UNAVAILABLE] * 10)
    backup.script(*[UNAVAILABLE] * 10)
    status, headers, _ = await gw.chat()
    assert status == 503 and headers["x-should-retry"] == "false"
    calls = len(primary.chat_requests()) + len(backup.chat_requests())
    assert calls == 1 + 5 + 1 == int(headers["x-llm-attempts"])  # never 2 x (1 + max_retries)


async def test_budget_and_long_rate_limit_fail_over_but_request_errors_do_not(make_pair) -> None:
    gw, primary, backup = await make_pair()
    primary.script(QUOTA)
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-upstream"] == "backup"
    limited = Reply(429, {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}},
                    {"retry-after": "120"})
    primary.script(limited)
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "2"}]})
    assert status == 200 and headers["x-llm-upstream"] == "backup" and gw.slept == []
    assert len(backup.chat_requests()) == 2


async def test_request_errors_never_fail_over(make_pair) -> None:
    gw, primary, backup = await make_pair()
    for failure in (BAD, Reply(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                               "code": "invalid_api_key"}})):
        primary.script(failure)
        status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": str(failure.status)}]})
        assert status == failure.status and headers["x-llm-upstream"] == "primary"
    assert backup.chat_requests() == []


async def test_a_known_rate_limit_reset_steers_later_requests_to_the_fallback(make_pair) -> None:
    gw, primary, backup = await make_pair()
    primary.script(Reply(429, {"error": {"message": "Rate limit reached", "type": "requests",
                                         "code": "rate_limit_exceeded"}}, {"retry-after": "120"}))
    await gw.chat()
    before = len(primary.chat_requests())
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "next"}]})
    assert status == 200 and headers["x-llm-upstream"] == "backup"
    assert len(primary.chat_requests()) == before  # not even tried: it would refuse


async def test_an_open_circuit_steers_to_the_fallback_at_once(make_pair) -> None:
    gw, primary, backup = await make_pair(
        "circuit_breaker: {failure_threshold: 1, open_s: 60}\n"
                      "fallback: {when: [rate_limit, budget]}\n")
    primary.script(*[UNAVAILABLE] * 10)
    status, _, _ = await gw.chat()  # unavailable does not fail over here: the circuit opens
    assert status == 503
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "b"}]})
    assert status == 200 and headers["x-llm-upstream"] == "backup" and headers["x-llm-attempts"] == "1"


async def test_a_stream_is_never_switched_after_its_first_byte(make_pair) -> None:
    from tests.fakeupstream import Stream, chunk
    gw, primary, backup = await make_pair()
    primary.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"})], then="drop"))
    status, headers, body = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                           "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and headers["x-llm-upstream"] == "primary" and b'"finish_reason":"error"' in body
    assert backup.chat_requests() == []


async def test_overflow_may_go_to_a_larger_context_fallback_before_compression(make_pair) -> None:
    from tests.convo import agent_conversation
    gw, primary, backup = await make_pair("fallback: {context_overflow: true}\n",
                                          ", context_window: 8000", ", context_window: 200000")
    primary.context_limit = 8000
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": agent_conversation(30)})
    assert status == 200 and headers["x-llm-upstream"] == "backup" and "x-llm-compressed" not in headers
    assert len(primary.chat_requests()) == 1 and len(backup.chat_requests()) == 1


async def test_overflow_is_compressed_when_no_fallback_is_larger(make_pair) -> None:
    from tests.convo import agent_conversation
    gw, primary, backup = await make_pair("fallback: {context_overflow: true}\n", ", context_window: 8000")
    primary.context_limit = 8000
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": agent_conversation(30)})
    assert status == 200 and headers["x-llm-upstream"] == "primary" and headers["x-llm-compressed"] == "true"
    assert backup.chat_requests() == []


async def test_loop_breaker_answers_twenty_identical_400s_with_one_upstream_call(make_gateway) -> None:
    gw = await make_gateway(LB_ON)
    gw.fake.script(BAD)
    answers = [await gw.chat() for _ in range(20)]
    assert len(gw.fake.chat_requests()) == 1
    first, *repeats = answers
    assert all(r[0] == 400 and r[2] == first[2] for r in repeats)
    status, headers, _ = repeats[-1]
    assert headers["x-llm-attempts"] == "0" and headers["x-llm-from-memory"] == "19"
    assert headers["x-llm-error-type"] == "unknown" and headers["x-should-retry"] == "false"
    # A changed request is never answered from memory.
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "fixed"}]})
    assert status == 200 and "x-llm-from-memory" not in headers


async def test_loop_breaker_key_order_and_credentials(make_gateway) -> None:
    gw = await make_gateway(LB_ON)
    gw.fake.script(BAD, BAD)
    a = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}).encode()
    b = json.dumps({"messages": [{"content": "x", "role": "user"}], "model": "gpt-4o-mini"}).encode()
    ct = {"Content-Type": "application/json"}
    await gw.chat(data=a, headers={**ct, "Authorization": "Bearer one"})
    status, headers, _ = await gw.chat(data=b, headers={**ct, "Authorization": "Bearer one"})
    assert headers.get("x-llm-from-memory") == "1"  # same request, re-serialised
    status, headers, _ = await gw.chat(data=a, headers={**ct, "Authorization": "Bearer two"})
    assert "x-llm-from-memory" not in headers  # another caller's answer is not shared
    assert len(gw.fake.chat_requests()) == 2


async def test_loop_breaker_holds_a_long_rate_limit_until_its_reset(make_gateway) -> None:
    gw = await make_gateway(LB_ON)
    gw.fake.script(Reply(429, {"error": {"message": "Rate limit reached", "type": "requests",
                                         "code": "rate_limit_exceeded"}}, {"retry-after": "40"}))
    await gw.chat()
    status, headers, _ = await gw.chat()
    assert status == 429 and headers["x-llm-from-memory"] == "1" and 38 <= int(headers["retry-after"]) <= 40
    assert len(gw.fake.chat_requests()) == 1


async def test_a_repeated_turn_after_its_window_is_one_probe_and_a_recovery_is_used_at_once(make_gateway) -> None:
    """Whatever the client's backoff: inside the window a repeat is answered from memory,
    after it one probe attempt goes (never a new round of retries), and once the upstream
    is back the probe's success is the client's answer and the turn is forgotten."""
    gw = await make_gateway("loop_breaker: {enabled: true, retryable_window_s: 0.3}\n"
                            "circuit_breaker: {failure_threshold: 1000, open_s: 0.3}\n")
    gw.fake.script(*[UNAVAILABLE] * 6)
    status, headers, _ = await gw.chat()
    assert status == 503 and headers["x-llm-attempts"] == "6"
    status, headers, _ = await gw.chat()
    assert status == 503 and headers["x-llm-from-memory"] == "1" and len(gw.fake.chat_requests()) == 6
    for probes in (1, 2):
        await asyncio.sleep(0.35)  # the window ends (a client's later repeat)
        gw.fake.script(*[UNAVAILABLE] * 6)
        status, headers, _ = await gw.chat()
        assert status == 503 and headers["x-llm-attempts"] == "1" and headers["x-should-retry"] == "false"
        assert len(gw.fake.chat_requests()) == 6 + probes
    status, headers, _ = await gw.chat()  # a new window began with the failed probe
    assert "x-llm-from-memory" in headers and len(gw.fake.chat_requests()) == 8
    gw.fake.steps.clear()  # the upstream recovers
    await asyncio.sleep(0.35)
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-attempts"] == "1"
    gw.fake.script(UNAVAILABLE)  # the turn was forgotten: a later failure is retried afresh
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-attempts"] == "2"
    assert gw.metric("llm_gateway_loop_breaker_events_total", event="probed", error_type="provider_unavailable") == 3


async def test_for_open_s_after_a_request_gave_up_a_new_failure_on_the_upstream_is_final(make_gateway) -> None:
    """An agent's turn is often several different requests (a tool round, the next turn), of
    two models (Gemini CLI's routing call, then the answer): the next one must not buy another
    full round of retries on the same outage."""
    gw = await make_gateway("circuit_breaker: {failure_threshold: 1000, open_s: 0.3}\n")
    gw.fake.script(*[UNAVAILABLE] * 7)
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "one"}]})
    assert status == 503 and headers["x-llm-attempts"] == "6"
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "two"}]})
    assert status == 503 and headers["x-llm-attempts"] == "1" and headers["x-should-retry"] == "false"
    gw.fake.script(UNAVAILABLE, UNAVAILABLE)
    status, headers, _ = await gw.chat({"model": "other-model", "messages": [{"role": "user", "content": "x"}]})
    # The same upstream: its outage too, after one retry (not a round), in case it hiccupped.
    assert status == 503 and headers["x-llm-attempts"] == "2"
    status, headers, _ = await gw.chat({"model": "other-model", "messages": [{"role": "user", "content": "y"}]})
    assert status == 200 and headers["x-llm-attempts"] == "1"  # failures only end retries, never answers
    await asyncio.sleep(0.35)  # open_s later
    gw.fake.script(UNAVAILABLE)
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "three"}]})
    assert status == 200 and headers["x-llm-attempts"] == "2"  # retried as usual again


async def test_parallel_requests_of_a_failing_model_retry_it_once_between_them(make_gateway) -> None:
    """opencode sends a turn's title and answer requests together: one retries the outage,
    the other waits for its verdict and gives up with it, after its own one attempt."""
    gw = await make_gateway("circuit_breaker: {failure_threshold: 1000}\n"
                            "retry: {provider_unavailable: {max_retries: 5, base_delay_s: 0.05, max_delay_s: 0.1}}\n",
                            real_sleep=True)  # fmt: skip
    gw.fake.script(*[UNAVAILABLE] * 20)
    answers = await asyncio.gather(*(
        gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]})
        for text in ("title?", "answer")))  # fmt: skip
    assert [a[0] for a in answers] == [503, 503]
    assert sorted(a[1]["x-llm-attempts"] for a in answers) == ["1", "6"]
    assert all(a[1]["x-should-retry"] == "false" for a in answers)
    assert len(gw.fake.chat_requests()) == 7  # not 12


async def test_a_request_waiting_on_a_model_that_recovers_retries_at_once(make_gateway) -> None:
    gw = await make_gateway("retry: {provider_unavailable: {max_retries: 5, base_delay_s: 0.05, max_delay_s: 0.1}}\n",
                            real_sleep=True)
    gw.fake.script(UNAVAILABLE, UNAVAILABLE, UNAVAILABLE)  # both first attempts and one retry fail
    answers = await asyncio.gather(*(
        gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]})
        for text in ("one", "two")))  # fmt: skip
    assert [a[0] for a in answers] == [200, 200]


async def test_the_deadline_never_outlives_the_clients_announced_timeout(make_gateway) -> None:
    gw = await make_gateway(real_sleep=True, extra_yaml=(
        "retry: {provider_unavailable: {max_retries: 50, base_delay_s: 0.5, max_delay_s: 0.5}}\n"))
    gw.fake.script(*[UNAVAILABLE] * 100)
    started = asyncio.get_running_loop().time()
    status, headers, _ = await gw.chat(headers={"x-stainless-read-timeout": "3"})
    elapsed = asyncio.get_running_loop().time() - started
    assert status == 503 and elapsed < 2.5 and headers["x-should-retry"] == "false"


async def test_one_failing_model_does_not_open_the_circuit_for_another(make_gateway) -> None:
    gw = await make_gateway("circuit_breaker: {failure_threshold: 2, open_s: 60}\n"
                            "retry: {provider_unavailable: {max_retries: 0, base_delay_s: 0.1, max_delay_s: 1}}\n")

    def by_model(payload):
        return UNAVAILABLE if payload.get("model") == "broken" else None

    gw.fake.script(*[by_model] * 50)
    for i in range(3):
        await gw.chat({"model": "broken", "messages": [{"role": "user", "content": str(i)}]})
    status, headers, _ = await gw.chat({"model": "broken", "messages": [{"role": "user", "content": "x"}]})
    assert status == 503 and headers["x-llm-attempts"] == "0"  # its own circuit is open
    status, _, _ = await gw.chat({"model": "healthy", "messages": [{"role": "user", "content": "x"}]})
    assert status == 200


async def test_a_turn_still_failing_keeps_the_outage_noted_for_its_next_model(make_gateway) -> None:
    """Gemini CLI's stock turn retries its routing call (a flash-lite model) for about 70 s, past
    the circuit's open_s, before it asks the answer's model: while the turn keeps failing (its
    repeats answered from memory, its probes failing), the outage stays noted, so the second
    model's first failure is final instead of buying the gateway's attempts again."""
    gw = await make_gateway("loop_breaker: {enabled: true, retryable_window_s: 1.0}\n"
                            "circuit_breaker: {failure_threshold: 1000, open_s: 0.5}\n", real_sleep=True)
    router = {"model": "router-lite", "messages": [{"role": "user", "content": "route this"}]}
    gw.fake.script(*[UNAVAILABLE] * 6)
    status, headers, _ = await gw.chat(router)
    assert status == 503 and headers["x-llm-attempts"] == "6"
    for _ in range(2):  # the client's repeats, answered from memory, past open_s
        await asyncio.sleep(0.3)
        status, headers, _ = await gw.chat(router)
        assert status == 503 and "x-llm-from-memory" in headers
    await asyncio.sleep(0.3)  # 0.9 s after the give-up; 0.3 s after the last repeat
    gw.fake.script(*[UNAVAILABLE] * 6)
    answer = {"model": "answer-pro", "messages": [{"role": "user", "content": "go"}]}
    status, headers, _ = await gw.chat(answer)
    # One retry (its first failure may have been a hiccup), not a round: failing it, the model
    # is in the outage too, given up on and remembered.
    assert status == 503 and headers["x-llm-attempts"] == "2" and headers["x-should-retry"] == "false"
    assert len(gw.fake.chat_requests()) == 8
    status, headers, _ = await gw.chat(answer)
    assert status == 503 and "x-llm-from-memory" in headers
    status, headers, _ = await gw.chat({**answer, "messages": [{"role": "user", "content": "next"}]})
    assert status == 503 and headers["x-llm-attempts"] == "1"  # its own outage now: final at once
    assert len(gw.fake.chat_requests()) == 9


async def test_another_models_outage_leaves_a_model_that_hiccupped_its_retry(make_gateway) -> None:
    """Audit: while gemini-9-down's outage was noted, gemini-1.0-pro's one 503 was made final,
    remembered, and the note extended, so Gemini CLI's own retries of it were answered from
    memory for ~35 s (4 CLI attempts, 41 s). It gets one retry now (not the round a request
    of a model failing on its own gets, as the whole upstream may be down), which answers it."""
    gw = await make_gateway("loop_breaker: {enabled: true}\n"
                            "circuit_breaker: {failure_threshold: 1000, open_s: 30}\n")
    gw.fake.script(*[UNAVAILABLE] * 6)
    status, headers, _ = await gw.chat({"model": "gemini-9-down", "messages": [{"role": "user", "content": "x"}]})
    assert status == 503 and headers["x-llm-attempts"] == "6"
    gw.fake.script(UNAVAILABLE)
    status, headers, _ = await gw.chat({"model": "gemini-1.0-pro", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and headers["x-llm-attempts"] == "2"
    assert len(gw.fake.chat_requests()) == 8
    gw.fake.script(UNAVAILABLE)  # a later hiccup of it: still not its outage
    status, headers, _ = await gw.chat({"model": "gemini-1.0-pro", "messages": [{"role": "user", "content": "again"}]})
    assert status == 200 and headers["x-llm-attempts"] == "2"
