"""Delta Lake as a lake format for log tables, through delta-rs: see `strom.lake.delta.storage`."""

from strom.lake.delta.storage import DeltaLakeStorage

__all__ = ["DeltaLakeStorage"]
