"""Gemini CLI itself (``gemini -p``, headless) with its stock model ("auto", no ``-m``) through the
gateway to each kind of upstream the Gemini API is translated for: each prompt is a buffered
routing call, asking for JSON in a schema (``responseMimeType: application/json`` with the
schema), then the streamed answer. The routing call reaches the upstream in its own API's field
for structured output (``response_format``, ``output_config.format``, ``text.format``), and the
JSON the upstream answers in that schema routes the turn at once: two calls a prompt. (The
fake answered the routing call with prose before it read those fields, and the CLI retried it
five times, about 100 s a prompt.) Set up as tests/e2e/test_gemini_cli.py is."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningGateway, launch_cli
from tests.e2e.test_gemini_cli import gemini, run_gemini  # noqa: F401 (fixture)
from tests.fakeupstream import FakeUpstream

pytestmark = pytest.mark.e2e

KINDS = {  # apis: the upstream model, its path, the field the routing call's schema goes in
    "chat": ("qwen", "/v1/chat/completions", lambda b: b["response_format"]["json_schema"]["schema"]),
    "messages": ("claude-haiku-4-5", "/v1/messages", lambda b: b["output_config"]["format"]["schema"]),
    "responses": ("gpt-5-mini", "/v1/responses", lambda b: b["text"]["format"]["schema"]),
}


@pytest.fixture(scope="module", params=list(KINDS))
def kind_gateway(request: pytest.FixtureRequest, fake: FakeUpstream,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, RunningGateway]]:  # fmt: skip
    kind = request.param
    model = KINDS[kind][0]
    gw = launch_cli(fake, tmp_path_factory.mktemp(f"geminiauto{kind}"), "",
                    upstream_yaml=f", apis: [{kind}], model_map: {{'gemini-*': {model}, 'auto-*': {model}}}")  # fmt: skip
    yield kind, gw
    gw.stop()


def test_gemini_cli_on_auto_routes_each_prompt_in_one_call(
    gemini: Path, kind_gateway: tuple[str, RunningGateway], upstream: FakeUpstream, tmp_path: Path  # noqa: F811
) -> None:
    kind, gw = kind_gateway
    _, path, schema_of = KINDS[kind]
    started = time.monotonic()
    done = run_gemini(gemini, gw, tmp_path, "say hi", model=None)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Hello from" in done.stdout
    assert [r.path for r in upstream.requests] == [path, path], f"{len(upstream.requests)} calls in {seconds:.1f} s"
    routing: dict[str, Any] = upstream.requests[0].json()
    answer: dict[str, Any] = upstream.requests[1].json()
    assert not routing.get("stream") and answer["stream"] is True
    assert schema_of(routing)["type"] == "object"
    assert seconds < 60, f"{seconds:.1f} s"
