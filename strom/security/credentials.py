"""The login a server uses for its own connections to other servers.

Fluss servers read the `client.security.*` options of their own configuration for that; Strom does the
same. When the internal listener speaks SASL and those options are absent, a server logs in as the first
super user that has a password in the listener's JAAS users, so a cluster configured only with
`security.protocol.map`, the JAAS users and `super.users` works without more settings.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import InvalidConfigError
from strom.rpc.client import SaslPlain
from strom.security.acl import Principal
from strom.security.jaas import jaas_for_users, parse_jaas_credentials, parse_jaas_users
from strom.security.listeners import SASL, SASL_PROTOCOLS, SASL_SSL, SSL, ListenerSettings
from strom.security.tls import TlsFiles, client_context

CLIENT_SECURITY_PROTOCOL = "client.security.protocol"
CLIENT_SASL_USERNAME = "client.security.sasl.username"
CLIENT_SASL_PASSWORD = "client.security.sasl.password"
CLIENT_SASL_JAAS_CONFIG = "client.security.sasl.jaas.config"


def listener_users(config: Configuration, listener: str) -> dict[str, str]:
    """The SASL/PLAIN users of a listener: its own JAAS line, else the global one, else the
    `security.sasl.plain.credentials` shorthand."""
    jaas = config.get(f"security.sasl.listener.name.{listener.lower()}.plain.jaas.config") or config.get(
        options.SECURITY_SASL_PLAIN_JAAS_CONFIG
    )
    if not jaas:
        credentials = config.get(options.SECURITY_SASL_PLAIN_CREDENTIALS) or ""
        pairs = (item.split(":", 1) for item in credentials.split(",") if ":" in item)
        jaas = jaas_for_users({name.strip(): password.strip() for name, password in pairs})
    return parse_jaas_users(jaas)


def configured_login(config: Configuration) -> SaslPlain | None:
    """The SASL/PLAIN login named by `client.security.*`, or None when the protocol is not SASL."""
    if (config.get(CLIENT_SECURITY_PROTOCOL) or "PLAINTEXT").strip().upper() not in SASL_PROTOCOLS:
        return None
    username, password = config.get(CLIENT_SASL_USERNAME), config.get(CLIENT_SASL_PASSWORD)
    jaas = config.get(CLIENT_SASL_JAAS_CONFIG)
    if jaas and (not username or not password):
        jaas_user, jaas_password = parse_jaas_credentials(jaas)
        username, password = username or jaas_user, password or jaas_password
    if not username or not password:
        raise InvalidConfigError(
            f"{CLIENT_SECURITY_PROTOCOL} is SASL but {CLIENT_SASL_USERNAME} / {CLIENT_SASL_PASSWORD} "
            "are not set"
        )
    return SaslPlain(username, password)


def parse_super_users(text: str | None) -> list[Principal]:
    return [Principal.parse(p) for p in (text or "").split(";") if p.strip()]


def internal_login(config: Configuration, listeners: ListenerSettings) -> SaslPlain | None:
    """How a server (or the tiering service given the servers' configuration) logs in to the others."""
    login = configured_login(config)
    if login is not None or not listeners.uses_sasl(listeners.internal):
        return login
    users = listener_users(config, listeners.internal)
    for principal in parse_super_users(config.get(options.SUPER_USERS)):
        if principal.type == "User" and principal.name in users:
            return SaslPlain(principal.name, users[principal.name])
    raise InvalidConfigError(
        f"the internal listener {listeners.internal} uses SASL, so servers must log in to each other: set "
        f"{CLIENT_SASL_USERNAME} and {CLIENT_SASL_PASSWORD} in the server configuration, or list a SASL user "
        "in super.users"
    )


def cluster_login(config: Mapping[str, str]) -> SaslPlain | None:
    """The internal login for a cluster configuration (what `strom local` and its tiering service use)."""
    configuration = Configuration(config)
    return internal_login(configuration, ListenerSettings.from_config(configuration, "127.0.0.1", 0))


def cluster_tls(config: Mapping[str, str]) -> ssl.SSLContext | None:
    """How to connect to the internal listener of a cluster configuration's servers (None: no TLS)."""
    configuration = Configuration(config)
    listeners = ListenerSettings.from_config(configuration, "127.0.0.1", 0)
    if not listeners.uses_tls(listeners.internal):
        return None
    # the server's own key store, presented as a client certificate where servers ask for one
    files = TlsFiles(
        configuration.get(options.SECURITY_SSL_KEYSTORE_LOCATION),
        configuration.get(options.SECURITY_SSL_KEY_PASSWORD),
        configuration.get(options.SECURITY_SSL_TRUSTSTORE_LOCATION),
    )
    return client_context(files, "security.ssl")


def client_properties(config: Mapping[str, str]) -> dict[str, str]:
    """The `client.*` options of a configuration, with the cluster login added when the configuration
    describes a SASL cluster and names no login of its own, and TLS (trusting the servers' trust store)
    when its internal listener speaks TLS."""
    properties = {k: v for k, v in config.items() if k.startswith("client.")}
    if CLIENT_SECURITY_PROTOCOL not in properties:
        configuration = Configuration(config)
        listeners = ListenerSettings.from_config(configuration, "127.0.0.1", 0)
        tls = listeners.uses_tls(listeners.internal)
        login = cluster_login(config)
        if login is not None:
            properties.update(
                {
                    CLIENT_SECURITY_PROTOCOL: SASL_SSL if tls else SASL,
                    CLIENT_SASL_USERNAME: login.username,
                    CLIENT_SASL_PASSWORD: login.password,
                }
            )
        elif tls:
            properties[CLIENT_SECURITY_PROTOCOL] = SSL
        truststore = configuration.get(options.SECURITY_SSL_TRUSTSTORE_LOCATION)
        if tls and truststore and options.CLIENT_SSL_TRUSTSTORE_LOCATION.key not in properties:
            properties[options.CLIENT_SSL_TRUSTSTORE_LOCATION.key] = truststore
        # mutual TLS: the servers' key store is the cluster's own client certificate
        keystore = configuration.get(options.SECURITY_SSL_KEYSTORE_LOCATION)
        if tls and keystore and options.CLIENT_SSL_KEYSTORE_LOCATION.key not in properties:
            properties[options.CLIENT_SSL_KEYSTORE_LOCATION.key] = keystore
            password = configuration.get(options.SECURITY_SSL_KEY_PASSWORD)
            if password:
                properties[options.CLIENT_SSL_KEY_PASSWORD.key] = password
    return properties
