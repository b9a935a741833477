"""TLS for listeners (`security.protocol.map` with SSL or SASL_SSL) and for the connections made to them.

Certificates come from PEM files, as Kafka's PEM key stores and Fluss's FIP-29 option names
(`security.ssl.*` on servers, `client.security.ssl.*` on clients) have them:
- a server's key store is one PEM file holding its private key and certificate chain;
- a trust store is a PEM file of the CA certificates a connecting side accepts; the server's name
  (host name or IP address the connection used) must be in its certificate;
- mutual TLS (`security.ssl.client.auth`: requested or required): the server asks for a client
  certificate and verifies it against its trust store; clients present `client.security.ssl.keystore.*`,
  servers their own key store when they connect to each other.

A server refuses to start with a key store that does not load, whose key does not match its
certificate, or whose certificate is expired or not yet valid, so a bad certificate shows at start and
not as handshake failures in every client.
"""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass
from pathlib import Path

from strom.common.errors import InvalidConfigError


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where the PEM files of one side are: its own key store (servers) and the trust store."""

    keystore: str | None = None
    key_password: str | None = None
    truststore: str | None = None


CLIENT_AUTH_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(files: TlsFiles, what: str, client_auth: str = "none") -> ssl.SSLContext:
    """The context a TLS listener accepts connections with. `what` names the option prefix in errors;
    `client_auth` is none, requested or required (client certificates verified against the trust
    store)."""
    mode = CLIENT_AUTH_MODES.get(client_auth.strip().lower())
    if mode is None:
        raise InvalidConfigError(
            f"{what}.client.auth must be one of {', '.join(CLIENT_AUTH_MODES)}, not {client_auth!r}"
        )
    if not files.keystore:
        raise InvalidConfigError(
            f"{what}: a listener uses SSL but {what}.keystore.location is not set (a PEM file with the "
            "server's private key and certificate chain)"
        )
    check_certificate(files.keystore, f"{what}.keystore.location")
    # not create_default_context(CLIENT_AUTH): that trusts the system's CAs for client certificates
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(files.keystore, password=files.key_password)
    except (OSError, ssl.SSLError, ValueError) as e:
        raise InvalidConfigError(
            f"{what}.keystore.location {files.keystore}: cannot load the private key and certificate "
            f"({e}); it must hold both, in PEM, and {what}.key.password must open an encrypted key"
        ) from None
    if mode != ssl.CERT_NONE:
        if not files.truststore:
            raise InvalidConfigError(
                f"{what}.client.auth = {client_auth} needs {what}.truststore.location: the CAs whose "
                "client certificates the server accepts"
            )
        _load_trust(context, files.truststore, what)
        context.verify_mode = mode
    return context


def _load_trust(context: ssl.SSLContext, truststore: str, what: str) -> None:
    try:
        context.load_verify_locations(cafile=truststore)
    except (OSError, ssl.SSLError) as e:
        raise InvalidConfigError(
            f"{what}.truststore.location {truststore}: cannot load CA certificates in PEM ({e})"
        ) from None


def client_context(files: TlsFiles, what: str) -> ssl.SSLContext:
    """The context for connecting to TLS listeners: verifies the server's certificate chain against
    the trust store (the system's CAs without one) and its name against the address connected to, and
    presents the key store's certificate when there is one."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if files.truststore:
        _load_trust(context, files.truststore, what)
    if files.keystore:  # presented to servers that ask for client certificates (mutual TLS)
        check_certificate(files.keystore, f"{what}.keystore.location")
        try:
            context.load_cert_chain(files.keystore, password=files.key_password)
        except (OSError, ssl.SSLError, ValueError) as e:
            raise InvalidConfigError(
                f"{what}.keystore.location {files.keystore}: cannot load the private key and certificate "
                f"({e}); it must hold both, in PEM, and {what}.key.password must open an encrypted key"
            ) from None
    return context


def check_certificate(path: str, option: str) -> None:
    """Refuses a PEM certificate file that is unreadable, or whose first certificate is not valid now."""
    from cryptography import x509  # only servers with a TLS listener need it

    try:
        certificate = x509.load_pem_x509_certificate(Path(path).read_bytes())
    except (OSError, ValueError) as e:
        raise InvalidConfigError(f"{option} {path}: cannot read a PEM certificate ({e})") from None
    now = datetime.datetime.now(datetime.UTC)
    subject = certificate.subject.rfc4514_string()
    if certificate.not_valid_after_utc < now:
        raise InvalidConfigError(
            f"{option} {path}: the certificate of {subject} expired on "
            f"{certificate.not_valid_after_utc.isoformat()}"
        )
    if certificate.not_valid_before_utc > now:
        raise InvalidConfigError(
            f"{option} {path}: the certificate of {subject} is not valid before "
            f"{certificate.not_valid_before_utc.isoformat()}"
        )


def describe_handshake_failure(address: str, error: BaseException) -> str:
    """A message naming what the TLS handshake with `address` refused."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return (
            f"TLS handshake with {address} failed: the server's certificate was refused "
            f"({error.verify_message or error.reason}); check client.security.ssl.truststore.location and "
            "that the certificate names this host"
        )
    return f"TLS handshake with {address} failed: {error}"
