"""A translated leg is made once per upstream and model (``UpstreamRuntime.legs``): what every
request on it shares, the target and the label, is made with it, not per request (#38)."""

from __future__ import annotations

from gateway.apis import DIALECT_FOR_API
from gateway.config import parse_config
from gateway.translate import Leg, default_translations
from gateway.translate.base import Target

CONFIG = """
upstreams:
  - {name: plain, base_url: 'http://127.0.0.1:9/v1', apis: [chat], stream_usage: false,
     model_map: {claude-sonnet-4-6: local-model}}
"""


def _leg(model: str) -> Leg:
    up = parse_config(CONFIG, env={}).upstreams[0]
    leg = default_translations().leg_for(DIALECT_FOR_API["messages"], up, model)
    assert isinstance(leg, Leg)
    return leg


def test_a_translated_leg_carries_its_target_and_label() -> None:
    mapped, unmapped = _leg("claude-sonnet-4-6"), _leg("claude-haiku-4-5")
    assert mapped.target == Target("local-model", stream_usage=False) and mapped.label == "messages->chat"
    assert unmapped.target == Target("claude-haiku-4-5", stream_usage=False)


def test_a_request_on_the_leg_is_sent_to_its_target() -> None:
    leg = _leg("claude-sonnet-4-6")
    body = {"model": "claude-sonnet-4-6", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    sent = leg.request(body, "claude-sonnet-4-6", stream_usage=False)
    assert isinstance(sent, dict) and sent["model"] == "local-model" and "stream_options" not in sent
    # Asked with another stream_usage than the leg was made with, the request still follows it.
    streamed = leg.request({**body, "stream": True}, "claude-sonnet-4-6", stream_usage=True)
    assert isinstance(streamed, dict) and streamed["stream_options"] == {"include_usage": True}
