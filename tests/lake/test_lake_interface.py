"""The format-neutral parts: the fluss-offsets property and the format registry."""

from __future__ import annotations

import pytest
from lake_helpers import table_info

from strom.common import types as T
from strom.common.table_bucket import TableBucket
from strom.common.table_descriptor import TableInfo
from strom.lake import BucketOffset, LakeStorage, load_lake_storage, register_lake_storage, registered_formats
from strom.lake.interface import LakeCatalog, LakeCommitter, LakeWriter, split_bucket
from strom.lake.offsets import decode_bucket_offsets, encode_bucket_offsets, is_tiering_snapshot


def test_offsets_property_uses_fluss_json_layout() -> None:
    offsets = [
        BucketOffset(None, 2, 9012),
        BucketOffset(None, 0, 1234),
    ]
    assert encode_bucket_offsets(offsets) == '[{"bucket":0,"offset":1234},{"bucket":2,"offset":9012}]'
    partitioned = [BucketOffset(1, 0, 3, "date=2025"), BucketOffset(0, 0, 3, "date=2024")]
    text = encode_bucket_offsets(partitioned)
    assert text == (
        '[{"partition_id":0,"bucket":0,"partition_name":"date=2024","offset":3},'
        '{"partition_id":1,"bucket":0,"partition_name":"date=2025","offset":3}]'
    )
    assert sorted(decode_bucket_offsets(text)) == sorted(partitioned)


@pytest.mark.parametrize("bad", ["", "oss://bucket/offsets-file", "{}", "[1]", '[{"bucket":0}]'])
def test_malformed_offsets_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_bucket_offsets(bad)


def test_tiering_snapshot_recognition() -> None:
    assert is_tiering_snapshot({"commit-user": "__fluss_lake_tiering", "fluss-offsets": "[]"})
    assert not is_tiering_snapshot({"commit-user": "someone", "fluss-offsets": "[]"})
    assert not is_tiering_snapshot({"commit-user": "__fluss_lake_tiering"})


def test_registering_a_format() -> None:
    class FakeStorage(LakeStorage):
        format = "fake"

        def catalog(self) -> LakeCatalog:
            raise NotImplementedError

        def writer(
            self, table_info: TableInfo, bucket: TableBucket | int, partition: str | None = None
        ) -> LakeWriter:
            raise NotImplementedError

        def committer(self, table_info: TableInfo) -> LakeCommitter:
            raise NotImplementedError

    register_lake_storage("Fake", FakeStorage)
    storage = load_lake_storage("FAKE", {"a": 1})  # type: ignore[dict-item]
    assert isinstance(storage, FakeStorage) and storage.properties == {"a": "1"}
    assert {"fake", "iceberg", "paimon"} <= set(registered_formats())


def test_split_bucket() -> None:
    plain = table_info("t", [("a", T.BIGINT())], table_id=5)
    assert split_bucket(plain, 2, None) == TableBucket(5, None, 2)
    parted = table_info("p", [("a", T.BIGINT()), ("d", T.STRING())], partition_keys=["d"], table_id=5)
    assert split_bucket(parted, TableBucket(5, 9, 1), "x") == TableBucket(5, 9, 1)
    with pytest.raises(ValueError):
        split_bucket(parted, 1, "x")
    with pytest.raises(ValueError):
        split_bucket(plain, TableBucket(6, None, 1), None)
