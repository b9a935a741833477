"""Tablet servers enforce the coordinator's ACLs: they reload them with ListAcls every
`authorizer.acl-refresh-interval`, so a grant or a revoke reaches every server within that time. When the
coordinator cannot be reached the last ACLs stay in force; before the first load only super users and
internal callers get through.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from strom.common.errors import FlussError
from strom.rpc.api import ApiKey
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.security.acl import AclBinding, AclFilter
from strom.security.authorizer import Authorizer

log = logging.getLogger(__name__)

CoordinatorRequest = Callable[..., Awaitable[Any]]


class AclSync:
    def __init__(self, authorizer: Authorizer, coordinator: CoordinatorRequest, interval: float) -> None:
        self.authorizer = authorizer
        self.coordinator = coordinator
        self.interval = interval
        self.loaded = asyncio.Event()

    async def refresh(self) -> None:
        response = await self.coordinator(
            ApiKey.LIST_ACLS, pb.ListAclsRequest(acl_filter=AclFilter().to_pb()), timeout=10
        )
        self.authorizer.replace_all(AclBinding.from_pb(info) for info in response.acl)
        self.loaded.set()

    async def run(self) -> None:
        failing = False
        while True:
            try:
                await self.refresh()
                if failing:
                    log.info("ACLs reloaded from the coordinator")
                failing = False
            except FlussError as e:
                if not failing:
                    log.warning("cannot reload ACLs from the coordinator (keeping the last ones): %s", e)
                failing = True
            await asyncio.sleep(self.interval)
