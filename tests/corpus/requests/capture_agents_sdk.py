"""Capture what the OpenAI Agents SDK really sends to a Responses endpoint.

A loopback logger (stdlib only) saves every ``POST /v1/responses`` body and answers with a
buffered Responses object: first a ``get_weather`` function call, then text. Run it with an
interpreter that has ``openai-agents`` installed (kept out of the project's .venv):

    python3 -m venv /tmp/agents-venv && /tmp/agents-venv/bin/pip install openai-agents
    /tmp/agents-venv/bin/python tests/corpus/requests/capture_agents_sdk.py OUT_DIR
    /tmp/agents-venv/bin/python tests/corpus/requests/capture_agents_sdk.py OUT_DIR forecast
    /tmp/agents-venv/bin/python tests/corpus/requests/capture_agents_sdk.py OUT_DIR settings

The agent is the SDK's documented shape: ``Agent(name, instructions, tools=[function_tool])``
run with ``Runner.run_sync``; tracing is disabled so nothing leaves loopback. ``forecast``: a
tool whose arguments are a nested model and an enum, and an ``output_type`` (a pydantic model),
the SDK's strict schemas for both; the call answered carries arguments in that schema, and
the final answer is JSON in the output type's. ``settings``: the weather agent with
``ModelSettings(reasoning=Reasoning(effort="high"), max_tokens=4096)``, a reasoning effort
beside an output limit (the SDK writes them as ``reasoning.effort`` and ``max_output_tokens``).
"""

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib.metadata import version
from pathlib import Path
from typing import Any

SEEN: list[dict[str, Any]] = []


FORECAST = "forecast" in sys.argv[2:]
SETTINGS = "settings" in sys.argv[2:]


def _response(n: int) -> dict[str, Any]:
    if n == 0:
        item: dict[str, Any] = {
            "id": "fc_capture1",
            "type": "function_call",
            "status": "completed",
            "call_id": "call_capture1",
            "name": "forecast" if FORECAST else "get_weather",
            "arguments": '{"place":{"city":"Paris","country":null},"unit":"c"}' if FORECAST else '{"city":"Paris"}',
        }
    else:
        item = {
            "id": "msg_capture2",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "annotations": [],
                         "text": '{"city":"Paris","sunny":true}' if FORECAST else "It is sunny in Paris."}],
        }
    return {
        "id": f"resp_capture{n}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": "gpt-5",
        "output": [item],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 50,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 55,
        },
    }


class _Logger(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        headers = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}
        SEEN.append({"path": self.path, "headers": headers, "body": json.loads(body)})
        out = json.dumps(_response(min(len(SEEN) - 1, 1))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


def main(out_dir: Path) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Logger)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ.update(
        OPENAI_BASE_URL=f"http://127.0.0.1:{server.server_address[1]}/v1",
        OPENAI_API_KEY="dummy",
        OPENAI_AGENTS_DISABLE_TRACING="1",
    )
    from agents import Agent, ModelSettings, Runner, function_tool
    from openai.types.shared import Reasoning

    if FORECAST:
        agent = _forecaster()
        result = Runner.run_sync(agent, "Forecast Paris, in the schema.")
        _save(server, out_dir, result, "forecast-")
        return

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"18C and sunny in {city}"

    # Without settings the SDK's own defaults for gpt-5 stay (reasoning low, verbosity low).
    settings = {"model_settings": ModelSettings(reasoning=Reasoning(effort="high"), max_tokens=4096)} if SETTINGS \
        else {}  # fmt: skip
    agent = Agent(
        name="Weather",
        instructions="Answer weather questions with the tool.",
        model="gpt-5",
        tools=[get_weather],
        **settings,
    )
    result = Runner.run_sync(agent, "What's the weather in Paris?")
    _save(server, out_dir, result, "settings-" if SETTINGS else "")


def _forecaster() -> Any:
    from enum import StrEnum

    from agents import Agent, function_tool
    from pydantic import BaseModel

    # Real annotations (no ``from __future__ import annotations`` here): the SDK resolves a
    # tool's hints when it builds the schema, and these classes are local.
    class Unit(StrEnum):
        c = "c"
        f = "f"

    class Place(BaseModel):
        city: str
        country: str | None

    class Answer(BaseModel):
        city: str
        sunny: bool

    @function_tool
    def forecast(place: Place, unit: Unit) -> str:
        """Forecast for a place."""
        return f"18 {unit.value} and sunny in {place.city}"

    return Agent(name="Forecaster", instructions="Use the tool, then answer in the schema.", model="gpt-5",
                 tools=[forecast], output_type=Answer)  # fmt: skip


def _save(server: HTTPServer, out_dir: Path, result: Any, prefix: str = "") -> None:
    server.shutdown()
    print("final:", result.final_output, file=sys.stderr)
    out_dir.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(SEEN):
        doc = {"version": f"openai-agents {version('openai-agents')}, openai {version('openai')}", **s}
        (out_dir / f"raw-agents-{prefix}{i}.json").write_text(json.dumps(doc, indent=1))
    print(len(SEEN), "requests saved", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
