"""The pure per-tool output policy: which rule, which limit, what a projection keeps, when it
falls back to the raw output, and the config that builds it."""

from __future__ import annotations

import json
import re

import jmespath
import pytest

from gateway.config import ConfigError, parse_config
from gateway.policy.tool_outputs import (
    Stage,
    Tally,
    ToolOutputPolicy,
    ToolRule,
    handle,
    oversized_result,
    project,
)
from gateway.services import tool_output_policy

MINIMAL = "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1', context_window: 100000}]\n"
UPFRONT = Stage("upfront", project=True, cut=True, exclude=True, window=100_000)
DOC = json.dumps({"status": "ok", "id": 7, "items": [{"name": "b", "n": 2}, {"name": "a", "n": 1}]})


@pytest.mark.parametrize(("content", "expression", "expected"), [
    (DOC, "{status: status, id: id}", '{"status":"ok","id":7}'),
    (DOC, "items[].name", '["b","a"]'),
    (DOC, "sort_by(items, &name)[0]", '{"name":"a","n":1}'),
    (DOC, "missing", "no_match"),
    (DOC, "abs(status)", "expression_error"),  # a string where a number was expected
    ("plain text, not JSON", "status", "not_json"),
    ("", "status", "not_json"),
    (json.dumps("ünïcode"), "@", '"ünïcode"'),  # kept as characters, not escapes
    ([{"type": "text", "text": DOC[:20]}, {"type": "text", "text": DOC[20:]}], "id", [{"type": "text", "text": "7"}]),
    ([{"type": "input_text", "text": DOC}], "id", [{"type": "input_text", "text": "7"}]),
    ([{"type": "text", "text": DOC}, {"type": "image", "source": {}}], "id", "not_text"),
    (None, "id", "not_text"),
])  # fmt: skip
def test_projection(content: object, expression: str, expected: object) -> None:
    got = project(content, jmespath.compile(expression))
    assert (got if isinstance(got, str) else got[0]) == expected


@pytest.mark.parametrize(("rule", "window", "limit"), [
    (ToolRule.of("t"), 100_000, 30_000),  # the default share
    (ToolRule.of("t"), None, None),  # no window, no number: no limit
    (ToolRule.of("t", max_tokens=5000), 100_000, 5000),  # the smaller wins
    (ToolRule.of("t", max_tokens=50_000), 100_000, 30_000),
    (ToolRule.of("t", max_share=0.05), 100_000, 5000),
    (ToolRule.of("t", max_tokens=5000), None, 5000),
    (ToolRule.of("t", max_share=0.0001), 100_000, 64),  # never below what a cut can hold
])  # fmt: skip
def test_limits(rule: ToolRule, window: int | None, limit: int | None) -> None:
    assert ToolOutputPolicy(rules=(rule,)).limit(rule, window) == limit


def test_the_first_matching_rule_wins_and_globs_are_case_sensitive() -> None:
    policy = ToolOutputPolicy(rules=(ToolRule.of("mcp__github__*", "a"), ToolRule.of("mcp__*", "b")))
    assert policy.rule_for(("mcp__github__search",)) is policy.rules[0]
    assert policy.rule_for(("mcp__slack__post",)) is policy.rules[1]
    assert policy.rule_for(("MCP__x",)) is None


def test_an_excluded_output_reports_what_was_judged_and_keeps_nothing_of_it() -> None:
    tally = Tally()
    rule = ToolRule.of("q", "rows", "exclude", max_tokens=100)
    raw = json.dumps({"rows": ["r" * 2000], "meta": "m" * 5000})
    done = handle(raw, ("q",), ToolOutputPolicy(rules=(rule,)), UPFRONT, tally)
    assert done.excluded and tally.projected == 1 and tally.excluded == 1
    assert json.loads(done.content) == json.loads(oversized_result("q", 573, 100))  # the projected size, judged
    assert "rrrr" not in done.content and tally.report() == {"projected": 1, "excluded": 1, "cut": 0}


def test_config_builds_the_policy_and_rejects_a_bad_expression() -> None:
    cfg = parse_config(MINIMAL + "tool_outputs:\n  upfront: true\n  rules:\n"
                       "    - {tool: 'search_*', project: 'results[].{t: title}', oversized: exclude}\n"
                       "    - {tool: Read, max_share: 0.5}\n", env={})  # fmt: skip
    policy = tool_output_policy(cfg.tool_outputs)
    assert policy.upfront and policy.max_share == 0.3 and len(policy.rules) == 2
    assert policy.rules[0].expression is not None and policy.rules[0].oversized == "exclude"
    assert policy.rules[1].expression is None and policy.rules[1].oversized == "cut"
    assert not tool_output_policy(parse_config(MINIMAL, env={}).tool_outputs).rules  # off by default
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL + "tool_outputs: {rules: [{tool: x, project: 'results[.'}]}\n", env={})
    [problem] = e.value.problems
    assert problem.startswith("tool_outputs.rules[0].project: ") and "not a JMESPath expression" in problem
    with pytest.raises(ConfigError, match="oversized"):
        parse_config(MINIMAL + "tool_outputs: {rules: [{tool: x, oversized: drop}]}\n", env={})


def readme_example(first_line: str) -> str:
    """One of the "Tool outputs" page's example configs, by the comment it starts with."""
    from tests.unit.test_contract import DOCS

    page = (DOCS / "tool-outputs.md").read_text()
    found = re.search(r"```yaml[^\n]*\n(# " + re.escape(first_line) + r".*?)```", page, re.S)
    assert found is not None, first_line
    return found.group(1)


@pytest.mark.parametrize("first_line", ["coding agent:", "application with API tools:"])
def test_the_readme_examples_are_valid_configs(first_line: str) -> None:
    cfg = parse_config(MINIMAL + readme_example(first_line), env={})
    assert tool_output_policy(cfg.tool_outputs).rules
