#!/usr/bin/env bash
# Installs Debian's zookeeper package (ZooKeeper 3.8 on the system Java) when it is not there yet.
# `make test` and `make run ARGS=--zookeeper` call it; `strom local --zookeeper` and the tests run it.
set -euo pipefail

if [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ZooKeeper is missing and this is not a Debian-like system: install ZooKeeper 3.8 so that" \
         "/usr/share/java/zookeeper.jar exists, and Java 17" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi
echo "installing Debian's zookeeper package"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq zookeeper >/dev/null
