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


def test_mutual_tls_verifies_client_certificates(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path / "ca")
    other_ca = CertificateAuthority.create(tmp_path / "other", "other-ca")
    server_files = TlsFiles(str(ca.issue(tmp_path / "server.pem")), None, str(ca.path))
    required = server_context(server_files, "security.ssl", "required")

    def client(keystore: Path | None) -> ssl.SSLContext:
        settings = {
            "bootstrap.servers": "127.0.0.1:1",
            "client.security.protocol": "SSL",
            "client.security.ssl.truststore.location": str(ca.path),
        }
        if keystore is not None:
            settings["client.security.ssl.keystore.location"] = str(keystore)
        tls = ClientConfig.of(settings).tls
        assert tls is not None
        return tls

    signed = client(ca.issue(tmp_path / "client.pem", hosts=("client-1",)))
    assert asyncio.run(handshake(required, signed)) == ServerType.TABLET_SERVER
    # no certificate, or one from a CA the server does not trust: the server closes the connection
    for refused in (client(None), client(other_ca.issue(tmp_path / "stranger.pem", hosts=("x",)))):
        with pytest.raises(
            FlussError, match=r"security\.ssl\.client\.auth refuses clients without a certificate"
        ):
            asyncio.run(handshake(required, refused))
    # requested: a certificate is checked when given, not needed
    requested = server_context(server_files, "security.ssl", "requested")
    assert asyncio.run(handshake(requested, client(None))) == ServerType.TABLET_SERVER
    # a client's own expired certificate is refused before it connects
    with pytest.raises(ClientConfigError, match=r"keystore\.location .*expired"):
        client(ca.issue(tmp_path / "old.pem", hosts=("client-1",), expired=True))
    # a mode that is not one, and client certificates without a trust store to check them with
    with pytest.raises(InvalidConfigError, match=r"client\.auth must be one of none, requested, required"):
        server_context(server_files, "security.ssl", "always")
    with pytest.raises(InvalidConfigError, match=r"needs security\.ssl\.truststore\.location"):
        server_context(TlsFiles(server_files.keystore), "security.ssl", "required")


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
    # mutual TLS: the servers' key store is the cluster's client certificate
    mutual = {**servers, "security.ssl.keystore.location": "/server.pem", "security.ssl.key.password": "k"}
    assert client_properties(mutual) == {
        "client.security.protocol": "SSL",
        "client.security.ssl.truststore.location": "/ca.pem",
        "client.security.ssl.keystore.location": "/server.pem",
        "client.security.ssl.key.password": "k",
    }
