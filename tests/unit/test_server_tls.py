"""gateway/tls.py: what can be served, and a renewed certificate noticed by its files."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest
import trustme

from gateway.tls import ServerTLS, problem


def _pair(tmp: Path, ca: trustme.CA, name: str) -> tuple[Path, Path]:
    leaf = ca.issue_cert("localhost")
    cert, key = tmp / f"{name}.crt", tmp / f"{name}.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return cert, key


def test_what_cannot_be_served_is_said_by_file_never_by_content(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = _pair(tmp_path, ca, "a")
    _, other = _pair(tmp_path, ca, "b")
    assert problem(str(cert), str(key)) is None
    assert problem(str(tmp_path / "nope.crt"), str(key)) == f"{tmp_path / 'nope.crt'} does not exist"
    assert problem(str(cert), str(other)) == "the certificate and key cannot be loaded: KEY_VALUES_MISMATCH"
    (tmp_path / "junk.crt").write_text("not a certificate")
    said = problem(str(tmp_path / "junk.crt"), str(key))
    assert said is not None and said.startswith("the certificate and key cannot be loaded")
    combined = tmp_path / "both.pem"
    combined.write_bytes(cert.read_bytes() + key.read_bytes())
    assert problem(str(combined), None) is None  # the key in the certificate's file


async def test_the_watch_reloads_a_renewed_pair_and_keeps_the_old_one_on_a_bad_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = trustme.CA()
    cert, key = _pair(tmp_path, ca, "live")
    tls = ServerTLS(str(cert), str(key), logging.getLogger("test.tls"))
    ticks: asyncio.Queue[None] = asyncio.Queue()
    looked: list[bool] = []

    async def sleep(_: float) -> None:
        looked.append(tls.changed())
        await ticks.get()

    watcher = asyncio.create_task(tls.watch(sleep=sleep))
    with caplog.at_level(logging.INFO, logger="test.tls"):
        await asyncio.sleep(0)
        new_cert, new_key = _pair(tmp_path, trustme.CA(), "renewed")
        os.replace(new_cert, cert)
        os.replace(new_key, key)
        ticks.put_nowait(None)
        await asyncio.sleep(0.05)
        assert [r.msg["event"] for r in caplog.records] == ["tls_certificate_reloaded"]  # type: ignore[index]
        assert not tls.changed()
        _, mismatched = _pair(tmp_path, trustme.CA(), "other")
        os.replace(mismatched, key)  # a half-written renewal: the key of another certificate
        ticks.put_nowait(None)
        await asyncio.sleep(0.05)
        refused = caplog.records[-1].msg
        assert refused["event"] == "tls_reload_refused" and "KEY_VALUES_MISMATCH" in refused["problem"]  # type: ignore[index]
    watcher.cancel()
    assert looked[0] is False
