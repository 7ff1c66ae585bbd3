"""A fake LLM upstream speaking OpenAI chat completions, Anthropic Messages, OpenAI Responses
and the Gemini API (gemini.py, gemini_rules.py, gemini_tool.py) on loopback: scriptable for the tests (:class:`FakeUpstream`), and runnable with
named failures for anyone trying the gateway without a provider (``python -m gateway.fake``,
:mod:`gateway.fake.scenarios`). The gateway itself never imports it."""

from gateway.fake.scenarios import SCENARIOS, ScenarioUpstream
from gateway.fake.steps import Drop, Hang, Recorded, Reply, Step, Stream
from gateway.fake.upstream import FakeUpstream

__all__ = ["SCENARIOS", "Drop", "FakeUpstream", "Hang", "Recorded", "Reply", "ScenarioUpstream", "Step", "Stream"]
