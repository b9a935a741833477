"""Access control lists as Fluss defines them: principals, resources, entries, bindings and filters.

The numeric codes are Fluss's wire codes (`ResourceType`, `OperationType`, `PermissionType`). A
resource is the cluster, a database or a table ("db.table"); an entry allows one principal, from one
host (or `*`), one operation on it. Only ALLOW entries exist, as in Fluss.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from strom.common.errors import InvalidConfigError
from strom.rpc.gen import fluss_api_pb2 as pb

WILDCARD = "*"
CLUSTER_NAME = "fluss-cluster"  # Fluss's name for the one CLUSTER resource


class ResourceType(enum.IntEnum):
    ANY = 1  # filters only
    CLUSTER = 2
    DATABASE = 3
    TABLE = 4
    # Strom's own: a Kafka consumer group (Fluss has no groups; the code is far from Fluss's and
    # Kafka's numbering so that neither reads it as one of theirs), see docs/kafka.md
    GROUP = 100


class OperationType(enum.IntEnum):
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DROP = 6
    ALTER = 7
    DESCRIBE = 8


class PermissionType(enum.IntEnum):
    ANY = 1  # filters only
    ALLOW = 2


def parse_enum(enum_type: type[enum.IntEnum], text: str) -> enum.IntEnum:
    try:
        return enum_type[text.strip().upper()]
    except KeyError:
        allowed = ", ".join(m.name for m in enum_type)
        raise InvalidConfigError(
            f"unknown {enum_type.__name__} '{text}' (expected one of {allowed})"
        ) from None


def _code(enum_type: type[enum.IntEnum], code: int, what: str) -> enum.IntEnum:
    try:
        return enum_type(code)
    except ValueError:
        raise InvalidConfigError(f"unknown {what} code {code}") from None


@dataclass(frozen=True, slots=True, order=True)
class Principal:
    """Who sent a request: `User:alice` after SASL, `User:ANONYMOUS` on a PLAINTEXT listener."""

    type: str
    name: str

    @classmethod
    def parse(cls, text: str) -> Principal:
        kind, sep, name = text.strip().partition(":")
        if not sep or not kind or not name:
            raise InvalidConfigError(f"principal '{text}' is not of the form Type:name (e.g. User:alice)")
        return cls(kind, name)

    @classmethod
    def user(cls, name: str) -> Principal:
        return cls("User", name)

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


ANONYMOUS = Principal.user("ANONYMOUS")
ANY_PRINCIPAL = Principal(WILDCARD, WILDCARD)


@dataclass(frozen=True, slots=True, order=True)
class Resource:
    type: ResourceType
    name: str

    @classmethod
    def cluster(cls) -> Resource:
        return cls(ResourceType.CLUSTER, CLUSTER_NAME)

    @classmethod
    def database(cls, name: str) -> Resource:
        return cls(ResourceType.DATABASE, name)

    @classmethod
    def table(cls, database: str, table: str) -> Resource:
        return cls(ResourceType.TABLE, f"{database}.{table}")

    @classmethod
    def group(cls, group_id: str) -> Resource:
        return cls(ResourceType.GROUP, group_id)

    @classmethod
    def of(cls, resource_type: ResourceType, name: str | None) -> Resource:
        """A resource from a CLI or request: the cluster's name is implied; tables are `db.table`."""
        if resource_type == ResourceType.CLUSTER:
            return cls.cluster()
        if resource_type not in (ResourceType.DATABASE, ResourceType.TABLE, ResourceType.GROUP):
            raise InvalidConfigError(
                f"ACLs are bound to CLUSTER, DATABASE, TABLE or GROUP, not {resource_type.name}"
            )
        if not name:
            raise InvalidConfigError(f"a {resource_type.name} resource needs a name")
        if resource_type == ResourceType.GROUP and ("/" in name or name in (".", "..")):
            # the metadata store keys ACL documents by type/name, and ZooKeeper paths split on '/'
            raise InvalidConfigError(
                f"group resource '{name}': ACLs cannot name a group with a '/', '.' or '..'"
            )
        if resource_type == ResourceType.TABLE and name != WILDCARD and name.count(".") != 1:
            raise InvalidConfigError(f"table resource '{name}' must be named database.table")
        return cls(resource_type, name)

    def parents(self) -> tuple[Resource, ...]:
        """This resource and those whose ACLs also apply to it (a table's database, the cluster)."""
        if self.type == ResourceType.TABLE:
            return (self, Resource.database(self.name.split(".", 1)[0]), Resource.cluster())
        if self.type in (ResourceType.DATABASE, ResourceType.GROUP):
            return (self, Resource.cluster())  # groups sit under the cluster, as in Kafka
        return (self,)

    def acl_owner(self) -> Resource:
        """The resource whose ALL permission lets a principal manage this resource's ACLs (Fluss: the
        minimum granularity of ACL management is the database)."""
        if self.type == ResourceType.TABLE:
            return Resource.database(self.name.split(".", 1)[0])
        if self.type == ResourceType.GROUP:
            return Resource.cluster()  # groups sit in no database
        return self

    def __str__(self) -> str:
        return f"{self.type.name}:{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class AclEntry:
    principal: Principal
    host: str
    operation: OperationType
    permission: PermissionType = PermissionType.ALLOW

    def to_json(self) -> dict[str, str]:
        return {
            "principal_type": self.principal.type,
            "principal_name": self.principal.name,
            "host": self.host,
            "operation": self.operation.name,
            "permission": self.permission.name,
        }

    @classmethod
    def from_json(cls, data: dict[str, str]) -> AclEntry:
        return cls(
            Principal(data["principal_type"], data["principal_name"]),
            data["host"],
            OperationType[data["operation"]],
            PermissionType[data["permission"]],
        )


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource: Resource
    entry: AclEntry

    def validate(self) -> None:
        entry = self.entry
        if entry.operation == OperationType.ANY:
            raise InvalidConfigError("an ACL needs a concrete operation, not ANY")
        if entry.permission != PermissionType.ALLOW:
            raise InvalidConfigError("only ALLOW ACLs exist")
        if not entry.principal.type or not entry.principal.name:
            raise InvalidConfigError("an ACL needs a principal (Type:name)")
        if not entry.host:
            raise InvalidConfigError("an ACL needs a host ('*' for any)")
        Resource.of(self.resource.type, self.resource.name)

    def to_pb(self) -> pb.PbAclInfo:
        e = self.entry
        return pb.PbAclInfo(
            resource_name=self.resource.name,
            resource_type=int(self.resource.type),
            principal_name=e.principal.name,
            principal_type=e.principal.type,
            host=e.host,
            operation_type=int(e.operation),
            permission_type=int(e.permission),
        )

    @classmethod
    def from_pb(cls, info: pb.PbAclInfo) -> AclBinding:
        resource_type = _code(ResourceType, info.resource_type, "resource type")
        return cls(
            Resource(resource_type, info.resource_name),  # type: ignore[arg-type]
            AclEntry(
                Principal(info.principal_type, info.principal_name),
                info.host,
                _code(OperationType, info.operation_type, "operation"),  # type: ignore[arg-type]
                _code(PermissionType, info.permission_type, "permission"),  # type: ignore[arg-type]
            ),
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Matches bindings; None and the ANY codes match everything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    principal: Principal | None = None
    host: str | None = None
    operation: OperationType = OperationType.ANY
    permission: PermissionType = PermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        r, e = binding.resource, binding.entry
        return (
            (self.resource_type == ResourceType.ANY or self.resource_type == r.type)
            and (self.resource_name is None or self.resource_name == r.name)
            and (self.principal is None or self.principal == e.principal)
            and (self.host is None or self.host == e.host)
            and (self.operation == OperationType.ANY or self.operation == e.operation)
            and (self.permission == PermissionType.ANY or self.permission == e.permission)
        )

    def to_pb(self) -> pb.PbAclFilter:
        message = pb.PbAclFilter(
            resource_type=int(self.resource_type),
            operation_type=int(self.operation),
            permission_type=int(self.permission),
        )
        if self.resource_name is not None:
            message.resource_name = self.resource_name
        if self.principal is not None:
            message.principal_type = self.principal.type
            message.principal_name = self.principal.name
        if self.host is not None:
            message.host = self.host
        return message

    @classmethod
    def from_pb(cls, message: pb.PbAclFilter) -> AclFilter:
        principal = None
        if message.HasField("principal_name"):
            principal = Principal(message.principal_type or "User", message.principal_name)
        return cls(
            _code(ResourceType, message.resource_type, "resource type"),  # type: ignore[arg-type]
            message.resource_name if message.HasField("resource_name") else None,
            principal,
            message.host if message.HasField("host") else None,
            _code(OperationType, message.operation_type, "operation"),  # type: ignore[arg-type]
            _code(PermissionType, message.permission_type, "permission"),  # type: ignore[arg-type]
        )


def encode_entries(entries: set[AclEntry]) -> bytes:
    """The stored form of one resource's ACLs (a document in the metadata store)."""
    return json.dumps(
        {"version": 1, "acls": [e.to_json() for e in sorted(entries)]}, separators=(",", ":")
    ).encode()


def decode_entries(data: bytes) -> set[AclEntry]:
    return {AclEntry.from_json(e) for e in json.loads(data)["acls"]}
