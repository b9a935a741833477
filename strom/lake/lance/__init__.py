"""Lance as a lake format for log tables, through pylance: see `strom.lake.lance.storage`."""

from strom.lake.lance.storage import LanceLakeStorage

__all__ = ["LanceLakeStorage"]
