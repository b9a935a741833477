"""Security building blocks: ACL semantics, SASL/PLAIN, JAAS, listeners, logins and the API rule table."""

from __future__ import annotations

import pytest

from strom.common.config import Configuration
from strom.common.errors import AuthenticateError, AuthorizationError, InvalidConfigError
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.security.acl import (
    ANY_PRINCIPAL,
    AclBinding,
    AclEntry,
    AclFilter,
    OperationType,
    Principal,
    Resource,
    ResourceType,
    decode_entries,
    encode_entries,
)
from strom.security.api_access import CHECKS, INTERNAL_APIS, UNCHECKED_APIS
from strom.security.authorizer import Authorizer
from strom.security.credentials import client_properties, cluster_login
from strom.security.jaas import jaas_for_users, parse_jaas_credentials, parse_jaas_users
from strom.security.layer import SecurityLayer, SecuritySettings
from strom.security.listeners import Endpoint, ListenerSettings, endpoint_on, parse_endpoints
from strom.security.sasl import PlainAuthenticator

ALICE = Principal.user("alice")
BOB = Principal.user("bob")
ADMIN = Principal.user("admin")
JAAS = (
    "org.apache.fluss.security.auth.sasl.plain.PlainLoginModule required "
    'user_admin="admin-secret" user_alice="alice-secret";'
)
SASL_CONFIG = {
    "security.protocol.map": "CLIENT:SASL",
    "security.sasl.plain.jaas.config": JAAS,
    "authorizer.enabled": "true",
    "super.users": "User:admin",
}


def grant(
    authorizer: Authorizer, principal: Principal, op: OperationType, resource: Resource, host: str = "*"
) -> None:
    authorizer.set_entries(resource, authorizer.entries(resource) | {AclEntry(principal, host, op)})


# ---- authorizer


def test_no_acl_means_no_access_and_super_users_have_all() -> None:
    authorizer = Authorizer([ADMIN])
    table = Resource.table("shop", "orders")
    assert not authorizer.is_authorized(ALICE, "10.0.0.1", OperationType.READ, table)
    assert authorizer.is_authorized(ADMIN, "10.0.0.1", OperationType.DROP, table)
    assert not authorizer.is_authorized(None, "10.0.0.1", OperationType.READ, table)


def test_acls_on_database_and_cluster_cover_their_tables() -> None:
    authorizer = Authorizer()
    grant(authorizer, ALICE, OperationType.READ, Resource.database("shop"))
    grant(authorizer, BOB, OperationType.WRITE, Resource.cluster())
    assert authorizer.is_authorized(ALICE, "h", OperationType.READ, Resource.table("shop", "orders"))
    assert not authorizer.is_authorized(ALICE, "h", OperationType.READ, Resource.table("other", "orders"))
    assert not authorizer.is_authorized(ALICE, "h", OperationType.WRITE, Resource.table("shop", "orders"))
    assert authorizer.is_authorized(BOB, "h", OperationType.WRITE, Resource.table("any", "thing"))
    # a table grant says nothing about its database
    grant(authorizer, BOB, OperationType.DROP, Resource.table("shop", "orders"))
    assert not authorizer.is_authorized(BOB, "h", OperationType.DROP, Resource.database("shop"))


def test_every_operation_implies_describe_and_all_implies_every_operation() -> None:
    authorizer = Authorizer()
    table = Resource.table("shop", "orders")
    grant(authorizer, ALICE, OperationType.WRITE, table)
    assert authorizer.is_authorized(ALICE, "h", OperationType.DESCRIBE, table)
    assert not authorizer.is_authorized(ALICE, "h", OperationType.READ, table)
    grant(authorizer, BOB, OperationType.ALL, table)
    for op in (OperationType.READ, OperationType.WRITE, OperationType.DROP, OperationType.ALTER):
        assert authorizer.is_authorized(BOB, "h", op, table)


def test_host_and_principal_wildcards() -> None:
    authorizer = Authorizer()
    table = Resource.table("shop", "orders")
    grant(authorizer, ALICE, OperationType.READ, table, host="10.0.0.1")
    assert authorizer.is_authorized(ALICE, "10.0.0.1", OperationType.READ, table)
    assert not authorizer.is_authorized(ALICE, "10.0.0.2", OperationType.READ, table)
    grant(authorizer, ANY_PRINCIPAL, OperationType.DESCRIBE, table)
    assert authorizer.is_authorized(BOB, "10.0.0.9", OperationType.DESCRIBE, table)
    assert not authorizer.is_authorized(BOB, "10.0.0.9", OperationType.READ, table)
    grant(authorizer, BOB, OperationType.READ, Resource(ResourceType.TABLE, "*"))
    assert authorizer.is_authorized(BOB, "h", OperationType.READ, Resource.table("x", "y"))


def test_filters_and_stored_form_round_trip() -> None:
    binding = AclBinding(Resource.table("shop", "orders"), AclEntry(ALICE, "*", OperationType.READ))
    assert AclBinding.from_pb(binding.to_pb()) == binding
    assert decode_entries(encode_entries({binding.entry})) == {binding.entry}
    assert AclFilter().matches(binding)
    assert AclFilter(principal=ALICE, resource_type=ResourceType.TABLE).matches(binding)
    assert not AclFilter(principal=BOB).matches(binding)
    assert not AclFilter(operation=OperationType.WRITE).matches(binding)
    assert AclFilter.from_pb(AclFilter(principal=ALICE, resource_name="shop.orders").to_pb()).matches(binding)


def test_kafka_groups_are_resources_under_the_cluster_only() -> None:
    authorizer = Authorizer()
    grant(authorizer, ALICE, OperationType.READ, Resource.of(ResourceType.GROUP, "billing"))
    grant(authorizer, ALICE, OperationType.ALL, Resource.database("kafka"))  # not a group's parent
    grant(authorizer, BOB, OperationType.DESCRIBE, Resource.cluster())
    assert authorizer.is_authorized(ALICE, "h", OperationType.READ, Resource.group("billing"))
    assert not authorizer.is_authorized(ALICE, "h", OperationType.READ, Resource.group("audit"))
    assert authorizer.is_authorized(BOB, "h", OperationType.DESCRIBE, Resource.group("audit"))
    assert Resource.group("billing").acl_owner() == Resource.cluster()  # who may manage its ACLs
    binding = AclBinding(Resource.group("a.b-c"), AclEntry(ALICE, "*", OperationType.READ))
    assert AclBinding.from_pb(binding.to_pb()) == binding  # the group id travels as it is
    for bad in ("a/b", ".."):
        with pytest.raises(InvalidConfigError, match="cannot name a group"):
            Resource.of(ResourceType.GROUP, bad)


def test_invalid_bindings_are_refused_with_the_rule() -> None:
    with pytest.raises(InvalidConfigError, match=r"database\.table"):
        Resource.of(ResourceType.TABLE, "orders")
    with pytest.raises(InvalidConfigError, match="concrete operation"):
        AclBinding(Resource.cluster(), AclEntry(ALICE, "*", OperationType.ANY)).validate()
    with pytest.raises(InvalidConfigError, match="Type:name"):
        Principal.parse("alice")
    with pytest.raises(InvalidConfigError, match="unknown operation code 99"):
        AclBinding.from_pb(
            pb.PbAclInfo(
                resource_name="x",
                resource_type=3,
                principal_name="a",
                principal_type="User",
                host="*",
                operation_type=99,
                permission_type=2,
            )
        )


# ---- SASL/PLAIN and JAAS


def test_jaas_lines_parse_on_both_sides() -> None:
    assert parse_jaas_users(JAAS) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert parse_jaas_users(jaas_for_users({"bob": 'p"w\\x'})) == {"bob": 'p"w\\x'}
    assert parse_jaas_credentials('PlainLoginModule required username="bob" password="pw";') == ("bob", "pw")


def test_plain_authenticator() -> None:
    authenticator = PlainAuthenticator({"alice": "alice-secret"})
    assert authenticator.authenticate("PLAIN", b"\0alice\0alice-secret") == ALICE
    assert authenticator.authenticate("plain", b"alice\0alice\0alice-secret") == ALICE
    for mechanism, token, message in [
        ("PLAIN", b"\0alice\0wrong", "invalid username or password"),
        ("PLAIN", b"\0mallory\0alice-secret", "invalid username or password"),
        ("PLAIN", b"\0alice", "malformed"),
        ("PLAIN", b"\0\0pw", "empty user name"),
        ("PLAIN", b"\0\xff\xfe\0pw", "not UTF-8"),
        ("PLAIN", b"bob\0alice\0alice-secret", "authorization id"),
        ("PLAIN", b"\0alice\0" + b"x" * 5000, "too long"),
        ("SCRAM-SHA-256", b"\0alice\0alice-secret", "not enabled"),
    ]:
        with pytest.raises(AuthenticateError, match=message):
            authenticator.authenticate(mechanism, token)


# ---- listeners and logins


def test_listener_settings() -> None:
    plain = ListenerSettings.from_config(Configuration(), "127.0.0.1", 9123)
    assert plain.bind == (Endpoint("FLUSS", "127.0.0.1", 9123),) and plain.internal == "FLUSS"
    assert not plain.sasl_enabled
    single = ListenerSettings.from_config(Configuration({"security.protocol.map": "CLIENT:SASL"}), "h", 1)
    assert single.bind == (Endpoint("CLIENT", "h", 1),) and single.internal == "CLIENT"
    assert single.protocol("CLIENT") == "SASL"
    two = ListenerSettings.from_config(
        Configuration(
            {
                "bind.listeners": "INTERNAL://10.0.0.1:9122, CLIENT://0.0.0.0:9123",
                "advertised.listeners": "CLIENT://db.example.com:9123",
                "internal.listener.name": "INTERNAL",
                "security.protocol.map": "CLIENT:SASL,INTERNAL:PLAINTEXT",
            }
        ),
        "ignored",
        0,
    )
    assert two.internal_endpoint == Endpoint("INTERNAL", "10.0.0.1", 9122)
    assert two.advertised_endpoint("CLIENT") == Endpoint("CLIENT", "db.example.com", 9123)
    listeners = "INTERNAL://10.0.0.1:9122,CLIENT://db.example.com:9123"
    assert endpoint_on("CLIENT", listeners, ("x", 1)) == ("db.example.com", 9123)
    assert endpoint_on("OTHER", listeners, ("x", 1)) is None
    assert endpoint_on("CLIENT", None, ("x", 1)) == ("x", 1)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"bind.listeners": "CLIENT:9123"}, "LISTENER_NAME://host:port"),
        ({"bind.listeners": "A://h:1,A://h:2"}, "listed twice"),
        ({"bind.listeners": "A://h:1", "internal.listener.name": "B"}, "not one of the bound listeners"),
        ({"security.protocol.map": "CLIENT:KERBEROS"}, "unknown protocol"),
        ({"bind.listeners": "A://h:1", "advertised.listeners": "B://h:1"}, "not bound"),
    ],
)
def test_bad_listener_settings_name_the_problem(config: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        ListenerSettings.from_config(Configuration(config), "h", 1)
    assert parse_endpoints("") == []


def test_servers_derive_their_login_from_the_cluster_configuration() -> None:
    assert cluster_login({}) is None
    login = cluster_login(SASL_CONFIG)
    assert login is not None
    assert (login.username, login.password) == ("admin", "admin-secret")
    explicit = {
        **SASL_CONFIG,
        "client.security.protocol": "SASL",
        "client.security.sasl.username": "alice",
        "client.security.sasl.password": "alice-secret",
    }
    explicit_login = cluster_login(explicit)
    assert explicit_login is not None and explicit_login.username == "alice"
    with pytest.raises(InvalidConfigError, match=r"super\.users"):
        cluster_login({k: v for k, v in SASL_CONFIG.items() if k != "super.users"})
    assert client_properties(SASL_CONFIG) == {
        "client.security.protocol": "SASL",
        "client.security.sasl.username": "admin",
        "client.security.sasl.password": "admin-secret",
    }


def test_sasl_listener_without_users_is_refused() -> None:
    config = Configuration(
        {
            "security.protocol.map": "CLIENT:SASL",
            "client.security.protocol": "SASL",
            "client.security.sasl.username": "a",
            "client.security.sasl.password": "b",
        }
    )
    with pytest.raises(InvalidConfigError, match="has no users"):
        SecuritySettings.from_config(config, ListenerSettings.from_config(config, "h", 1))


# ---- the security layer and its rule table


def layer(config: dict[str, str]) -> SecurityLayer:
    configuration = Configuration(config)
    settings = SecuritySettings.from_config(
        configuration, ListenerSettings.from_config(configuration, "h", 1)
    )
    return SecurityLayer(settings)


def test_every_api_has_a_rule() -> None:
    # a new API key must say what it needs before any server can serve it under an authorizer
    ruled = set(CHECKS) | INTERNAL_APIS | UNCHECKED_APIS
    missing = {key for key in ApiKey if key not in ruled}
    assert not missing, f"APIs without an authorization rule: {sorted(k.name for k in missing)}"


def test_internal_apis_only_for_trusted_sessions() -> None:
    secure = layer(SASL_CONFIG)
    request = pb.NotifyLeaderAndIsrRequest(coordinator_epoch=1)
    secure.check(ApiKey.NOTIFY_LEADER_AND_ISR, request, "CLIENT", ADMIN, "h")  # a super user
    with pytest.raises(AuthorizationError, match="internal API"):
        secure.check(ApiKey.NOTIFY_LEADER_AND_ISR, request, "CLIENT", ALICE, "h")
    fetch = pb.FetchLogRequest(follower_server_id=1, max_bytes=1)
    with pytest.raises(AuthorizationError, match="internal API"):
        secure.check(ApiKey.FETCH_LOG, fetch, "CLIENT", ALICE, "h")
    # the default single PLAINTEXT listener is the internal one: everything passes, as today
    open_layer = layer({})
    open_layer.check(ApiKey.NOTIFY_LEADER_AND_ISR, request, "FLUSS", open_layer.anonymous(), "h")


def test_listings_are_filtered_to_what_the_caller_may_describe() -> None:
    secure = layer(SASL_CONFIG)
    assert secure.authorizer is not None
    grant(secure.authorizer, ALICE, OperationType.READ, Resource.table("shop", "orders"))
    response = pb.ListTablesResponse(table_name=["orders", "secret"])
    secure.filter(
        ApiKey.LIST_TABLES, pb.ListTablesRequest(database_name="shop"), response, "CLIENT", ALICE, "h"
    )
    assert list(response.table_name) == ["orders"]
    exists = pb.TableExistsResponse(exists=True)
    request = pb.TableExistsRequest()
    request.table_path.database_name, request.table_path.table_name = "shop", "secret"
    secure.filter(ApiKey.TABLE_EXISTS, request, exists, "CLIENT", ALICE, "h")
    assert exists.exists is False
