"""Delta Lake as a lake format (log and primary-key tables), with delta-rs: `strom.lake.delta.storage`."""

from strom.lake.delta.storage import DeltaLakeStorage

__all__ = ["DeltaLakeStorage"]
