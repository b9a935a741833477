"""The RocksDB resources every KV tablet of a tablet server shares, so that memory follows the
server's configuration instead of its bucket count (as Flink's RocksDB state backend bounds all its
instances with one managed-memory budget):

* one LRU block cache (`kv.rocksdb.block.cache-size`) for the data blocks of every tablet;
* one WriteBufferManager (`kv.rocksdb.shared-memory.write-buffer-size`) that counts the memtables of
  every tablet and makes RocksDB flush when together they pass the budget;
* RocksDB's background threads, which are one pool per process (RocksDB's default Env) whatever the
  number of databases; `kv.rocksdb.thread.num` bounds how many jobs one tablet runs at once.

What stays per tablet is small and fixed: the database handle, an empty memtable, its files' table
readers (bounded by `kv.rocksdb.files.open`). The memtable prefix bloom filter is left out on purpose:
RocksDB allocates and zeroes it for a full memtable (write buffer size x ratio) when the memtable is
created, which was 6.4 MB of resident memory per tablet at the 64 MB default, for nothing when the
tablet holds a few rows. SST files keep their bloom filters (kv.rocksdb.use-bloom-filter's default).
"""

from __future__ import annotations

from dataclasses import dataclass

from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options, WriteBufferManager

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import InvalidConfigError

__all__ = ["RocksDbSettings", "SharedRocksDb"]


@dataclass(frozen=True, slots=True)
class RocksDbSettings:
    block_cache_bytes: int = 8 << 20
    write_buffer_budget_bytes: int = 256 << 20  # 0: no shared budget
    write_buffer_bytes: int = 64 << 20
    max_write_buffers: int = 2
    max_open_files: int = -1
    background_jobs: int = 2

    @classmethod
    def from_config(cls, config: Configuration) -> RocksDbSettings:
        settings = cls(
            block_cache_bytes=int(config.get(options.KV_ROCKSDB_BLOCK_CACHE_SIZE)),
            write_buffer_budget_bytes=int(config.get(options.KV_ROCKSDB_SHARED_MEMORY_WRITE_BUFFER_SIZE)),
            write_buffer_bytes=int(config.get(options.KV_ROCKSDB_WRITEBUFFER_SIZE)),
            max_write_buffers=config.get(options.KV_ROCKSDB_WRITEBUFFER_COUNT),
            max_open_files=config.get(options.KV_ROCKSDB_FILES_OPEN),
            background_jobs=config.get(options.KV_ROCKSDB_THREAD_NUM),
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        """Refuse what RocksDB would reject or silently misread."""
        if self.write_buffer_bytes <= 0:
            raise InvalidConfigError(
                f"kv.rocksdb.writebuffer.size must be positive, not {self.write_buffer_bytes}"
            )
        if self.max_write_buffers < 1:
            raise InvalidConfigError(
                f"kv.rocksdb.writebuffer.count must be at least 1, not {self.max_write_buffers}"
            )
        if self.max_open_files == 0 or self.max_open_files < -1:
            raise InvalidConfigError(
                f"kv.rocksdb.files.open must be -1 or positive, not {self.max_open_files}"
            )
        if self.background_jobs < 1:
            raise InvalidConfigError(f"kv.rocksdb.thread.num must be at least 1, not {self.background_jobs}")
        if self.block_cache_bytes < 0 or self.write_buffer_budget_bytes < 0:
            raise InvalidConfigError("kv.rocksdb memory sizes must not be negative")


class SharedRocksDb:
    """One per tablet server (the KvManager's): makes the Options of each tablet's database, all
    pointing at the same cache and write-buffer manager."""

    def __init__(self, settings: RocksDbSettings | None = None) -> None:
        self.settings = settings = settings or RocksDbSettings()
        settings.validate()
        self.block_cache = Cache(settings.block_cache_bytes)
        # Not charged to the block cache and never stalling writers: the budget only decides when
        # memtables are flushed, and the cache stays the size the operator gave it.
        self.write_buffer_manager = (
            WriteBufferManager(settings.write_buffer_budget_bytes, False)
            if settings.write_buffer_budget_bytes
            else None
        )

    def options(self) -> Options:
        """Options for one tablet's database."""
        s = self.settings
        db = Options(raw_mode=True)
        db.create_if_missing(True)
        db.set_compression_type(DBCompressionType.lz4())
        db.set_write_buffer_size(s.write_buffer_bytes)
        db.set_max_write_buffer_number(s.max_write_buffers)
        db.set_max_open_files(s.max_open_files)
        db.set_max_background_jobs(s.background_jobs)
        if self.write_buffer_manager is not None:
            db.set_write_buffer_manager(self.write_buffer_manager)
        # RocksDB's own info log: one small file per tablet rather than a growing history of them
        db.set_keep_log_file_num(1)
        db.set_max_log_file_size(1 << 20)
        # Bloom filters in SST files, as Fluss configures them by default (kv.rocksdb.use-bloom-filter,
        # 10 bits per key, full filters), so reading the old row of a new key (every insert) skips
        # the search once the rows are flushed.
        table = BlockBasedOptions()
        table.set_bloom_filter(10, False)
        table.set_block_cache(self.block_cache)
        db.set_block_based_table_factory(table)
        return db

    def block_cache_usage(self) -> int:
        return self.block_cache.get_usage()

    def write_buffer_usage(self) -> int:
        """Bytes of memtables over every tablet (0 without a shared budget)."""
        return 0 if self.write_buffer_manager is None else self.write_buffer_manager.get_usage()
