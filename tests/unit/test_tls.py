"""TLS on an RPC listener with certificates the test makes: the trusted certificate is accepted, a
certificate from another CA or an expired one is refused with a message that says so, and a server
does not start with an expired certificate."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
from tls_certs import CertificateAuthority

from strom.client.config import ClientConfig, ClientConfigError
from strom.common.errors import AuthenticateError, FlussError, InvalidConfigError
from strom.rpc.api import ServerType
from strom.rpc.client import RpcConnection
from strom.rpc.server import RpcServer
from strom.security.credentials import client_properties
from strom.security.tls import TlsFiles, client_context, server_context


async def handshake(server_tls: ssl.SSLContext, client_tls: ssl.SSLContext | None) -> int | None:
    """Starts a TLS listener on a free port and connects to it; the server type it reports."""
    server = RpcServer(
        name="tls-test", host="127.0.0.1", port=0, handlers={}, server_type=ServerType.TABLET_SERVER,
        tls=server_tls,
    )  # fmt: skip
    await server.start()
    try:
        connection = await RpcConnection.connect("127.0.0.1", server.port, connect_timeout=5, tls=client_tls)
        connection.close()
        return connection.server_type
    finally:
        await server.close()


def test_tls_listener_accepts_trusted_and_refuses_wrong_or_expired_certificates(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path / "ca")
    other_ca = CertificateAuthority.create(tmp_path / "other", "other-ca")
    keystore = ca.issue(tmp_path / "server.pem")
    listener = server_context(TlsFiles(keystore=str(keystore)), "security.ssl")
    trusting = ClientConfig.of(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "client.security.protocol": "SSL",
            "client.security.ssl.truststore.location": str(ca.path),
        }
    ).tls
    assert trusting is not None
    assert asyncio.run(handshake(listener, trusting)) == ServerType.TABLET_SERVER

    # a server certificate signed by a CA the client does not trust
    stranger = client_context(TlsFiles(truststore=str(other_ca.path)), "client.security.ssl")
    with pytest.raises(AuthenticateError, match=r"TLS handshake with 127\.0\.0\.1:\d+ failed.*certificate"):
        asyncio.run(handshake(listener, stranger))

    # a certificate for another host name
    elsewhere = server_context(
        TlsFiles(keystore=str(ca.issue(tmp_path / "elsewhere.pem", hosts=("db.example",)))), "security.ssl"
    )
    with pytest.raises(AuthenticateError, match=r"IP address mismatch|doesn't match"):
        asyncio.run(handshake(elsewhere, trusting))

    # an expired certificate: the server refuses to start with it, and a client refuses a server using it
    expired = ca.issue(tmp_path / "expired.pem", expired=True)
    with pytest.raises(
        InvalidConfigError, match=r"expired\.pem: the certificate of CN=127\.0\.0\.1 expired on"
    ):
        server_context(TlsFiles(keystore=str(expired)), "security.ssl")
    unchecked = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    unchecked.load_cert_chain(expired)
    with pytest.raises(AuthenticateError, match="certificate has expired"):
        asyncio.run(handshake(unchecked, trusting))

    # a plaintext client gets an error, not a hang
    with pytest.raises(FlussError):
        asyncio.run(handshake(listener, None))

    # a key store without the key, and a trust store that is not there, are refused up front
    with pytest.raises(InvalidConfigError, match="cannot load the private key and certificate"):
        server_context(TlsFiles(keystore=str(ca.path)), "security.ssl")
    with pytest.raises(ClientConfigError, match=r"truststore\.location .*missing\.pem: cannot load"):
        ClientConfig.of(
            {
                "bootstrap.servers": "127.0.0.1:1",
                "client.security.protocol": "SASL_SSL",
                "client.security.sasl.username": "u",
                "client.security.sasl.password": "p",
                "client.security.ssl.truststore.location": str(tmp_path / "missing.pem"),
            }
        )


def test_the_tiering_service_speaks_tls_when_the_internal_listener_does() -> None:
    """What `strom local` hands the tiering service (and the Spark connector takes as client.* options)."""
    servers = {"security.protocol.map": "FLUSS:SSL", "security.ssl.truststore.location": "/ca.pem"}
    assert client_properties(servers) == {
        "client.security.protocol": "SSL",
        "client.security.ssl.truststore.location": "/ca.pem",
    }
    sasl = {
        **servers,
        "security.protocol.map": "FLUSS:SASL_SSL",
        "security.sasl.plain.jaas.config": 'PlainLoginModule required user_admin="pw";',
        "super.users": "User:admin",
    }
    assert client_properties(sasl)["client.security.protocol"] == "SASL_SSL"
    assert client_properties({"security.protocol.map": "FLUSS:PLAINTEXT"}) == {}
