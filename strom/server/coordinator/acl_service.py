"""CreateAcls, ListAcls and DropAcls on the coordinator, which owns the ACLs.

Each resource's entries are one document in the metadata store (`acl/<TYPE>/<name>`), so they survive
restarts and live in ZooKeeper when the cluster does. Managing the ACLs of a resource needs ALL on it
(for a table: on its database), as in Fluss; tablet servers mirror the ACLs by listing them.
"""

from __future__ import annotations

import asyncio
import logging

from strom.common.errors import AuthorizationError, FlussError, SecurityDisabledError
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.rpc.server import RequestContext
from strom.security.acl import (
    AclBinding,
    AclEntry,
    AclFilter,
    OperationType,
    Resource,
    ResourceType,
    decode_entries,
    encode_entries,
)
from strom.security.authorizer import Authorizer
from strom.security.layer import SecurityLayer
from strom.server.store.ordered import OrderedStore

log = logging.getLogger(__name__)

DOCUMENT_PREFIX = "acl/"


def _document_key(resource: Resource) -> str:
    return f"{DOCUMENT_PREFIX}{resource.type.name}/{resource.name}"


class AclService:
    def __init__(self, store: OrderedStore, security: SecurityLayer) -> None:
        self.store = store
        self.security = security
        self._lock = asyncio.Lock()
        if security.authorizer is not None:
            security.authorizer.replace_all(self._load())

    def _load(self) -> list[AclBinding]:
        bindings: list[AclBinding] = []
        for key, value in self.store.list_documents(DOCUMENT_PREFIX):
            type_name, _, name = key[len(DOCUMENT_PREFIX) :].partition("/")
            resource = Resource(ResourceType[type_name], name)
            bindings.extend(AclBinding(resource, entry) for entry in decode_entries(value))
        return bindings

    def _authorizer(self) -> Authorizer:
        if self.security.authorizer is None:
            raise SecurityDisabledError("ACLs need authorizer.enabled: true on the servers")
        return self.security.authorizer

    def _may_manage(self, ctx: RequestContext, resource: Resource) -> bool:
        session = ctx.session
        return self.security.is_trusted(session.listener, session.principal) or self.security.may(
            session.principal, session.host, OperationType.ALL, resource.acl_owner()
        )

    async def _store(self, authorizer: Authorizer, resource: Resource, entries: frozenset[AclEntry]) -> None:
        if entries:
            await self.store.put_document(_document_key(resource), encode_entries(set(entries)))
        else:
            await self.store.delete_documents(_document_key(resource))
        authorizer.set_entries(resource, entries)

    async def create_acls(self, request: pb.CreateAclsRequest, ctx: RequestContext) -> pb.CreateAclsResponse:
        authorizer = self._authorizer()
        response = pb.CreateAclsResponse()
        async with self._lock:
            for info in request.acl:
                result = response.aclRes.add()
                result.acl.CopyFrom(info)
                try:
                    binding = AclBinding.from_pb(info)
                    binding.validate()
                    resource = Resource.of(binding.resource.type, binding.resource.name)
                    if not self._may_manage(ctx, resource):
                        raise AuthorizationError(
                            f"Principal {ctx.session.principal} has no authorization to operate ALL on "
                            f"resource {resource.acl_owner()} (needed to manage ACLs of {resource})"
                        )
                    entries = authorizer.entries(resource) | {binding.entry}
                    await self._store(authorizer, resource, entries)
                    log.info("ACL added by %s: %s %s", ctx.session.principal, resource, binding.entry)
                except FlussError as e:
                    result.error_code = e.code
                    result.error_message = e.message
        return response

    async def list_acls(self, request: pb.ListAclsRequest, ctx: RequestContext) -> pb.ListAclsResponse:
        return self.security.list_acls(request, ctx.session)

    async def drop_acls(self, request: pb.DropAclsRequest, ctx: RequestContext) -> pb.DropAclsResponse:
        authorizer = self._authorizer()
        response = pb.DropAclsResponse()
        async with self._lock:
            for message in request.acl_filter:
                result = response.filter_results.add()
                try:
                    acl_filter = AclFilter.from_pb(message)
                except FlussError as e:
                    result.error_code, result.error_message = e.code, e.message
                    continue
                matching = authorizer.bindings(acl_filter)
                for resource in sorted({b.resource for b in matching}):
                    removed = [b for b in matching if b.resource == resource]
                    if not self._may_manage(ctx, resource):
                        error = AuthorizationError(
                            f"Principal {ctx.session.principal} has no authorization to operate ALL on "
                            f"resource {resource.acl_owner()} (needed to manage ACLs of {resource})"
                        )
                        for binding in removed:
                            entry = result.matching_acls.add(error_code=error.code)
                            entry.error_message = error.message
                            entry.acl.CopyFrom(binding.to_pb())
                        continue
                    remaining = authorizer.entries(resource) - {b.entry for b in removed}
                    await self._store(authorizer, resource, remaining)
                    for binding in removed:
                        result.matching_acls.add().acl.CopyFrom(binding.to_pb())
                        log.info("ACL removed by %s: %s %s", ctx.session.principal, resource, binding.entry)
        return response
