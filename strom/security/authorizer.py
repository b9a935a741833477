"""The ACL authorizer (Fluss's DefaultAuthorizer semantics).

A principal may do an operation on a resource when it is a super user, or when an ALLOW entry for it
(or for `*`), from its host (or `*`), for that operation (or ALL) exists on the resource, on a resource
that contains it (a table's database, the cluster), or on the wildcard resource of the same type.
Any of READ, WRITE, CREATE, DROP, ALTER implies DESCRIBE. No entry means no access.
"""

from __future__ import annotations

from collections.abc import Iterable

from strom.security.acl import (
    ANY_PRINCIPAL,
    WILDCARD,
    AclBinding,
    AclEntry,
    AclFilter,
    OperationType,
    Principal,
    Resource,
)

_IMPLIES_DESCRIBE = frozenset(
    {
        OperationType.DESCRIBE,
        OperationType.READ,
        OperationType.WRITE,
        OperationType.CREATE,
        OperationType.DROP,
        OperationType.ALTER,
    }
)


class Authorizer:
    """An in-memory ACL cache; the coordinator persists it, tablet servers mirror the coordinator's."""

    def __init__(self, super_users: Iterable[Principal] = ()) -> None:
        self.super_users = frozenset(super_users)
        self._acls: dict[Resource, frozenset[AclEntry]] = {}

    # ---- the cache

    def entries(self, resource: Resource) -> frozenset[AclEntry]:
        return self._acls.get(resource, frozenset())

    def set_entries(self, resource: Resource, entries: Iterable[AclEntry]) -> None:
        entries = frozenset(entries)
        if entries:
            self._acls[resource] = entries
        else:
            self._acls.pop(resource, None)

    def replace_all(self, bindings: Iterable[AclBinding]) -> None:
        acls: dict[Resource, set[AclEntry]] = {}
        for binding in bindings:
            acls.setdefault(binding.resource, set()).add(binding.entry)
        self._acls = {resource: frozenset(entries) for resource, entries in acls.items()}

    def bindings(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        result = [
            AclBinding(resource, entry) for resource, entries in self._acls.items() for entry in entries
        ]
        if acl_filter is not None:
            result = [b for b in result if acl_filter.matches(b)]
        return sorted(result)

    # ---- decisions

    def is_super_user(self, principal: Principal | None) -> bool:
        return principal is not None and principal in self.super_users

    def is_authorized(
        self, principal: Principal | None, host: str, operation: OperationType, resource: Resource
    ) -> bool:
        if principal is None:
            return False
        if principal in self.super_users:
            return True
        wanted = _IMPLIES_DESCRIBE if operation == OperationType.DESCRIBE else {operation}
        for candidate in resource.parents():
            for bound in (candidate, Resource(candidate.type, WILDCARD)):
                for entry in self._acls.get(bound, ()):
                    if (
                        (entry.operation in wanted or entry.operation == OperationType.ALL)
                        and entry.host in (WILDCARD, host)
                        and _principal_matches(entry.principal, principal)
                    ):
                        return True
        return False

    def has_any_grant(self, principal: Principal | None, host: str, operation: OperationType) -> bool:
        """True when the principal may do `operation` on at least one resource (or is a super user)."""
        if principal is None:
            return False
        if principal in self.super_users:
            return True
        return any(
            entry.operation in (operation, OperationType.ALL)
            and entry.host in (WILDCARD, host)
            and _principal_matches(entry.principal, principal)
            for entries in self._acls.values()
            for entry in entries
        )


def _principal_matches(bound: Principal, principal: Principal) -> bool:
    if bound in (principal, ANY_PRINCIPAL):
        return True
    return bound.type == principal.type and bound.name == WILDCARD
