"""Security: ``wss://`` with a test CA. The bridge verifies the controller's certificate: with
the right CA it connects; with a wrong CA, or the system trust store (which does not know our
test CA), the TLS handshake fails every time and the link never opens — it fails closed.

The controller is the real app on uvicorn with TLS, on a loopback socket; the certificates are
made here (``cryptography``), valid for 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from controller.config import ControllerConfig
from device_bridge.bridge import ssl_context
from device_bridge.config import load_host_config
from device_bridge.connection import Link, LinkError, LinkRefused
from droidwire.serve import uvicorn_config
from tests.controller.conftest import ADMIN_TOKEN, bearer
from tests.device_bridge.test_connection import make_link
from tests.faults.figures import record
from tests.faults.timing import SETTINGS, WAIT_S, wait_until

AREA = "security: TLS to the controller"


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(directory: Path, cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{cn}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert, path


def _server_cert(directory: Path, ca_key: ec.EllipticCurvePrivateKey,
                 ca: x509.Certificate) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(_name("droidwire-test-controller"))
        .issuer_name(ca.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@contextlib.asynccontextmanager
async def tls_controller(tmp_path: Path) -> AsyncIterator[tuple[str, Path, Path]]:
    """The controller on https/wss; yields (base URL, the right CA, a wrong CA)."""
    ca_key, ca, ca_path = _ca(tmp_path, "droidwire-test-ca")
    _, _, wrong_path = _ca(tmp_path, "some-other-ca")
    cert_path, key_path = _server_cert(tmp_path, ca_key, ca)
    config = ControllerConfig(db_url=f"sqlite:///{tmp_path / 'c.db'}",
                              bootstrap_token=ADMIN_TOKEN, settings=SETTINGS)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn_config(config, log_level="warning", log_config=None,
                                           ssl_certfile=str(cert_path),
                                           ssl_keyfile=str(key_path)))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"https://127.0.0.1:{sock.getsockname()[1]}", ca_path, wrong_path
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, WAIT_S)
        sock.close()


async def _bridge_token(url: str, ca: Path) -> str:
    verify = ssl.create_default_context(cafile=str(ca))
    async with httpx.AsyncClient(base_url=url, verify=verify, timeout=WAIT_S) as http:
        response = await http.post("/v1/tokens", json={"kind": "bridge", "name": "tls"},
                                   headers=bearer(ADMIN_TOKEN))
        assert response.status_code == 201, response.text
        return str(response.json()["token"])


async def _dial(url: str, token: str, ca: Path | None,
                attempts: int) -> tuple[Link, BaseException | None]:
    """Run a link until it opened, gave up, or made ``attempts`` attempts: (link, why it
    ended on its own, if it did)."""
    overrides: dict[str, object] = {"controller.url": [url]}
    if ca is not None:
        overrides["controller.ca"] = str(ca)
    context = ssl_context(load_host_config(None, overrides))
    link = make_link([url], token=token, ssl=context, settings=SETTINGS)
    stop = asyncio.Event()
    runner = asyncio.create_task(link.run(stop))
    try:
        await wait_until(lambda: link.welcomes > 0 or link.attempts >= attempts or runner.done(),
                         "link opened or gave up")
    finally:
        stop.set()
        ended: BaseException | None = None
        try:
            await asyncio.wait_for(runner, WAIT_S)
        except LinkError as exc:
            ended = exc
    return link, ended


async def test_the_bridge_verifies_the_controller_certificate(tmp_path: Path) -> None:
    attempts = 3
    async with tls_controller(tmp_path) as (url, ca, wrong):
        token = await _bridge_token(url, ca)
        good, _ = await _dial(url, token, ca, attempts)
        bad, bad_end = await _dial(url, token, wrong, attempts)
        system, system_end = await _dial(url, token, None, attempts)
    record(AREA, "wss:// with the right CA: link opened", "yes" if good.welcomes else "NO")
    for what, link, end in (("a wrong CA", bad, bad_end),
                            ("the system trust store", system, system_end)):
        record(AREA, f"wss:// with {what}: connections opened", link.connections,
               must_be_zero=True)
        how = f"terminal (exit code {end.exit_code})" if isinstance(end, LinkError) else "retrying"
        record(AREA, f"  how the link ended ({what})", f"{how}, {link.attempts} attempt(s)")
        assert link.connections == 0 and link.welcomes == 0
        # Fails closed: a terminal refusal that names the CA, or retries that never get in.
        assert ((isinstance(end, LinkRefused) and "controller.ca" in str(end))
                or link.attempts >= attempts), (end, link.attempts)
    assert good.welcomes == 1
