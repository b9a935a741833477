"""The on-disk log of one table bucket replica: segments, indexes, writer state, recovery."""

from strom.server.tablet.log.log_config import LogConfig
from strom.server.tablet.log.log_tablet import AppendResult, FetchResult, LogTablet
from strom.server.tablet.log.segment import SegmentInfo

__all__ = ["AppendResult", "FetchResult", "LogConfig", "LogTablet", "SegmentInfo"]
