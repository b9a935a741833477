"""How a server reads its start-up configuration: flags over the file, Fluss's keys honoured or
refused, typos named; and which lake `strom local` sets up."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from strom.common import config as options
from strom.common.config import Configuration
from strom.common.errors import InvalidConfigError
from strom.common.lake_enablement import cluster_lake_enabled, cluster_lake_format, table_lake_enabled
from strom.server import server_options
from strom.server.local_cluster import LocalClusterSettings, chosen_lake_format


def tablet_address(
    host: str | None, port: int | None, config: dict[str, str], pairs: dict[str, str] | None = None
) -> tuple[str, int, dict[str, str]]:
    return server_options.listen_address(
        host, port, config, pairs or {}, options.TABLET_SERVER_HOST, options.TABLET_SERVER_PORT, "127.0.0.1"
    )


def test_bind_listeners_from_the_file_unless_flags_override_them() -> None:
    file = {"bind.listeners": "FLUSS://10.0.0.5:9124"}
    host, _, config = tablet_address(None, None, file)
    assert host == "10.0.0.5" and config["bind.listeners"] == "FLUSS://10.0.0.5:9124"
    host, port, config = tablet_address("127.0.0.1", 0, file)
    assert (host, port) == ("127.0.0.1", 0) and "bind.listeners" not in config
    # bind.listeners as --config is as explicit as the flags, and names more: it decides
    listeners = {"bind.listeners": "INTERNAL://127.0.0.1:9130,CLIENT://127.0.0.1:9131"}
    host, _, config = tablet_address("127.0.0.1", 9130, file, listeners)
    assert config["bind.listeners"] == listeners["bind.listeners"]


def test_deprecated_host_and_port_keys_apply_without_bind_listeners() -> None:
    deprecated = {"tablet-server.host": "127.0.0.2", "tablet-server.port": "9200"}
    host, port, _ = tablet_address(None, None, deprecated)
    assert (host, port) == ("127.0.0.2", 9200)
    host, port, _ = tablet_address(None, 9300, {"tablet-server.port": "9200"})
    assert (host, port) == ("127.0.0.1", 9300)
    _, port, _ = server_options.listen_address(
        None, None, {}, {}, options.COORDINATOR_HOST, options.COORDINATOR_PORT, "127.0.0.1"
    )
    assert port == 9123  # Fluss's coordinator port
    with pytest.raises(InvalidConfigError, match=r"tablet-server\.port"):
        tablet_address(None, None, {"tablet-server.port": "nine"})


def test_server_id_and_data_dir_flags_win_over_the_file() -> None:
    conf = Configuration({"tablet-server.id": "7", "data.dir": "/var/fluss"})
    assert server_options.tablet_server_id(None, conf) == 7
    assert server_options.tablet_server_id(3, conf) == 3
    assert server_options.data_dir(None, conf) == Path("/var/fluss")
    assert server_options.data_dir(Path("/elsewhere"), conf) == Path("/elsewhere")
    assert server_options.data_dir(None, Configuration()) == Path("/tmp/fluss-data")
    with pytest.raises(InvalidConfigError, match=r"tablet-server\.id"):
        server_options.tablet_server_id(None, Configuration())
    with pytest.raises(InvalidConfigError, match=">= 0"):
        server_options.tablet_server_id(-1, conf)


def test_remote_data_dirs_one_honoured_several_refused() -> None:
    assert server_options.remote_data_dir(Configuration({"remote.data.dir": "/r"})) == "/r"
    one = Configuration({"remote.data.dir": "/r", "remote.data.dirs": "s3://b/fluss"})
    assert server_options.remote_data_dir(one) == "s3://b/fluss"
    with pytest.raises(InvalidConfigError, match="lists 2 directories"):
        server_options.check_server_config(Configuration({"remote.data.dirs": "/a,/b"}))


def test_a_typo_names_the_key_meant(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="strom.server.server_options"):
        server_options.check_server_config(
            Configuration(
                {
                    "tablet-server.rak": "r1",
                    "datalake.iceberg.type": "sql",  # lake catalog properties are known families
                    "recovery.zookeeper.client.session-timeout": "5s",  # a fallback key
                    "zzz": "1",
                }
            )
        )
    assert "'tablet-server.rak' is ignored; did you mean 'tablet-server.rack'?" in caplog.text
    assert "unknown configuration key 'zzz' is ignored\n" in caplog.text + "\n"
    assert "datalake.iceberg.type" not in caplog.text and "recovery.zookeeper" not in caplog.text


def test_strom_local_lake_choice() -> None:
    assert chosen_lake_format(None, True, {}) == "iceberg"
    assert chosen_lake_format(None, False, {}) == "none"  # --no-tiering: no lake unless asked
    assert chosen_lake_format("paimon", False, {}) == "paimon"
    assert chosen_lake_format("none", True, {"datalake.format": "paimon"}) == "paimon"
    no_lake = LocalClusterSettings(Path("/d"), lake_format="none").server_config()
    assert not any(k.startswith("datalake.") for k in no_lake)
    assert no_lake["remote.data.dir"] == "/d/remote"
    assert not cluster_lake_enabled(Configuration(no_lake))
    iceberg = LocalClusterSettings(Path("/d"), tiering=False, lake_format="iceberg").server_config()
    assert iceberg["datalake.format"] == "iceberg" and cluster_lake_enabled(Configuration(iceberg))


def test_lake_enablement_in_one_place() -> None:
    assert cluster_lake_enabled(Configuration({"datalake.format": "paimon"}))
    prebound = Configuration({"datalake.format": "paimon", "datalake.enabled": "false"})
    assert not cluster_lake_enabled(prebound)
    assert cluster_lake_format(prebound) is options.DataLakeFormat.PAIMON  # Fluss pre-binds the format
    assert cluster_lake_format(Configuration()) is None
    assert table_lake_enabled({"table.datalake.enabled": "TRUE"})
    assert not table_lake_enabled({"table.datalake.enabled": "false"}) and not table_lake_enabled({})
