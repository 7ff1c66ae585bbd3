"""Figures the hand-written pages state about the code, held to the code.

The tables that restate a mapping are generated (``python -m gateway.docs_gen``); what is left is
a figure in a sentence: a config default ("`timeouts.first_token_s` (default 300 s"), a
translator's threshold, the agent versions the suite pins. Each fact below reads the page's
words and the code's value and fails when they differ, so a changed default fails here until
the page says it too. A fact whose words are gone from the page fails as well: reword the page,
then the fact.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from gateway.config import GatewayConfig
from tests.docs.test_doc_examples import DOCS, YAML_BLOCKS, config_default, load_block
from tests.procs import ROOT


def stated(page: str, pattern: str) -> tuple[str, ...]:
    """The groups of ``pattern`` where it first matches the page (whitespace in the pattern
    matches a line break too, as prose wraps anywhere)."""
    text = (ROOT / page).read_text()
    found = re.search(pattern.replace(" ", r"\s+"), text, re.M)
    assert found is not None, f"{page} no longer says {pattern!r}: reword this fact with the page"
    return found.groups()


def number(text: str) -> float:
    return float(text.replace(",", ""))


def days(seconds: float) -> float:
    return seconds / 86400


MINIMAL = {"upstreams": [{"name": "u", "base_url": "http://127.0.0.1:9/v1"}]}


def default(path: str) -> Any:
    """A config key's default; one inside a section whose own default sets it
    (``retry.rate_limit.max_retries``) read from that section's default."""
    if "[]" in path:
        return config_default(path)
    value: Any = GatewayConfig.model_validate(MINIMAL)
    for part in path.split("."):
        value = getattr(value, part)
    return value


# --- config defaults stated in prose --------------------------------------------------------

# (page, pattern with one number, config key, how the page writes the default)
CONFIG_FACTS = [
    ("docs/streaming.md", r"`timeouts\.first_token_s` \(default ([\d,]+) s", "timeouts.first_token_s", float),
    ("docs/tool-outputs.md", r"`max_share` \(default ([\d,]+) % of the window", "tool_outputs.max_share",
     lambda v: v * 100),
    ("docs/pools.md", r"`pools\[\]\.stored_s`, by default as long as OpenAI keeps a stored response, ([\d,]+) days",
     "pools[].stored_s", days),
    ("docs/configuration.md", r"stored_s: \d+ +# which deployment .*?\(([\d,]+) days", "pools[].stored_s", days),
    ("docs/errors/loop-breaker.md", r"unrescued `context_overflow` ([\d,]+) s", "loop_breaker.window_s", float),
    ("docs/errors/loop-breaker.md", r"`budget` ([\d,]+) s \(short", "loop_breaker.budget_window_s", float),
    ("docs/errors/loop-breaker.md", r"`max_window_s` \(([\d,]+) s\)", "loop_breaker.max_window_s", float),
    ("docs/errors/loop-breaker.md", r"`turn_idle_s`, ([\d,]+) s", "loop_breaker.turn_idle_s", float),
    ("docs/errors/loop-breaker.md", r"`turn_max_s`, ([\d,]+) s", "loop_breaker.turn_max_s", float),
    ("docs/errors/retries.md", r"`circuit_breaker\.probe_interval_s` \(([\d,]+) s\)", "circuit_breaker.probe_interval_s",
     float),
    ("docs/errors/retries.md", r"`state\.timeout_ms` \(([\d,]+) ms\)", "state.timeout_ms", float),
    ("docs/keys.md", r"reserved at `accounting\.default_max_tokens` \(([\d,]+)\)", "accounting.default_max_tokens",
     float),
    ("docs/keys.md", r"on a Responses upstream it is reserved ([\d,]+)", "accounting.default_max_tokens", float),
    ("docs/errors/retries.md", r"`retry\.rate_limit\.max_retries` \((\d+)\)", "retry.rate_limit.max_retries", float),
    ("docs/errors/retries.md", r"`retry\.provider_unavailable\.max_retries` \((\d+)\)",
     "retry.provider_unavailable.max_retries", float),
    ("docs/agents/codex.md", r"`retry\.rate_limit\.max_retries` \((\d+)\)", "retry.rate_limit.max_retries", float),
    ("docs/agents/codex.md", r"before each of its (\d+) retries", "retry.rate_limit.max_retries", float),
    ("docs/agents/codex.md", r"`retry\.max_retry_after_s` \((\d+) s\)", "retry.max_retry_after_s", float),
    # Attempts: the first and each retry.
    ("docs/agents/codex.md", r"Codex ends the turn\. (\d+) upstream calls", "retry.rate_limit.max_retries",
     lambda v: v + 1),
    ("README.md", r"costs the provider the gateway's (\d+) attempts", "retry.provider_unavailable.max_retries",
     lambda v: v + 1),
    ("docs/errors/retries.md", r"a permanent 503 costs exactly the gateway's (\d+) upstream attempts",
     "retry.provider_unavailable.max_retries", lambda v: v + 1),
    ("docs/agents/sdks.md", r"provider the gateway's (\d+) attempts", "retry.provider_unavailable.max_retries",
     lambda v: v + 1),
    ("docs/operations/deploying.md", r"`server\.header_timeout_s` \((\d+) s;", "server.header_timeout_s", float),
    ("docs/operations/deploying.md", r"A handshake must end within `server\.header_timeout_s` \((\d+) s\)",
     "server.header_timeout_s", float),
    ("docs/operations/deploying.md", r"`server\.keepalive_s` \((\d+) s\)", "server.keepalive_s", float),
    ("docs/agents/codex.md", r"`server\.responses_websocket_max_age_s` \((\d+) minutes", "server.responses_websocket_max_age_s",
     lambda v: v / 60),
    ("docs/agents/openai-agents-sdk.md", r"`server\.responses_websocket_max_age_s`, (\d+) minutes",
     "server.responses_websocket_max_age_s", lambda v: v / 60),
    ("docs/agents/gemini-cli.md", r"the gateway waits `timeouts\.first_byte_s` \((\d+) s\)", "timeouts.first_byte_s", float),
    ("docs/agents/gemini-cli.md", r"the stock `timeouts\.idle_s` of (\d+) s", "timeouts.idle_s", float),
]  # fmt: skip


@pytest.mark.parametrize(("page", "pattern", "key", "as_written"), CONFIG_FACTS,
                         ids=[f"{p}:{k}" for p, _, k, _ in CONFIG_FACTS])  # fmt: skip
def test_a_default_stated_in_prose_is_the_config_models(page: str, pattern: str, key: str, as_written: Any) -> None:
    (value,) = stated(page, pattern)
    assert number(value) == pytest.approx(as_written(default(key))), (page, key)


def test_the_first_token_default_equals_the_first_byte_one_as_the_streaming_page_says() -> None:
    stated("docs/streaming.md", r"The default equals `first_byte_s` on purpose")
    assert default("timeouts.first_token_s") == default("timeouts.first_byte_s")


def test_the_probe_schedule_doubles_from_the_probe_interval_up_to_open_s() -> None:
    (schedule,) = stated("docs/errors/retries.md", r"up to `open_s` \(([\d, ]+) …")
    start, cap = default("circuit_breaker.probe_interval_s"), default("circuit_breaker.open_s")
    expected = [min(start * 2**i, cap) for i in range(len(schedule.split(",")))]
    assert [number(s) for s in schedule.split(",")] == expected
    (per_minute,) = stated("docs/errors/retries.md", r"at most one request per period \((\d+) a minute\)")
    assert number(per_minute) == 60 / start


# The keys the annotated example sets to show a value, not a default: names, credentials read
# from the environment, a pool, a key and a team to show their fields, Redis in place of memory.
ILLUSTRATIVE = {
    "server.client_keys", "upstreams[].name", "upstreams[].base_url", "upstreams[].api_key",
    "pools[].name", "pools[].models", "pools[].deployments",
    "keys[].name", "keys[].key", "keys[].team", "keys[].budget.usd", "keys[].budget.period",
    "teams[].name", "teams[].budget.usd",
    "tool_outputs.rules[].tool", "tool_outputs.rules[].project", "tool_outputs.rules[].oversized",
    "state.backend", "state.url", "loop_breaker.secret",
}  # fmt: skip


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump()
    return list(value) if isinstance(value, tuple) else value


def _leaves(node: Any, loaded: Any, default: Any, path: str, model: type[BaseModel]) -> list[tuple[str, Any, Any]]:
    """(key, its value as loaded from the page, its default) for every key the page sets."""
    from tests.docs.test_doc_examples import _model_of

    out = []
    for key, value in node.items():
        field = model.model_fields[key]
        sub, here = _model_of(field.annotation), f"{path}{key}"
        got = getattr(loaded, key)
        dflt = getattr(default, key) if default is not None else field.get_default(call_default_factory=True)
        if isinstance(value, dict) and sub is not None:
            out += _leaves(value, got, dflt if isinstance(dflt, BaseModel) else None, here + ".", sub)
        elif isinstance(value, list) and value and isinstance(value[0], dict) and sub is not None:
            out += _leaves(value[0], got[0], None, here + "[].", sub)  # the first item shows the fields
        else:
            out.append((here, _plain(got), _plain(dflt)))
    return out


def test_the_annotated_configuration_shows_each_default_where_it_shows_no_example() -> None:
    """docs/configuration.md's "Every section, annotated" reads as the defaults, with a few
    values set to show them; a default changed in the code must change there too."""
    (block,) = [b for b in YAML_BLOCKS if b.page == DOCS / "configuration.md" and "loop_breaker" in b.body]
    doc = yaml.safe_load(block.body)
    doc.pop("prices")  # a table of globs: no defaults
    leaves = _leaves(doc, load_block(block), GatewayConfig.model_validate(MINIMAL), "", GatewayConfig)
    assert len(leaves) > 100
    differ = {key: (shown, default) for key, shown, default in leaves if shown != default and key not in ILLUSTRATIVE}
    assert differ == {}, "the annotated example shows a value that is not the default (and not listed as an example)"
    assert {key for key, shown, default in leaves if key in ILLUSTRATIVE and shown == default} <= {"state.url"}


def test_the_annotated_configurations_comments_state_the_codes_figures() -> None:
    from gateway.tls import CHECK_EVERY_S

    (every,) = stated("docs/configuration.md", r"tls_cert_file: null +# .*?re-read on SIGHUP and every (\d+) s\)")
    assert number(every) == CHECK_EVERY_S


# --- figures of the code stated in prose ----------------------------------------------------


def test_the_models_list_cache_is_as_long_as_the_endpoints_page_says() -> None:
    from gateway.pipeline.models import CACHE_S

    (cached,) = stated("docs/endpoints.md", r"else OpenAI's; cached (\d+) s")
    assert number(cached) == CACHE_S


def test_the_websocket_pages_limits_are_the_codes() -> None:
    """docs/websocket.md's limits table, its settings' defaults and its id and heartbeat figures."""
    from gateway.apis.responses import warm_ids
    from gateway.apis.responses import websocket as ws
    from gateway.pipeline.relay import BODY_END_S
    from gateway.pipeline.websocket import HEARTBEAT_S

    page = "docs/websocket.md"
    (flight,) = stated(page, r"^\| turns in flight \| (\d+) per connection \|")
    (held,) = stated(page, r"^\| turns held, in flight and queued \| (\d+) per connection \|")
    (lanes,) = stated(page, r"^\| named `stream_id`s \| (\d+) in a connection's life \|")
    (bodies,) = stated(page, r"^\| what a connection remembers \| (\d+) × `server\.max_body_bytes` \|")
    (refusals,) = stated(page, r"^\| refusals waiting behind their lane's turns \| (\d+) per connection \|")
    (ping, pong) = stated(page, r"^\| heartbeat \| a ping every (\d+) s \| If a ping goes unanswered for (\d+) s")
    assert (int(flight), int(held), int(lanes)) == (ws.MAX_IN_FLIGHT, ws.MAX_IN_FLIGHT + ws.QUEUED_TURNS,
                                                    ws.MAX_NAMED_LANES)  # fmt: skip
    assert (int(bodies), int(refusals)) == (ws.REMEMBERED_BODIES, ws.QUEUED_REFUSALS)
    assert (number(ping), number(pong)) == (HEARTBEAT_S, HEARTBEAT_S / 2)  # aiohttp's pong wait
    (most,) = stated(page, r"At most (\d+) turns are in flight on one connection")
    assert int(most) == ws.MAX_IN_FLIGHT
    (after,) = stated(page, r"at most ([\d.]+) s after the event")
    assert number(after) == BODY_END_S
    (digits, tag) = stated(page, r"`resp_` and (\d+) hex digits.*? The last (\d+) digits")
    assert (int(digits), int(tag)) == (warm_ids._NONCE_HEX + warm_ids._TAG_HEX, warm_ids._TAG_HEX)
    server = GatewayConfig.model_fields["server"].annotation
    assert server is not None
    fields = server.model_fields
    (on,) = stated(page, r"^\| `server\.responses_websocket` \| `(\w+)` \|")
    assert on == str(fields["responses_websocket"].default).lower()
    (age, minutes) = stated(page, r"^\| `server\.responses_websocket_max_age_s` \| `(\d+)` \((\d+) minutes")
    assert number(age) == number(minutes) * 60 == fields["responses_websocket_max_age_s"].default
    (mib,) = stated(page, r"^\| `server\.max_body_bytes` \| (\d+) MiB \|")
    assert int(mib) * 1024 * 1024 == fields["max_body_bytes"].default
    (drain,) = stated(page, r"^\| `server\.drain_s` \| `(\d+)` s \|")
    assert number(drain) == fields["drain_s"].default


def test_a_flapping_replicas_hold_and_its_return_are_as_the_pages_say() -> None:
    from gateway.state import redis_store

    for page in ("docs/errors/retries.md", "docs/operations/logs.md"):
        (pings,) = stated(page, r"(\d+) PINGs in a row")
        assert int(pings) == redis_store._BACK_PINGS, page
    (most,) = stated("docs/errors/retries.md", r"times `recover_s`, at most (\d+) s")
    assert number(most) == redis_store._HOLD_MAX_S
    (most,) = stated("docs/operations/logs.md", r"doubling each time, at most (\d+) s")
    assert number(most) == redis_store._HOLD_MAX_S


def test_the_margins_and_estimates_the_translation_pages_quote() -> None:
    from gateway.policy.compress import SAFETY_MARGIN
    from gateway.policy.tokens import PDF_PAGE_TOKENS
    from gateway.translate.chat_messages.request import IMAGE_MAX, MIN_BUDGET

    (margin,) = stated("docs/translation/index.md", r"from the request's bytes, with a (\d+) % margin")
    assert number(margin) / 100 == SAFETY_MARGIN
    (margin,) = stated("docs/compression.md", r"minus a (\d+) % safety margin")
    assert number(margin) / 100 == SAFETY_MARGIN
    (page_tokens,) = stated("docs/translation/index.md", r"as a document counts ([\d,]+) tokens a page")
    assert number(page_tokens) == PDF_PAGE_TOKENS
    (least,) = stated("docs/translation/index.md", r"`reasoning_effort`, budgets ≥ ([\d,]+)\)")
    assert number(least) == MIN_BUDGET
    (mb, exact) = stated("docs/translation/chat_messages.md", r"Over \*\*(\d+) MB of base64\*\* \(([\d,]+) bytes")
    assert number(mb) * 1024 * 1024 == number(exact) == IMAGE_MAX


def test_the_budget_thresholds_of_messages_and_gemini_clients_are_the_translators() -> None:
    """Messages → chat and Gemini → chat turn a thinking budget into an effort at the same
    thresholds; both pages state them."""
    from gateway.translate.gemini_chat.request import _effort as gemini_effort
    from gateway.translate.messages_chat.request import _reasoning_effort

    for page in ("docs/translation/messages_chat.md", "docs/translation/gemini_chat.md"):
        low, medium = (int(number(n)) for n in stated(page, r"`low` under ([\d,]+), `medium` under ([\d,]+), else `high`"))
        for budget, effort in ((low - 1, "low"), (low, "medium"), (medium - 1, "medium"), (medium, "high")):
            assert _reasoning_effort({"type": "enabled", "budget_tokens": budget}, None) == effort, (page, budget)
            assert gemini_effort({"thinkingBudget": budget}, "chat") == effort, (page, budget)


def test_a_gemini_budget_bound_for_claude_is_the_least_effort_covering_it_as_the_page_says() -> None:
    from gateway.translate.chat_messages.request import EFFORT_BUDGET
    from gateway.translate.gemini_chat.request import _effort as gemini_effort

    (listed,) = stated("docs/translation/gemini_chat.md", r"budget is at least the one asked \(([^)]*)\)")
    pairs = re.findall(r"`(\w+)` ([\d,]+)", listed)
    assert {effort: int(number(n)) for effort, n in pairs} == EFFORT_BUDGET
    for asked in (500, 1024, 1500, 8192, 9000, 50000):  # the least effort covering it, else xhigh
        effort = gemini_effort({"thinkingBudget": asked}, "messages")
        covering = [e for e, tokens in EFFORT_BUDGET.items() if tokens >= asked] or ["xhigh"]
        assert effort == covering[0], asked


def test_a_gemini_budget_named_for_a_claude_with_budgets_goes_as_the_page_says() -> None:
    from gateway.translate.thinking_room import anthropic_named

    (examples,) = stated("docs/translation/gemini_chat.md",
                         r"no thinking: ((?:[\d,]+ under [\d,]+ → [\d,]+(?:, )?)+)\.")
    found = re.findall(r"([\d,]+) under ([\d,]+) → ([\d,]+)", examples)
    assert len(found) == 4
    for asked, limit, sent in found:
        assert anthropic_named(int(number(asked)), int(number(limit))) == number(sent), asked


def test_the_thinking_budget_rule_is_the_one_the_translation_page_states() -> None:
    from gateway.translate import thinking_room

    (least, share) = stated("docs/translation/index.md", r"leaves the answer\s+`max\(([\d,]+), limit ÷ (\d+)\)`")
    assert number(least) == thinking_room.ANSWER_MIN
    for limit in (2000, 4096, 21333, 64000):
        assert thinking_room.room(limit) == limit - max(int(number(least)), limit // int(share))
    (before, after) = stated("docs/translation/index.md",
                             r"to a Claude as ([\d,]+), one token for the answer; now ([\d,]+)")
    assert number(before) == 4095 and number(after) == thinking_room.anthropic_budget(16384, 4096)


# The families the pages name, and a model of each (the translation matches a name's family).
FAMILIES = {
    "Opus, Sonnet and Haiku 5.x": ("claude-opus-5", "claude-sonnet-5-5", "claude-haiku-5-5"),
    "Fable and Mythos": ("claude-fable-5-1", "claude-mythos-5"),
    "Sonnet and Haiku 4": ("claude-sonnet-4-5", "claude-haiku-4-5"),
    "Sonnet 4": ("claude-sonnet-4-5",),
    "Opus 4": ("claude-opus-4-1",),
}


def test_the_default_output_the_keys_and_agent_pages_quote_is_the_translations() -> None:
    from gateway.translate.chat_messages.request import default_max_tokens

    keys, buffered = stated("docs/keys.md", r"translation's default, ([^()]*) \(at most ([\d,]+) for a request not streamed\)")
    (codex,) = stated("docs/agents/codex.md", r"translation's default output \(([^)]*)\)")
    for quoted in (keys, codex):
        said = re.findall(r"([\d,]+) (?:tokens )?for (?:Claude )?(.*?)(?=, [\d,]+ |$)", " ".join(quoted.split()))
        assert len(said) >= 2, quoted
        for tokens, families in said:
            for family in re.split(r", (?=[A-Z])(?!Sonnet and)", families):
                assert family in FAMILIES, f"name a model of {family!r} in FAMILIES"
                for model in FAMILIES[family]:
                    assert default_max_tokens(model, stream=True) == number(tokens), model
    assert default_max_tokens("claude-opus-5-5", stream=False) == number(buffered)


def test_the_responses_incomplete_reasons_are_the_translators() -> None:
    from gateway.translate.chat_responses.answer import _INCOMPLETE as FROM_RESPONSES
    from gateway.translate.responses_chat.answer import _INCOMPLETE as TO_RESPONSES

    rows = re.findall(r"^\| `finish_reason` `(\w+)` \| `status: incomplete`, `incomplete_details: \{reason: (\w+)\}`",
                      (DOCS / "translation/responses_chat.md").read_text(), re.M)  # fmt: skip
    assert dict(rows) == TO_RESPONSES
    (said,) = stated("docs/translation/chat_responses.md", r"\| `incomplete` ((?:for `\w+` → `\w+`(?:, )?)+);")
    assert dict(re.findall(r"for `(\w+)` → `(\w+)`", said)) == FROM_RESPONSES


def test_the_least_output_budget_sent_to_responses_is_the_translators() -> None:
    from gateway.apis.output_budget import RESPONSES_MIN_OUTPUT as MIN_OUTPUT_TOKENS

    least, more = stated("docs/translation/chat_responses.md", r"raised to (\d+) when below: .*? at most (\d+) tokens more")
    assert (int(least), int(more)) == (MIN_OUTPUT_TOKENS, MIN_OUTPUT_TOKENS - 1)


def test_a_chat_finish_reason_becomes_the_stop_reason_the_messages_page_says() -> None:
    from gateway.translate.messages_chat.answer import stop_reason

    row = stated("docs/translation/messages_chat.md", r"^\| `finish_reason` ([^|]*) \| ([^|]*) \|")
    finishes = [re.findall(r"`(\w+)`", part) for part in row[0].split(" / ")]
    reasons = re.findall(r"`(\w+)`", row[1])
    assert len(finishes) == len(reasons) == 4
    for names, reason in zip(finishes, reasons, strict=True):
        for finish in names:
            assert stop_reason(finish, tools=finish in ("tool_calls", "function_call"), refused=False,
                               matched=None) == reason, finish  # fmt: skip


# --- the agent versions the suite pins ------------------------------------------------------

PINS = dict(re.findall(r'^([A-Z_]+_VERSION)="\$\{\1:-([^}]+)\}"', (ROOT / "scripts/test-deps.sh").read_text(), re.M))
LINKED = r"(?:\]\([^)]*\))?"  # a name written as a link: "[Codex](../agents/codex.md) 0.171"
# The pin, and how the pages name the client before its version.
AGENTS = {
    "CLAUDE_CODE_VERSION": rf"Claude Code{LINKED} (\d+\.\d+\.\d+)",
    "CODEX_VERSION": rf"Codex{LINKED} (?:\(measured, )?(\d+\.\d+(?:\.\d+)?)",
    "OPENCODE_VERSION": rf"opencode{LINKED} (\d+\.\d+\.\d+)",
    "GEMINI_CLI_VERSION": rf"Gemini CLI{LINKED} (\d+\.\d+(?:\.\d+)?)",
    "AI_SDK_VERSION": r"`ai` (\d+\.\d+\.\d+)",
    "AI_SDK_COMPAT_VERSION": r"`@ai-sdk/openai-compatible` (\d+\.\d+\.\d+)",
}


def _version(text: str) -> tuple[int, ...]:
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


@pytest.mark.parametrize("pin", sorted(AGENTS))
def test_the_newest_agent_version_the_docs_name_is_the_one_the_suite_pins(pin: str) -> None:
    """Pages say what was measured with which version; older ones stay as history, but the
    newest a page names must be what ``scripts/test-deps.sh`` installs, so that a bumped pin
    is a page to re-measure and a page cannot claim a version the suite does not run."""
    named = {
        (page.relative_to(ROOT).as_posix(), v)
        for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
        if "reference" not in page.parts
        for v in re.findall(AGENTS[pin], page.read_text())
    }  # fmt: skip
    assert named, pin
    newest = max(_version(v) for _, v in named)
    assert newest == _version(PINS[pin]), sorted(named)


# --- the pause before a broken Gemini stream's bare error ------------------------------------


@pytest.mark.parametrize(("page", "pattern"), [
    ("docs/streaming.md", r"in a write of its own ([\d.]+) s later, the same object bare"),
    ("docs/translation/gemini_chat.md", r"in a write of its own, ([\d.]+) s later \|"),
    ("docs/agents/gemini-cli.md", r"in a write of its own ([\d.]+) s later, the same error as a bare JSON object"),
])  # fmt: skip
def test_the_pause_before_the_bare_gemini_error_is_the_relays(page: str, pattern: str) -> None:
    from gateway.pipeline.relay import APART_S

    (pause,) = stated(page, pattern)
    assert number(pause) == APART_S, page


# --- the quick start's fake upstream and its config -------------------------------------------


def _fake_help() -> str:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "gateway.fake", "--help"], capture_output=True, text=True,
                          check=True, cwd=ROOT).stdout  # fmt: skip


def test_the_quick_starts_fake_figures_are_the_fakes_and_fake_yamls() -> None:
    """What the page promises a reader who runs ``make run CONFIG=config/examples/fake.yaml``."""
    from gateway.config import load_config

    page = "docs/quick-start.md"
    fake = load_config(ROOT / "config/examples/fake.yaml", env={})
    shipped = load_config(ROOT / "config/gateway.yaml", env={})
    helped = " ".join(_fake_help().split())
    (wait,) = re.search(r"--wait-s WAIT_S the wait a 429 asks for \(default: (\d+)\)", helped).groups()  # type: ignore[union-attr]
    (window,) = re.search(r"--context-window CONTEXT_WINDOW overflow: the limit in estimated tokens \(default: "
                          r"(\d+)\)", helped).groups()  # type: ignore[union-attr]  # fmt: skip
    (addr,) = stated(page, r"`make run` listens on `([\d.:]+)`")
    assert addr == f"{shipped.server.host}:{shipped.server.port}"
    (base,) = stated(page, r"Its default, `(http://[^`]+)`, is where the fake upstream below listens")
    assert base == shipped.upstreams[0].base_url == "http://127.0.0.1:9000/v1"  # the fake's --port default
    (said_wait, waited) = stated(page, r"`retry-after: (\d+)` \(`--wait-s`\), then a normal answer \| waits (\d+) s")
    assert number(said_wait) == number(waited) == number(wait)
    (after,) = stated(page, r"after (\d+) such requests")
    assert number(after) == fake.circuit_breaker.failure_threshold
    (models,) = stated(page, r"as `fake\.yaml` sets `models_to_open: (\d+)`")
    assert number(models) == fake.circuit_breaker.models_to_open
    (open_s,) = stated(page, r"`circuit_breaker\.open_s` \((\d+) s here")
    assert number(open_s) == fake.circuit_breaker.open_s
    (over,) = stated(page, r"a request over ([\d,]+) estimated tokens \(`--context-window`\)")
    (fake_window,) = stated(page, r"`fake\.yaml`'s ([\d,]+)-token window")
    assert number(over) == number(window) == number(fake_window) == fake.upstreams[0].context_window
    (idle,) = stated(page, r"ends it after `timeouts\.idle_s` \((\d+) s here\)")
    assert number(idle) == fake.timeouts.idle_s


# --- prices and budgets the agent pages quote ----------------------------------------------


def test_the_models_the_agent_pages_call_priced_are_and_unpriced_are_not() -> None:
    from gateway.keys.prices import PriceTable

    table = PriceTable()
    (models,) = stated("docs/agents/claude-code.md", r"Claude Code uses its main model\s+\((claude-[\w-]+) by default\)")
    (aliases,) = stated("docs/agents/claude-code.md", r"its aliases' models: ([^.]*)\. The shipped table prices all")
    claude = {models, *re.findall(r"claude-[\w-]+\d", aliases)}
    assert len(claude) == 3 and all(table.price_for(m) is not None for m in claude), claude
    (codex,) = stated("docs/agents/codex.md", r"Codex with no model set uses ([\w.-]+), which the\s+shipped table prices")
    assert table.price_for(codex) is not None
    (routing, routed, pro) = stated("docs/agents/gemini-cli.md",
                                    r"routing call to\s+([\w.-]+), then routes to ([\w.-]+) or ([\w.-]+)\. Only the "
                                    r"last is\s+priced")  # fmt: skip
    assert table.price_for(routing) is None and table.price_for(routed) is None and table.price_for(pro) is not None
    (search,) = stated("docs/agents/gemini-cli.md", r"tool posts to ([\w.-]+), whatever model the session uses: that one "
                                                    r"is priced")  # fmt: skip
    assert table.price_for(search) is not None


async def test_the_codex_budget_arithmetic_is_what_the_ledger_admits() -> None:
    """docs/agents/codex.md: each Codex request (no max_output_tokens) on an Anthropic upstream
    holds the translation's default output at the model's output price; a small budget admits
    that many at once, and the next is refused ``key_budget_held``."""
    import time

    from gateway.keys.ledger import Accounts, LimitHit
    from gateway.keys.prices import PriceTable
    from gateway.keys.registry import Budget, KeySpec
    from gateway.state.memory import MemoryStore
    from gateway.translate.chat_messages.request import default_max_tokens

    page = "docs/agents/codex.md"
    (sonnet_each, per_million, usd, sonnet_n, opus_n, opus_each) = stated(
        page, r"each Codex request on claude-sonnet-5-5 holds \$([\d.]+) of output \(\$(\d+) per million\), so a "
              r"\$(\d+)/day key\s+runs (\d+) at once [^$]*? (\d+) on claude-opus-5-5\s+\(\$([\d.]+) each\)")  # fmt: skip
    table = PriceTable()
    for model, each, n in (("claude-sonnet-5-5", sonnet_each, sonnet_n), ("claude-opus-5-5", opus_each, opus_n)):
        price = table.price_for(model)
        assert price is not None
        output = default_max_tokens(model, stream=True)
        assert number(each) == pytest.approx(output * price.output / 1e6), model
        if model == "claude-sonnet-5-5":
            assert number(per_million) == price.output
        acc = Accounts(MemoryStore(time.time), table, time.time)
        key = KeySpec(f"small-{model}", budget=Budget(number(usd), "day"))
        held = [await acc.admit(key, model, 10, output) for _ in range(int(number(n)) + 1)]
        assert not any(isinstance(r, LimitHit) for r in held[:-1]), model
        assert isinstance(held[-1], LimitHit) and held[-1].kind == "budget_held", model


# --- what a reload leaves to a restart --------------------------------------------------------


def test_the_fields_the_lifecycle_page_says_need_a_restart_are_the_ones_a_reload_keeps() -> None:
    """The page's list is what an operator reads before changing a field and sending SIGHUP;
    ``server.event_loop`` was missing from both (a reload logged it as applied) and the TLS
    paths from the page."""
    from gateway.reload.restart_only import RESTART_ONLY

    (server, rest) = stated("docs/operations/lifecycle.md",
                            r"(`server\.host`[^:]*?), (`state:` and `loop_breaker\.[^.]*?) need a restart")  # fmt: skip
    said = {f"server.{n}" for n in re.findall(r"`(?:server\.)?([a-z_]+)`", server)}
    said |= {"state:"} | {f"loop_breaker.{n}" for n in re.findall(r"`(?:loop_breaker\.)?([a-z_]+)`", rest)}
    code = {f"{section}.{f}" if fields else f"{section}:" for section, fields in RESTART_ONLY.items()
            for f in (fields or ("",))}  # fmt: skip
    assert said == code


# --- a server's wait, held or handed back ------------------------------------------------------


def test_a_server_wait_over_max_retry_after_s_is_handed_back_not_backed_off_as_the_retries_page_says() -> None:
    """The table read "when at most `retry.max_retry_after_s`; else backoff": a reader took a
    60 s retry-after (30 s the default) to be backed off and retried; it is answered at once
    (1 call, x-should-retry: false), as the prose below the table says."""
    from gateway.config import RetryConfig
    from gateway.errors import Classification, ErrorType
    from gateway.policy.retry import RetryPlan, StopReason

    stated("docs/errors/retries.md", r"held when at most `retry\.max_retry_after_s` \(a longer one is not retried: "
                                     r"below\); none stated: backoff")  # fmt: skip
    stated("docs/errors/retries.md", r"A server-requested wait longer than `max_retry_after_s` is not\s+held: the "
                                     r"error goes back at once")  # fmt: skip
    cfg = RetryConfig()
    for wait, expected in ((cfg.max_retry_after_s + 30, None), (cfg.max_retry_after_s, cfg.max_retry_after_s)):
        plan = RetryPlan(cfg, now=lambda: 0.0, rand=lambda: 0.5, may_retry=lambda: True)
        assert plan.next_wait(Classification.of(ErrorType.RATE_LIMIT, retry_after_s=wait)) == expected
        assert plan.stopped == (StopReason.WAIT_TOO_LONG if expected is None else None)
    plan = RetryPlan(cfg, now=lambda: 0.0, rand=lambda: 0.5, may_retry=lambda: True)
    assert plan.next_wait(Classification.of(ErrorType.RATE_LIMIT)) == 0.75 * cfg.rate_limit.base_delay_s


# --- the job the down alert watches ------------------------------------------------------------


def test_the_down_alerts_job_is_the_one_the_alerts_page_and_the_shipped_scrape_config_name() -> None:
    """``up{job="llm-gateway"}`` matches nothing under another job name (a Kubernetes pod
    scrape's, say): the page says which, and the shipped scrape config uses it."""
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    [down] = [r for g in rules["groups"] for r in g["rules"] if r["alert"] == "LLMGatewayDown"]
    (job,) = re.findall(r'job="([^"]+)"', down["expr"])
    (said,) = stated("docs/operations/alerts.md", r'it must be scraped as `job="([^"]+)"`')
    scrape = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    assert said == job and job in [c["job_name"] for c in scrape["scrape_configs"]]


# --- the headers every response carries ----------------------------------------------------------


def test_x_llm_upstream_is_on_a_routed_answer_and_not_on_a_refusal_before_routing() -> None:
    """The error contract said every response carries ``x-llm-upstream``; a wrong key's 401
    (no upstream chosen yet) carries none, a circuit's refusal names the upstream refusing."""
    from aiohttp import web

    from gateway.pipeline.outcome import RequestState
    from gateway.pipeline.stamp import stamp

    stated("docs/errors/index.md", r"once a request was routed, `x-llm-upstream` \(the upstream that answered; not "
                                   r"on the gateway's refusals before routing")  # fmt: skip
    refused, routed = RequestState("r1", 0.0), RequestState("r2", 0.0)
    routed.upstream = "primary"
    for state, expected in ((refused, None), (routed, "primary")):
        response = web.Response(status=401 if expected is None else 503)
        stamp(state, response, None)
        assert response.headers.get("x-llm-upstream") == expected
        assert "x-request-id" in response.headers and "x-llm-attempts" in response.headers


# --- figures of the code's own constants, stated in prose ---------------------------------------


def _param_default(func: Any, name: str) -> Any:
    import inspect

    return inspect.signature(func).parameters[name].default


def _code_value(name: str) -> float:
    """The code's figure for one fact below, as the page words it."""
    from gateway import logs
    from gateway.pipeline import relay
    from gateway.policy import clients, compress, compress_plan, head_cuts, retry
    from gateway.redaction import MIN_KEY
    from gateway.sse import MAX_EVENT_BYTES
    from gateway.workers import metrics, supervisor

    values: dict[str, Any] = {
        "gemini_cli_head_s": clients.client_head_s({"user-agent": "GeminiCLI/0.61.0/gemini-2.5-flash"}),
        "head_floor_s": retry.HEAD_FLOOR_S,
        "head_hold_s": head_cuts.HOLD_S,
        "head_max_hold_min": head_cuts.MAX_HOLD_S / 60,
        "body_end_s": relay.BODY_END_S,
        "event_mib": MAX_EVENT_BYTES / 2**20,
        "restart_delay_s": supervisor.RESTART_DELAY_S,
        "early_exit_s": supervisor.EARLY_EXIT_S,
        "early_exits": supervisor.EARLY_EXITS_TO_GIVE_UP,
        "restart_max_s": supervisor.RETRY_MAX_S,
        "scrape_s": _param_default(metrics.gather, "timeout_s"),
        "flush_ms": _param_default(logs.LineWriter.__init__, "flush_s") * 1000,
        "max_lines": _param_default(logs.LineWriter.__init__, "max_lines"),
        "exit_drain_s": _param_default(logs.LineWriter.close, "timeout_s"),
        "shutdown_retry_after": relay.SHUTDOWN_RETRY_S,
        "lb_entries": default("loop_breaker.max_entries"),
        "lb_mib": default("loop_breaker.max_total_bytes") / 2**20,
        "min_key": MIN_KEY,
        "min_completion": compress.MIN_COMPLETION_TOKENS,
        "margin_pct": compress.SAFETY_MARGIN * 100,
        "oversized_share": compress_plan.OVERSIZED_SHARE,
    }
    return float(values[name])


WORDS = {"three": 3, "eight": 8, "a quarter": 0.25, "a second": 1}

# (page, pattern with one figure, the code's figure it states)
CODE_FACTS = [
    ("docs/streaming.md", r"at most half of what is left of (\d+) s from the request's arrival", "gemini_cli_head_s"),
    ("docs/streaming.md", r"no try starts with under (\d+) s left", "head_floor_s"),
    ("docs/streaming.md", r"for (\d+) s after an upstream sent no head", "head_hold_s"),
    ("docs/streaming.md", r"doubles it, up to (\d+) minutes", "head_max_hold_min"),
    ("docs/streaming.md", r"forgotten (\d+) minutes after its\s+hold ended", "head_max_hold_min"),
    ("docs/streaming.md", r"the gateway reads on for ([\d.]+) s at most", "body_end_s"),
    ("docs/errors/index.md", r"an event over (\d+) MiB", "event_mib"),
    ("docs/operations/workers.md", r"restarted on its socket after (a second)", "restart_delay_s"),
    ("docs/operations/workers.md", r"(Three) deaths within \d+ s of starting", "early_exits"),
    ("docs/operations/workers.md", r"deaths within (\d+) s of starting", "early_exit_s"),
    ("docs/operations/workers.md", r"2, 4, 8 … \(at most (\d+)\) seconds", "restart_max_s"),
    ("docs/operations/workers.md", r"A worker that does not answer within (\d+) s", "scrape_s"),
    ("docs/operations/logs.md", r"background thread within\s+(\d+) ms", "flush_ms"),
    ("docs/operations/logs.md", r"past ([\d,]+) pending lines", "max_lines"),
    ("docs/operations/logs.md", r"still pending get (\d+) s\s+to drain", "exit_drain_s"),
    ("docs/operations/lifecycle.md", r"with `retry-after: (\d+)`", "shutdown_retry_after"),
    ("docs/errors/loop-breaker.md", r"Bounded \(([\d,]+) answers", "lb_entries"),
    ("docs/errors/loop-breaker.md", r"Bounded \([\d,]+ answers, (\d+) MB\)", "lb_mib"),
    ("docs/security.md", r"Keys shorter than (eight)\s+characters", "min_key"),
    ("docs/security.md", r"masked as its first (eight) or more characters", "min_key"),
    ("docs/compression.md", r"the completion budget is lowered instead \(never below (\d+)\)", "min_completion"),
    ("docs/compression.md", r"minus a (\d+) % safety margin", "margin_pct"),
    ("docs/compression.md", r"an oversized tool output \(over (a quarter) of the\s+room\)", "oversized_share"),
]  # fmt: skip


@pytest.mark.parametrize(("page", "pattern", "name"), CODE_FACTS, ids=[f"{p}:{n}" for p, _, n in CODE_FACTS])
def test_a_figure_of_the_code_stated_in_prose_is_the_codes(page: str, pattern: str, name: str) -> None:
    (value,) = stated(page, pattern)
    said = WORDS[value.lower()] if value.lower() in WORDS else number(value)
    assert said == pytest.approx(_code_value(name)), (page, name)


# --- metric names and labels the pages name ------------------------------------------------------


def test_every_metric_and_label_a_page_names_is_in_the_generated_metrics_reference() -> None:
    """A page's ``llm_gateway_x{label}`` is what a reader types into a query: each name (a
    family ``llm_gateway_budget_*`` as a prefix of one) and each label must be exposed."""
    ref = (DOCS / "reference" / "metrics.md").read_text()
    known = {m[1]: {lab.strip("` ") for lab in m[2].split(",") if lab.strip()}
             for m in re.finditer(r"^\| `(llm_gateway_[a-z_]+)` \| \w+ \| ([^|]*)\|", ref, re.M)}  # fmt: skip
    assert len(known) > 30
    wrong = []
    for page in [*DOCS.rglob("*.md"), ROOT / "README.md"]:
        for m in re.finditer(r"(llm_gateway_[a-z_]+)(\*)?(?:\{([^}]*)\})?", page.read_text()):
            name = re.sub(r"_(bucket|count|sum|created)$", "", m[1])
            if m[2]:
                if not any(k.startswith(name) for k in known):
                    wrong.append((page.name, m[0]))
                continue
            labels = {re.split(r"[=!~]", lab.strip())[0] for lab in (m[3] or "").split(",")} - {""}
            if name not in known or labels - known[name]:
                wrong.append((page.name, m[0]))
    assert wrong == []


# --- the alerts page's table and dashboard --------------------------------------------------------


def test_the_alerts_page_lists_each_shipped_rule_once_and_counts_the_dashboards_metrics() -> None:
    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    shipped = [r["alert"] for g in rules["groups"] for r in g["rules"]]
    page = (DOCS / "operations" / "alerts.md").read_text()
    assert re.findall(r"^\| `(LLMGateway\w+)` \|", page, re.M) == shipped
    dashboard = (ROOT / "deploy/grafana/dashboards/llm-gateway.json").read_text()
    used = {re.sub(r"_(bucket|count|sum)$", "", m) for m in re.findall(r"llm_gateway_[a-z_]+", dashboard)}
    (said,) = stated("docs/operations/alerts.md", r"spend per key \((\d+) metrics\)")
    assert number(said) == len(used)


# --- the files the pages point at ---------------------------------------------------------------


def test_every_repository_path_a_page_names_exists() -> None:
    """``tests/e2e/test_retry_loops.py``, ``bench/fallback.py``: a reader told a claim is tested
    there opens that file (a test renamed away left the claim pointing at nothing)."""
    named = {(page.relative_to(ROOT).as_posix(), m.rstrip("."))
             for page in [*DOCS.rglob("*.md"), ROOT / "README.md"]
             for m in re.findall(r"`((?:tests|bench|gateway|deploy|config|scripts)/[A-Za-z0-9_./-]+)`", page.read_text())}  # fmt: skip
    assert len(named) > 40
    assert [n for n in sorted(named) if not (ROOT / n[1]).exists()] == []
