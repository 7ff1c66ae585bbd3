"""What happens to one tool output, per tool: a projection, then a size policy. Pure.

A tool's raw result is often a large JSON document of which the model needs a few fields.
A rule (glob on the tool name, first match wins) may name a JMESPath expression: the
output is parsed, the expression applied and the result sent instead, compact. When the
output is not JSON text, the expression fails, or it selects nothing, the raw output is
kept and the reason counted: a projection must never lose a result the model needs
(an API error, say, whose shape the expression did not expect).

Then the size policy, on what the projection left. An output above the rule's limit
(default: a share of the model's window) is either ``cut`` to head + tail (``policy/cut``)
or ``exclude``-d: replaced whole by a small structured result that says so, so the model
can narrow its call instead of reasoning over a head and a tail. Nothing of an excluded
output is kept.

The adapters (``apis/*/tool_outputs.py``) find each output, the name of the tool whose
call it answers (by call id) and write the result back in their API's shape; this module
only decides. Counts go into a :class:`Tally`, never content.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Literal

import jmespath
from jmespath.exceptions import JMESPathError
from jmespath.parser import ParsedResult

from gateway.policy.cut import MIN_CAP_TOKENS, cap_content
from gateway.policy.tokens import content_tokens

Oversized = Literal["cut", "exclude"]
DEFAULT_SHARE = 0.3  # of the model's context window: one output above it leaves too little room
RECOMMENDATION = "narrow the query (filters, a smaller range, fewer fields) and call again"
# Text parts of a tool output, in the three APIs' spellings.
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


@dataclass(frozen=True, slots=True)
class ToolRule:
    pattern: str  # glob on the tool name
    expression: ParsedResult | None = None  # the projection, compiled once
    oversized: Oversized = "cut"
    max_tokens: int | None = None
    max_share: float | None = None

    @classmethod
    def of(
        cls, pattern: str, project: str | None = None, oversized: Oversized = "cut",
        max_tokens: int | None = None, max_share: float | None = None,
    ) -> ToolRule:  # fmt: skip
        """A rule with its expression compiled (jmespath's ParseError on bad syntax)."""
        return cls(pattern, jmespath.compile(project) if project else None, oversized, max_tokens, max_share)


_NO_RULE = ToolRule("*")  # the section's own limits, cut to head and tail


@dataclass(frozen=True, slots=True)
class ToolOutputPolicy:
    rules: tuple[ToolRule, ...] = ()
    upfront: bool = False  # enforce the size policy before the first send, not only in the rescue
    max_share: float = DEFAULT_SHARE
    max_tokens: int | None = None

    def rule_for(self, names: tuple[str, ...]) -> ToolRule | None:
        """The first rule matching any of the tool's names (a namespaced tool has two)."""
        for rule in self.rules:
            if any(fnmatchcase(n, rule.pattern) for n in names):
                return rule
        return None

    def limit(self, rule: ToolRule | None, window: int | None) -> int | None:
        """The largest output (tokens) this rule lets through whole; None: no limit known."""
        share = rule.max_share if rule is not None and rule.max_share is not None else self.max_share
        absolute = rule.max_tokens if rule is not None and rule.max_tokens is not None else self.max_tokens
        limits = [absolute] if absolute is not None else []
        if window:
            limits.append(int(share * window))
        return max(MIN_CAP_TOKENS, min(limits)) if limits else None

    @property
    def projects(self) -> bool:
        return any(r.expression is not None for r in self.rules)


@dataclass(frozen=True, slots=True)
class Stage:
    """One application of the policy: which steps run, and against which window."""

    name: Literal["upfront", "rescue"]
    project: bool  # apply projections
    cut: bool  # apply ``cut`` rules (the rescue leaves cutting to compression, which cuts as needed)
    exclude: bool  # apply ``exclude`` rules
    window: int | None  # the model's window in tokens, if known


@dataclass
class Tally:
    """What one request's tool outputs went through: counts and sizes, never content."""

    projected: int = 0
    excluded: int = 0
    cut: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)  # projection kept raw, by reason
    tokens_removed: float = 0.0  # estimated, by projection, cutting and exclusion together

    @property
    def changed(self) -> bool:
        return bool(self.projected or self.excluded or self.cut)

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"projected": self.projected, "excluded": self.excluded, "cut": self.cut}
        if self.fallbacks:
            out["projection_fallbacks"] = dict(self.fallbacks)
        return out


@dataclass(frozen=True, slots=True)
class Handled:
    content: Any  # the same object when nothing changed
    excluded: bool = False  # the content is the structured oversized result (an error, to the model)


def handle(
    content: Any, names: tuple[str, ...], policy: ToolOutputPolicy, stage: Stage, tally: Tally
) -> Handled:
    """One tool output's content after its tool's rule; ``names`` are the tool's names
    (empty when the call it answers is not in the request)."""
    # A tool no rule names is still held to the section's limits (up front only with
    # ``upfront``; the rescue cuts nothing here): "every tool output", rules refine per tool.
    rule = policy.rule_for(names or ("",)) or _NO_RULE
    before = content_tokens(content)
    out = content
    if stage.project and rule.expression is not None:
        projected = project(content, rule.expression)
        if isinstance(projected, str):
            tally.fallbacks[projected] += 1
        else:
            out = projected[0]
            tally.projected += 1
    limit = policy.limit(rule, stage.window)
    size = content_tokens(out)
    if limit is not None and size > limit:
        if rule.oversized == "exclude" and stage.exclude:
            tally.excluded += 1
            out = oversized_result(names[0] if names else None, round(size), limit)
            tally.tokens_removed += before - content_tokens(out)
            return Handled(out, excluded=True)
        if rule.oversized == "cut" and stage.cut:
            cut, removed = cap_content(out, limit)
            if removed:
                tally.cut += 1
                out = cut
    if out is not content:
        tally.tokens_removed += before - content_tokens(out)
    return Handled(out)


def project(content: Any, expression: ParsedResult) -> tuple[Any] | str:
    """The content with its JSON text projected (a 1-tuple), or why the raw output stays."""
    text = _text_of(content)
    if text is None:
        return "not_text"
    try:
        doc = json.loads(text)
    except ValueError:
        return "not_json"
    try:
        result = expression.search(doc)
    except (JMESPathError, TypeError, ValueError):
        # Types the expression did not expect (a function given a string, say).
        return "expression_error"
    if result is None:
        return "no_match"  # an error body, say, of another shape than the expected result
    projected = json.dumps(result, ensure_ascii=False, separators=(",", ":"))
    if isinstance(content, str):
        return (projected,)
    first = next(p for p in content if isinstance(p, dict))
    return ([{**first, "text": projected}],)


def oversized_result(tool: str | None, original_tokens: int, limit_tokens: int) -> str:
    """The structured result that replaces an excluded output: what happened, and what to do."""
    return json.dumps({
        "status": "oversized", "tool": tool, "original_tokens": original_tokens,
        "limit_tokens": limit_tokens, "recommendation": RECOMMENDATION,
    }, ensure_ascii=False)  # fmt: skip


def _text_of(content: Any) -> str | None:
    """The text of an output that is all text: a string, or a list of text parts only."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and all(
        isinstance(p, dict) and p.get("type", "text") in _TEXT_PARTS and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    return None
