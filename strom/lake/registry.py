"""Which class implements which lake format, loaded only when a format is used.

The tiering service calls `lake_storage_from_config(cluster_config)` (or `load_lake_storage`) and
never imports a format itself, so a new format only needs an entry here (or a
`register_lake_storage` call) and an implementation of `strom.lake.interface`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

from strom.common.errors import InvalidConfigError, LakeStorageNotConfiguredError
from strom.lake.interface import LakeStorage

__all__ = ["lake_storage_from_config", "load_lake_storage", "register_lake_storage", "registered_formats"]

StorageFactory = Callable[[Mapping[str, str]], LakeStorage]

# "module:attribute", imported on first use so that unused formats cost nothing.
_BUILTIN: dict[str, str] = {
    "iceberg": "strom.lake.iceberg.storage:IcebergLakeStorage",
    "paimon": "strom.lake.paimon.storage:PaimonLakeStorage",
    "lance": "strom.lake.lance.storage:LanceLakeStorage",
    "delta": "strom.lake.delta.storage:DeltaLakeStorage",
}
_REGISTERED: dict[str, StorageFactory] = {}


def register_lake_storage(lake_format: str, factory: StorageFactory) -> None:
    """Make `factory(properties)` the implementation of `lake_format` (replaces a built-in)."""
    _REGISTERED[lake_format.strip().lower()] = factory


def registered_formats() -> list[str]:
    return sorted(set(_BUILTIN) | set(_REGISTERED))


def _resolve(name: str) -> StorageFactory:
    if name in _REGISTERED:
        return _REGISTERED[name]
    target = _BUILTIN.get(name)
    if target is None:
        raise InvalidConfigError(
            f"Unknown datalake format '{name}'; supported formats: {', '.join(registered_formats())}."
        )
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise LakeStorageNotConfiguredError(
            f"The '{name}' lake format is not available in this installation: {e}"
        ) from e
    factory: StorageFactory = getattr(module, attr)
    return factory


def load_lake_storage(lake_format: str, properties: Mapping[str, str] | None = None) -> LakeStorage:
    """The lake storage of `lake_format` configured with `properties` (prefix already stripped)."""
    return _resolve(str(lake_format).strip().lower())(dict(properties or {}))


def lake_storage_from_config(config: Mapping[str, str]) -> LakeStorage:
    """From cluster (or tiering-job) options: ``datalake.format`` and ``datalake.<format>.*``."""
    lake_format = config.get("datalake.format")
    if not lake_format:
        raise LakeStorageNotConfiguredError("datalake.format is not set, so no lake storage is configured.")
    name = str(lake_format).strip().lower()
    prefix = f"datalake.{name}."
    properties = {k[len(prefix) :]: str(v) for k, v in config.items() if k.startswith(prefix)}
    return load_lake_storage(name, properties)
