"""What the OpenAI Agents SDK does in tests/e2e/test_agents_sdk.py, run by the interpreter that
has it (``AGENTS_PYTHON``, apart from .venv): ``python agents_driver.py BASE CASE...``, each
CASE ``name:model:run|stream|ws``, prints one JSON object per case.

Stock settings: ``AsyncOpenAI(base_url=BASE + "/v1", api_key="dummy")`` with its own retries,
``OpenAIResponsesModel`` (the SDK's default model class), or for ``ws`` the model class
``set_default_openai_responses_transport("websocket")`` picks, ``OpenAIResponsesWSModel`` (the
Responses API's WebSocket mode); tracing off (it would post to api.openai.com). Each agent's instructions begin with ``[TAG]``, the case's own, so the test
finds the upstream requests each case made.
"""

import asyncio
import json
import sys
from typing import Any

from agents import (
    Agent,
    ModelSettings,
    OpenAIResponsesModel,
    OpenAIResponsesWSModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import OpenAIConversationsSession
from openai import APIStatusError, AsyncOpenAI
from openai.types.shared import Reasoning
from pydantic import BaseModel

set_tracing_disabled(True)
client = AsyncOpenAI(base_url=sys.argv[1] + "/v1", api_key="dummy")


@function_tool
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return f"sunny in {city}"


@function_tool
def get_time(city: str) -> str:
    """Get the local time in a city."""
    return f"12:00 in {city}"


class Answer(BaseModel):
    city: str
    sunny: bool


async def run(agent: Agent, given: Any, streamed: bool, **options: Any) -> Any:
    if not streamed:
        return await Runner.run(agent, given, **options)
    result = Runner.run_streamed(agent, given, **options)
    async for _ in result.stream_events():
        pass
    return result


def agent(tag: str, model: str, **options: Any) -> Agent:
    kind = OpenAIResponsesWSModel if tag.endswith("/ws") else OpenAIResponsesModel
    return Agent(name=options.pop("name", "Assistant"), instructions=f"[{tag}] " + options.pop("says", "Be brief."),
                 model=kind(model=model, openai_client=client), **options)


async def case(name: str, model: str, streamed: bool, tag: str) -> dict[str, Any]:
    if name == "text":
        r = await run(agent(tag, model), "Say hello", streamed)
    elif name in ("tool", "parallel"):
        tools = [get_weather, get_time] if name == "parallel" else [get_weather]
        r = await run(agent(tag, model + "-tool", tools=tools,
                            model_settings=ModelSettings(parallel_tool_calls=True)), "Weather in Paris?", streamed)
    elif name == "output_type":
        r = await run(agent(tag, model + "-tool", tools=[get_weather], output_type=Answer,
                            says="Use the tool, then answer in the schema."), "Weather in Paris?", streamed)
    elif name == "handoff":
        spanish = agent(tag, model, name="Spanish", says="Answer in Spanish.")
        r = await run(agent(tag, model + "-tool", name="Triage", handoffs=[spanish], says="Hand off."), "Hola", streamed)
    elif name == "settings":
        settings = ModelSettings(reasoning=Reasoning(effort="low"), max_tokens=2048, tool_choice="required")
        r = await run(agent(tag, model + "-tool", tools=[get_weather], model_settings=settings), "Weather?", streamed)
    elif name == "previous":
        first = await run(agent(tag, model), "My name is Ann.", streamed)
        r = await run(agent(tag, model), "What is my name?", streamed, previous_response_id=first.last_response_id)
    elif name == "session":
        session = OpenAIConversationsSession(openai_client=client)
        await run(agent(tag, model + "-tool", tools=[get_weather]), "Weather in Paris?", streamed, session=session)
        r = await run(agent(tag, model + "-tool", tools=[get_weather]), "And Rome?", streamed, session=session)
        held = await session.get_items()  # listed back from the server
        return {"output": r.final_output, "session_items": [i.get("type") or i.get("role") for i in held]}
    else:  # a fake scenario by name: 429, cut
        r = await run(agent(tag, f"{model}-{name}"), "Say hello", streamed)
    output = r.final_output
    return {"output": output.model_dump() if isinstance(output, BaseModel) else output,
            "items": [i.type for i in r.new_items], "last_agent": r.last_agent.name,
            "last_response_id": r.last_response_id}


async def main() -> None:
    for spec in sys.argv[2:]:
        name, model, mode = spec.split(":")
        tag = f"{name}/{model}/{mode}"
        out: dict[str, Any] = {"case": spec, "tag": tag}
        try:
            out.update(await asyncio.wait_for(case(name, model, mode == "stream", tag), 60))
        except Exception as e:  # what the SDK raised is what the test reads
            out["error"] = {"type": type(e).__name__, "message": str(e)[:2000],
                            "status": e.status_code if isinstance(e, APIStatusError) else None}
        print(json.dumps(out), flush=True)


asyncio.run(main())
