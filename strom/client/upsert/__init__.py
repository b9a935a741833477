"""Writing to primary-key tables: upsert writers (rows, Arrow, pandas, changelogs; partial updates).

`upsert_writer` is the public face, `key_routing` computes key bytes, buckets and partitions as pyfluss
does, `kv_write_batch` holds encoded KV records per bucket, and `kv_writer_client` runs them through
the append writer's accumulator, sender and idempotence machinery as PutKv requests.
"""

from strom.client.upsert.upsert_writer import TableUpsert, UpsertWriter, change_types_of

__all__ = ["TableUpsert", "UpsertWriter", "change_types_of"]
