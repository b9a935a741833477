"""Apache Paimon as a lake format, through pypaimon: see `strom.lake.paimon.storage`."""

from strom.lake.paimon.storage import PaimonLakeStorage

__all__ = ["PaimonLakeStorage"]
