"""RequestState: its fields read their defaults until written, and nothing mutable is shared."""

from __future__ import annotations

import dataclasses

from gateway.apis import OPENAI_CHAT
from gateway.pipeline.outcome import RequestState


def test_every_field_reads_its_default_until_a_stage_writes_it() -> None:
    state = RequestState(request_id="r", started=1.5)
    for f in dataclasses.fields(RequestState):
        if f.name in ("request_id", "started"):
            continue
        expected = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert getattr(state, f.name) == expected, f.name
    assert state.dialect is OPENAI_CHAT and (state.request_id, state.started) == ("r", 1.5)


def test_mutable_fields_are_each_requests_own() -> None:
    one, two = RequestState("a", 0.0), RequestState("b", 0.0)
    one.usage["prompt"] = 3
    one.empty_attempts.append("up")
    one.empty_retries.append("up")
    one.upstream = "primary"
    assert two.usage == {} and two.empty_attempts == [] and two.empty_retries == [] and two.upstream == "none"
