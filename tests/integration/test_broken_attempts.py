"""An attempt whose stream broke after the client saw part of it failed: the attempts metric
counts it under the error type its ending was classified as, and its span has status ERROR and
``error.type`` (docs/operations/metrics.md, tracing.md). Each leg of a continued stream says
what happened to it."""

import pytest
from opentelemetry.trace import StatusCode

from gateway.live import LIVE
from tests.fakeupstream import Stream, chunk
from tests.spans import in_memory

SHOWN = ["Once", " upon", " a"]
REQ = {"model": "gpt-4o-mini", "stream": True, "temperature": 0,
       "messages": [{"role": "user", "content": "Tell a story"}]}  # fmt: skip


def broken(then: str = "drop", words: list[str] = SHOWN, cid: str = "chatcmpl-fake123") -> Stream:
    events = [chunk({"role": "assistant", "content": ""}), *(chunk({"content": w}) for w in words)]
    return Stream([{**e, "id": cid} for e in events], then=then)


def whole(words: list[str], cid: str = "chatcmpl-fake123") -> Stream:
    events = [chunk({"role": "assistant", "content": ""}), *(chunk({"content": w}) for w in words), chunk({}, "stop")]
    return Stream([{**e, "id": cid} for e in events])


def traced(gw):
    tracing, exporter = in_memory()
    gw.app[LIVE].services.tracing = tracing
    return exporter


def attempt_spans(exporter) -> list:
    return sorted((s for s in exporter.get_finished_spans() if s.kind.name == "CLIENT"), key=lambda s: s.start_time)


def attempts(gw) -> dict[str, float]:
    return {o: gw.metric("llm_gateway_upstream_attempts_total", upstream="primary", outcome=o)
            for o in ("success", "provider_unavailable")}  # fmt: skip


@pytest.mark.parametrize(("then", "ended_by"), [("drop", "stream_broken"), ("stall", "idle_timeout")])
@pytest.mark.stall_timeouts
async def test_a_stream_broken_mid_answer_is_a_failed_attempt(make_gateway, then: str, ended_by: str) -> None:
    gw = await make_gateway()
    exporter = traced(gw)
    gw.fake.script(broken(then))
    status, _, body = await gw.chat(REQ)
    assert status == 200 and b"error" in body  # committed: the break is an error event
    assert attempts(gw) == {"success": 0, "provider_unavailable": 1}
    (span,) = attempt_spans(exporter)
    a = span.attributes
    assert a["error.type"] == "provider_unavailable" and a["llm_gateway.ended_by"] == ended_by
    assert a["llm_gateway.error.evidence"] == f"transport:{ended_by}"
    assert span.status.status_code is StatusCode.ERROR
    assert a["llm_gateway.decision"] == "stop"  # no continuation configured: the error event is the end
    assert a["gen_ai.response.id"] == "chatcmpl-fake123"  # it did answer, in part
    assert "gen_ai.usage.output_tokens" in a  # and the request's (partial) usage is its own


async def test_a_continued_stream_counts_its_broken_leg_as_failed_and_the_continuation_as_success(
    make_gateway,
) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefix")
    exporter = traced(gw)
    gw.fake.script(broken(), whole([" time."]))
    status, _, body = await gw.chat(REQ)
    assert status == 200 and b"error" not in body
    assert attempts(gw) == {"success": 1, "provider_unavailable": 1}
    first, cont = attempt_spans(exporter)
    assert first.attributes["error.type"] == "provider_unavailable"
    assert first.attributes["llm_gateway.ended_by"] == "stream_broken"
    assert first.status.status_code is StatusCode.ERROR
    assert cont.attributes["llm_gateway.attempt.kind"] == "continuation" and "error.type" not in cont.attributes
    assert cont.status.status_code is StatusCode.UNSET
    # The first leg ended when it broke, before the continuation was sent.
    assert first.end_time <= cont.start_time


async def test_a_continuation_that_breaks_too_is_a_second_failed_attempt(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", continuation: prefix")
    exporter = traced(gw)
    gw.fake.script(broken(), broken(words=[" time"]))
    status, _, body = await gw.chat(REQ)
    assert status == 200 and b"error" in body
    assert attempts(gw) == {"success": 0, "provider_unavailable": 2}
    assert [s.status.status_code for s in attempt_spans(exporter)] == [StatusCode.ERROR, StatusCode.ERROR]


async def test_each_replay_leg_says_what_happened_to_it(make_gateway) -> None:
    """``replay_any``: the request again, held back until it reproduces the shown text. A leg
    that breaks before it has is a failed attempt; one that diverges answered (the gateway set
    it aside), and says so."""
    gw = await make_gateway(upstream_yaml=", continuation: replay_any")
    exporter = traced(gw)
    gw.fake.script(broken(), broken(words=["Once"], cid="chatcmpl-replay"))
    status, _, body = await gw.chat(REQ)
    assert status == 200 and b"error" in body
    assert attempts(gw) == {"success": 0, "provider_unavailable": 2}
    first, replay = attempt_spans(exporter)
    assert replay.attributes["llm_gateway.attempt.kind"] == "continuation"
    assert replay.attributes["error.type"] == "provider_unavailable"
    assert replay.attributes["llm_gateway.ended_by"] == "stream_broken"
    assert replay.status.status_code is StatusCode.ERROR
    # Nothing of the replay reached the client: the request's usage is not put on it.
    assert "gen_ai.usage.output_tokens" not in replay.attributes

    exporter.clear()
    gw.fake.script(broken(), whole(["Twice", " upon", " a", " time."], cid="chatcmpl-replay"))
    status, _, body = await gw.chat(REQ)
    assert status == 200 and b"error" in body
    assert gw.metric("llm_gateway_continuations_total", upstream="primary", outcome="diverged") == 1
    assert attempts(gw) == {"success": 1, "provider_unavailable": 3}
    first, replay = attempt_spans(exporter)
    assert replay.attributes["llm_gateway.ended_by"] == "diverged" and "error.type" not in replay.attributes
    assert replay.status.status_code is StatusCode.UNSET
