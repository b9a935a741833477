"""Reading logs: table scans (projection, filter, startup mode), log scanners, and what they return;
KV snapshots and the current rows of primary-key table buckets."""

from strom.client.scanner.bucket_state import merge_changes, read_bucket_state
from strom.client.scanner.filter import ColumnRef, Filter, col
from strom.client.scanner.kv_scanner import KvScanner
from strom.client.scanner.log_fetcher import EARLIEST_OFFSET
from strom.client.scanner.log_scanner import LogScanner
from strom.client.scanner.scan_records import ScanBatch, ScanRecord, ScanRecords
from strom.client.scanner.snapshot_reader import BucketSnapshot, SnapshotInfo, SnapshotReader
from strom.client.scanner.startup import StartupMode, StartupSpec
from strom.client.scanner.table_scan import TableScan

__all__ = [
    "EARLIEST_OFFSET",
    "BucketSnapshot",
    "ColumnRef",
    "Filter",
    "KvScanner",
    "LogScanner",
    "ScanBatch",
    "ScanRecord",
    "ScanRecords",
    "SnapshotInfo",
    "SnapshotReader",
    "StartupMode",
    "StartupSpec",
    "TableScan",
    "col",
    "merge_changes",
    "read_bucket_state",
]
