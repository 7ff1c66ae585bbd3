"""gateway/tls.py: what can be served, and a renewed certificate noticed by its files."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from gateway.tls import ServerTLS, problem, server_context


def _pair(tmp: Path, ca: trustme.CA, name: str) -> tuple[Path, Path]:
    leaf = ca.issue_cert("localhost")
    cert, key = tmp / f"{name}.crt", tmp / f"{name}.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return cert, key


def test_what_cannot_be_served_is_said_by_setting_and_file_never_by_content(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = _pair(tmp_path, ca, "a")
    _, other = _pair(tmp_path, ca, "b")
    assert problem(str(cert), str(key)) is None
    assert problem(str(tmp_path / "nope.crt"), str(key)) == f"tls_cert_file: {tmp_path / 'nope.crt'} does not exist"
    assert problem(str(cert), str(tmp_path / "nope.key")) == f"tls_key_file: {tmp_path / 'nope.key'} does not exist"
    assert problem(str(cert), str(other)) == (
        "tls_cert_file: the certificate and key cannot be loaded together: KEY_VALUES_MISMATCH")
    (tmp_path / "junk.crt").write_text("not a certificate")
    assert problem(str(tmp_path / "junk.crt"), str(key)) == (
        f"tls_cert_file: {tmp_path / 'junk.crt'} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    assert problem(str(cert), str(cert)) == f"tls_key_file: {cert} holds no PEM private key"
    assert problem(str(cert), None) == f"tls_cert_file: {cert} holds no PEM private key"  # and no key beside it
    combined = tmp_path / "both.pem"
    combined.write_bytes(cert.read_bytes() + key.read_bytes())
    assert problem(str(combined), None) is None  # the key in the certificate's file


def test_an_encrypted_key_is_refused_without_asking_for_its_passphrase(tmp_path: Path) -> None:
    """OpenSSL asks for the passphrase on the terminal when no callback answers: a gateway run
    in a terminal froze, loop and SIGTERM included, on a renewal with an encrypted key."""
    cert, key = _pair(tmp_path, trustme.CA(), "a")
    plain = serialization.load_pem_private_key(key.read_bytes(), None)
    key.write_bytes(plain.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.BestAvailableEncryption(b"secret-pass")))  # fmt: skip
    said = problem(str(cert), str(key))
    assert said is not None and said.startswith(f"tls_key_file: {key} holds an encrypted key")
    with pytest.raises(ValueError, match="encrypted"):
        server_context(str(cert), str(key))  # raised, never a prompt


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
