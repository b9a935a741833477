"""Strom's asyncio client: connection, metadata cache, admin, writers, scanners and lookups.

async with await Connection.create({"bootstrap.servers": "127.0.0.1:9123"}) as connection:
    admin = connection.get_admin()
    await admin.create_database("shop", ignore_if_exists=True)
"""

from strom.client.admin import Admin, PartitionInfo, SchemaInfo
from strom.client.cluster import ServerNode
from strom.client.config import ClientConfig, ClientConfigError
from strom.client.connection import Connection
from strom.client.lookup import Lookuper, PrefixLookuper
from strom.client.offset_spec import OffsetSpec
from strom.client.snapshots import KvSnapshots, LakeSnapshot
from strom.client.table import Table
from strom.client.table_change import TableChange
from strom.client.upsert import UpsertWriter
from strom.common.errors import FlussError
from strom.common.partition import PartitionSpec
from strom.common.schema import Column, Schema
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import DatabaseDescriptor, DatabaseInfo, TableDescriptor, TableInfo
from strom.common.table_path import PhysicalTablePath, TablePath
from strom.rpc.api import ServerType
from strom.security.acl import (
    AclBinding,
    AclEntry,
    AclFilter,
    OperationType,
    PermissionType,
    Principal,
    Resource,
    ResourceType,
)

__all__ = [
    "AclBinding",
    "AclEntry",
    "AclFilter",
    "Admin",
    "ClientConfig",
    "ClientConfigError",
    "Column",
    "Connection",
    "DatabaseDescriptor",
    "DatabaseInfo",
    "FlussError",
    "KvSnapshots",
    "LakeSnapshot",
    "Lookuper",
    "OffsetSpec",
    "OperationType",
    "PartitionInfo",
    "PartitionSpec",
    "PermissionType",
    "PhysicalTablePath",
    "PrefixLookuper",
    "Principal",
    "Resource",
    "ResourceType",
    "Schema",
    "SchemaInfo",
    "ServerNode",
    "ServerType",
    "Table",
    "TableBucket",
    "TableChange",
    "TableDescriptor",
    "TableInfo",
    "TablePath",
    "UpsertWriter",
]
