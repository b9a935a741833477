"""DescribeClusterConfigs (1045) and AlterClusterConfigs (1046) on the coordinator: the cluster's
dynamic config values, kept as one metadata-store document and applied here at once; tablet servers
pick them up on their next refresh (`strom/server/dynamic_config.py`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from strom.common import config as options
from strom.common.errors import ConfigError
from strom.rpc.gen import fluss_api_pb2 as pb
from strom.server.coordinator.controller import Controller
from strom.server.dynamic_config import DynamicConfig, altered
from strom.server.store.base import MetadataStore
from strom.server.store.ordered import OrderedStore

log = logging.getLogger(__name__)

DOCUMENT = "cluster-config/dynamic"


class ClusterConfigService:
    def __init__(self, store: OrderedStore, dynamic: DynamicConfig, controller: Controller) -> None:
        self.store = store
        self.dynamic = dynamic
        dynamic.on_change(options.LOG_REPLICA_MIN_IN_SYNC_REPLICAS_NUMBER, self._set_min_isr(controller))

    @staticmethod
    def _set_min_isr(controller: Controller) -> Callable[[int], None]:
        def apply(value: int) -> None:
            controller.min_isr = value or 1

        return apply

    def stored(self) -> dict[str, str]:
        raw = self.store.get_document(DOCUMENT)
        return {} if raw is None else dict(json.loads(raw))

    def load(self) -> None:
        """The values stored by earlier coordinators, applied at take-over."""
        self.dynamic.update(self.stored())

    async def describe(
        self, request: pb.DescribeClusterConfigsRequest, ctx: object
    ) -> pb.DescribeClusterConfigsResponse:
        response = pb.DescribeClusterConfigsResponse()
        for key, value, source in self.dynamic.describe():
            response.configs.add(config_key=key, config_value=value, config_source=source)
        return response

    async def alter(
        self, request: pb.AlterClusterConfigsRequest, ctx: object
    ) -> pb.AlterClusterConfigsResponse:
        changes = [
            (c.config_key, c.config_value if c.HasField("config_value") else None, c.op_type)
            for c in request.alter_configs
        ]
        if not changes:
            return pb.AlterClusterConfigsResponse()
        for key, value, _ in changes:
            # proto2 strings are not checked: a sender's invalid UTF-8 arrives as bytes
            if not isinstance(key, str) or not isinstance(value, str | None):
                raise ConfigError(f"config key {key!r} or its value is not valid UTF-8")

        def write(store: MetadataStore) -> dict[str, str]:
            raw = store.get_document(DOCUMENT)
            values = altered({} if raw is None else json.loads(raw), changes)  # raises before writing
            store.put_document(DOCUMENT, json.dumps(values, sort_keys=True).encode())
            return values

        values = await self.store.atomically(write)
        self.dynamic.update(values)
        log.info("dynamic cluster configs altered: %s", ", ".join(f"{k} ({op})" for k, _, op in changes))
        return pb.AlterClusterConfigsResponse()
