"""Reading logs: table scans (projection, filter), log scanners, and what they return."""

from strom.client.scanner.filter import ColumnRef, Filter, col
from strom.client.scanner.log_fetcher import EARLIEST_OFFSET
from strom.client.scanner.log_scanner import LogScanner
from strom.client.scanner.scan_records import ScanBatch, ScanRecord, ScanRecords
from strom.client.scanner.table_scan import TableScan

__all__ = [
    "EARLIEST_OFFSET",
    "ColumnRef",
    "Filter",
    "LogScanner",
    "ScanBatch",
    "ScanRecord",
    "ScanRecords",
    "TableScan",
    "col",
]
