"""What a plain request reads of the config (issue #38).

On Python 3.11 (the shipped image's) a field read off a pydantic model costs ~360
instructions more than a slot's: BaseModel's ``__getattr__`` keeps the interpreter from
caching the lookup. A plain chat request read 26 of them; the numbers each request needs are
copied once per config (gateway/services.py ``Limits``, ``UpstreamRuntime.name``).
"""

from __future__ import annotations

import sys
from collections import Counter

import pydantic
import pytest

from tests.integration.conftest import MakeGateway


async def test_a_plain_chat_request_reads_few_config_fields(make_gateway: MakeGateway,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    gw = await make_gateway()
    status, _, _ = await gw.chat()  # routes, legs and URLs are made once: not counted
    assert status == 200
    reads: Counter[str] = Counter()
    plain = object.__getattribute__

    def counted(model: object, name: str) -> object:
        caller = sys._getframe(1).f_code.co_filename
        if "/gateway/" in caller and "/gateway/fake/" not in caller:
            reads[f"{type(model).__name__}.{name}"] += 1
        return plain(model, name)

    monkeypatch.setattr(pydantic.BaseModel, "__getattribute__", counted)
    status, _, _ = await gw.chat()
    monkeypatch.undo()
    assert status == 200
    # 26 before the copies (server, timeouts, retry, fallback, compression and the upstream's
    # name, several twice); what is left is read on this path only, once each.
    assert sum(reads.values()) <= 10, reads
