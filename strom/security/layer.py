"""The security layer every server puts in front of its handlers: authentication per listener, the
internal-API gate, and ACL authorization.

The RPC server calls it for each connection and request (`strom/rpc/server.py`, `RequestGuard`):
1. on a SASL listener nothing but ApiVersions and Authenticate is served before the SASL exchange
   succeeds; a failed exchange closes the connection;
2. a session is *trusted* when it came through the internal listener speaking PLAINTEXT (a network
   only servers reach, as in Fluss's recommended layout) or authenticated as an internal principal
   (a super user, or the login the servers themselves use). Internal APIs (Fluss's PRIVATE ones and
   Strom's registration keys) and follower fetches are served to trusted sessions only;
3. with `authorizer.enabled`, every other request is checked against the ACLs by the rules in
   `api_access.py`, and listings are filtered to what the caller may describe. Trusted sessions skip
   the ACLs, as Fluss's internal sessions do.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import AuthorizationError, InvalidConfigError, SecurityDisabledError
from strom.common.table_path import TablePath
from strom.rpc.api import ApiKey
from strom.rpc.client import SaslPlain
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import Session
from strom.security.acl import ANONYMOUS, AclFilter, OperationType, Principal, Resource
from strom.security.api_access import CHECKS, FILTERS, INTERNAL_APIS, UNCHECKED_APIS
from strom.security.authorizer import Authorizer
from strom.security.credentials import internal_login, listener_users, parse_super_users
from strom.security.listeners import PLAINTEXT, SASL_PROTOCOLS, SSL, ListenerSettings
from strom.security.sasl import PlainAuthenticator
from strom.security.tls import TlsFiles, client_context, server_context

log = logging.getLogger(__name__)

TableResolver = Callable[[int], TablePath | None]


@dataclass(frozen=True)
class SecuritySettings:
    listeners: ListenerSettings
    authenticators: Mapping[str, PlainAuthenticator]  # one per SASL listener
    authorizer_enabled: bool
    super_users: frozenset[Principal]
    internal_login: SaslPlain | None  # how this server authenticates to the others
    server_tls: ssl.SSLContext | None = None  # what the SSL / SASL_SSL listeners accept with
    internal_tls: ssl.SSLContext | None = None  # how this server connects to the others' TLS listener

    @classmethod
    def from_config(cls, config: Configuration, listeners: ListenerSettings) -> SecuritySettings:
        mechanisms = {m.upper() for m in config.get(options.SECURITY_SASL_ENABLED_MECHANISMS) or []}
        authenticators: dict[str, PlainAuthenticator] = {}
        for name, protocol in listeners.protocols.items():
            if protocol not in SASL_PROTOCOLS:
                continue
            if "PLAIN" not in mechanisms:
                raise InvalidConfigError(
                    f"listener {name} uses SASL but security.sasl.enabled.mechanisms does not include PLAIN, "
                    "the only mechanism supported"
                )
            users = listener_users(config, name)
            if not users:
                raise InvalidConfigError(
                    f"listener {name} uses SASL but has no users: set security.sasl.plain.jaas.config "
                    '(PlainLoginModule required user_<name>="<password>" ...;)'
                )
            authenticators[name] = PlainAuthenticator(users)
        super_users = frozenset(parse_super_users(config.get(options.SUPER_USERS)))
        login = internal_login(config, listeners)
        files = TlsFiles(
            config.get(options.SECURITY_SSL_KEYSTORE_LOCATION),
            config.get(options.SECURITY_SSL_KEY_PASSWORD),
            config.get(options.SECURITY_SSL_TRUSTSTORE_LOCATION),
        )
        return cls(
            listeners=listeners,
            authenticators=authenticators,
            authorizer_enabled=bool(config.get(options.AUTHORIZER_ENABLED)),
            super_users=super_users,
            internal_login=login,
            server_tls=(
                server_context(files, "security.ssl", config.get(options.SECURITY_SSL_CLIENT_AUTH))
                if listeners.tls_enabled
                else None
            ),
            internal_tls=(
                client_context(files, "security.ssl") if listeners.uses_tls(listeners.internal) else None
            ),
        )

    def tls_for(self, listener: str) -> ssl.SSLContext | None:
        return self.server_tls if self.listeners.uses_tls(listener) else None

    @property
    def internal_principals(self) -> frozenset[Principal]:
        login = {Principal.user(self.internal_login.username)} if self.internal_login else set()
        return self.super_users | login


class SecurityLayer:
    """Implements the RPC server's `RequestGuard` for one server process."""

    def __init__(self, settings: SecuritySettings, resolve_table: TableResolver | None = None) -> None:
        self.settings = settings
        self.authorizer: Authorizer | None = (
            Authorizer(settings.super_users) if settings.authorizer_enabled else None
        )
        self.resolve_table: TableResolver = resolve_table or (lambda table_id: None)
        self._internal_principals = settings.internal_principals

    # ---- RequestGuard

    def requires_authentication(self, listener: str) -> bool:
        return self.settings.listeners.uses_sasl(listener)

    def authenticate(self, listener: str, mechanism: str, token: bytes) -> Principal:
        return self.settings.authenticators[listener].authenticate(mechanism, token)

    def anonymous(self) -> Principal:
        return ANONYMOUS

    def is_trusted(self, listener: str, principal: Principal | None) -> bool:
        listeners = self.settings.listeners
        # TLS without SASL authenticates nobody: like PLAINTEXT, the internal listener is trusted as a
        # network only servers reach
        if listener == listeners.internal and listeners.protocol(listener) in (PLAINTEXT, SSL):
            return True
        return principal is not None and principal in self._internal_principals

    def check(self, key: ApiKey, request: Any, listener: str, principal: Principal | None, host: str) -> None:
        """Raises AuthorizationError when the caller may not make this request (and may rewrite it)."""
        if self.is_trusted(listener, principal):
            return
        if key in INTERNAL_APIS or (key == ApiKey.FETCH_LOG and request.follower_server_id >= 0):
            log.warning("refused internal API %s from %s (%s)", key.name, host, principal)
            raise AuthorizationError(
                f"{key.name} is an internal API: it is served only on the internal listener "
                f"({self.settings.listeners.internal}) or to an internal principal, not to {principal}"
            )
        if self.authorizer is None or key in UNCHECKED_APIS:
            return
        check = CHECKS.get(key)
        try:
            if check is None:
                raise AuthorizationError(f"{key.name} has no authorization rule; refused for {principal}")
            check(request, _Access(self, principal, host))
        except AuthorizationError as e:
            log.warning("refused %s from %s: %s", key.name, host, e)
            raise

    def filter(
        self, key: ApiKey, request: Any, response: Any, listener: str, principal: Principal | None, host: str
    ) -> None:
        if self.authorizer is None or self.is_trusted(listener, principal):
            return
        response_filter = FILTERS.get(key)
        if response_filter is not None:
            response_filter(request, response, _Access(self, principal, host))

    # ---- used by the ACL API handlers

    def list_acls(self, request: pb.ListAclsRequest, session: Session) -> pb.ListAclsResponse:
        """ListAcls: matching entries on resources the caller may describe (every entry, for servers)."""
        if self.authorizer is None:
            raise SecurityDisabledError("ACLs need authorizer.enabled: true on the servers")
        trusted = self.is_trusted(session.listener, session.principal)
        response = pb.ListAclsResponse()
        for binding in self.authorizer.bindings(AclFilter.from_pb(request.acl_filter)):
            if trusted or self.authorizer.is_authorized(
                session.principal, session.host, OperationType.DESCRIBE, binding.resource
            ):
                response.acl.append(binding.to_pb())
        return response

    def may(
        self, principal: Principal | None, host: str, operation: OperationType, resource: Resource
    ) -> bool:
        return self.authorizer is None or self.authorizer.is_authorized(principal, host, operation, resource)


class _Access:
    """`api_access.Access` for one request."""

    __slots__ = ("host", "layer", "principal")

    def __init__(self, layer: SecurityLayer, principal: Principal | None, host: str) -> None:
        self.layer = layer
        self.principal = principal
        self.host = host

    def allowed(self, operation: OperationType, resource: Resource) -> bool:
        authorizer = self.layer.authorizer
        return authorizer is None or authorizer.is_authorized(self.principal, self.host, operation, resource)

    def require(self, operation: OperationType, resource: Resource) -> None:
        if not self.allowed(operation, resource):
            raise AuthorizationError(
                f"Principal {self.principal} has no authorization to operate {operation.name} on resource "
                f"{resource}"
            )

    def require_any_grant(self, operation: OperationType) -> None:
        authorizer = self.layer.authorizer
        if authorizer is not None and not authorizer.has_any_grant(self.principal, self.host, operation):
            raise AuthorizationError(
                f"Principal {self.principal} has no authorization to operate {operation.name} on any resource"
            )

    def table(self, table_id: int) -> Resource | None:
        path = self.layer.resolve_table(table_id)
        return None if path is None else Resource.table(path.database_name, path.table_name)
