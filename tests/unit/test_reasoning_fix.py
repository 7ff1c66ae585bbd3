"""Which reasoning a rescue leaves out of a Responses or Gemini request, and what it learns of
whose is whose (``pipeline/reasoning_fix.py``, ``policy/thinking_signers.py``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gateway.pipeline import reasoning_fix
from gateway.policy.thinking_signers import Signers, sealed_in

# OpenAI's words (codex #8145, vscode-unify-chat-provider #178; oh-my-pi #41).
UNVERIFIED = ("The encrypted content for item {} could not be verified. Reason: Encrypted content could not be "
              "decrypted or parsed.")  # fmt: skip
NOT_FOUND = ("Item with id '{}' not found. Items are not persisted when `store` is set to false. Try again with "
             "`store` set to true, or remove this item from your input.")  # fmt: skip


def item(rid: str, sealed: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "reasoning", "id": rid, "summary": []}
    if sealed is not None:
        out["encrypted_content"] = sealed
    return out


def rescued(signers: Signers, doc: dict[str, Any], message: str) -> dict[str, Any] | None:
    svc: Any = SimpleNamespace(signers=signers)
    fix = reasoning_fix._without_sealed(svc, "responses", "b", doc, message)
    return fix("b", doc)  # the request as ``b``, which refused it, sends it again


def test_only_the_issuer_of_the_item_named_is_learnt_as_refused() -> None:
    """Keys ``a`` and ``b`` of one organization, ``c`` of another: ``b`` names ``c``'s item. A
    sibling's items it takes stay in later turns; ``c``'s go before the send."""
    signers = Signers()
    signers.issued("gAAAA-a", "a")
    signers.issued("gAAAA-c", "c")
    doc = {"input": [item("rs_a", "gAAAA-a"), item("rs_c", "gAAAA-c"), {"role": "user", "content": "go on"}]}
    out = rescued(signers, doc, UNVERIFIED.format("rs_c"))
    assert out is not None and out["input"] == [{"role": "user", "content": "go on"}]  # neither is b's own
    assert signers.refuses_mark("b", "gAAAA-c") and not signers.refuses_mark("b", "gAAAA-a")


def test_a_record_not_kept_blames_no_issuer() -> None:
    signers = Signers()
    signers.issued("gAAAA-a", "a")
    doc = {"input": [item("rs_a", "gAAAA-a"), item("rs_gw", None)], "store": False}
    out = rescued(signers, doc, NOT_FOUND.format("rs_gw"))
    assert out is not None and out["input"] == []
    assert not signers.refuses_any("b")


def test_the_deployments_own_item_named_leaves_every_item_out() -> None:
    signers = Signers()
    signers.issued("gAAAA-b", "b")
    doc = {"input": [item("rs_b", "gAAAA-b"), item("rs_x", "gAAAA-unknown")]}
    out = rescued(signers, doc, UNVERIFIED.format("rs_b"))
    assert out is not None and out["input"] == []
    assert not signers.refuses_any("b")


def test_the_deployments_own_items_stay_when_another_is_named() -> None:
    signers = Signers()
    signers.issued("gAAAA-a", "a")
    signers.issued("gAAAA-b", "b")
    doc = {"input": [item("rs_a", "gAAAA-a"), item("rs_b", "gAAAA-b")]}
    out = rescued(signers, doc, UNVERIFIED.format("rs_a"))
    assert out is not None and out["input"] == [item("rs_b", "gAAAA-b")]


def codex_item(sealed: str) -> dict[str, Any]:
    """A reasoning item as Codex sends it back: no id (codex-rs ``ResponseItem::Reasoning``'s
    ``id`` is ``skip_serializing``)."""
    return {"type": "reasoning", "summary": [], "encrypted_content": sealed}


def test_an_item_named_but_sent_without_its_id_is_blamed_on_its_issuer_alone() -> None:
    """Keys ``a`` and ``b`` of one organization, ``c`` of another, Codex's items carrying no id:
    ``b`` names ``c``'s. Blaming every issuer sent learnt ``a`` as refused by ``b`` too, and took
    ``a``'s reasoning off every later turn to ``b`` (review). The answers that issued them said
    whose each id is."""
    signers = Signers()
    for deployment, answer in (("a", {"output": [item("rs_a", "gAAAA-a")]}),
                               ("c", {"output": [item("rs_c", "gAAAA-c")]})):  # fmt: skip
        for mark in sealed_in(answer):
            signers.issued(mark, deployment)
    doc = {"input": [codex_item("gAAAA-a"), codex_item("gAAAA-c"), {"role": "user", "content": "go on"}]}
    out = rescued(signers, doc, UNVERIFIED.format("rs_c"))
    assert out is not None and out["input"] == [{"role": "user", "content": "go on"}]  # neither is b's own
    assert signers.refuses_mark("b", "gAAAA-c") and not signers.refuses_mark("b", "gAAAA-a")


def test_an_item_named_by_an_id_no_answer_gave_blames_no_one() -> None:
    signers = Signers()
    signers.issued("gAAAA-a", "a")
    doc = {"input": [codex_item("gAAAA-a"), codex_item("gAAAA-x")]}
    out = rescued(signers, doc, UNVERIFIED.format("rs_unknown"))
    assert out is not None and out["input"] == []
    assert not signers.refuses_any("b")


def test_the_deployments_own_item_named_without_its_id_leaves_every_item_out() -> None:
    signers = Signers()
    for mark in sealed_in({"output": [item("rs_b", "gAAAA-b")]}):
        signers.issued(mark, "b")
    signers.issued("gAAAA-a", "a")
    doc = {"input": [codex_item("gAAAA-a"), codex_item("gAAAA-b")]}
    out = rescued(signers, doc, UNVERIFIED.format("rs_b"))
    assert out is not None and out["input"] == []
    assert not signers.refuses_any("b")
