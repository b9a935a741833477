#!/usr/bin/env bash
# Installs Debian's kcat (librdkafka's command-line client) when it is not there yet. `make test` calls
# it: tests/cluster/test_kafka.py produces and consumes with it against a Strom cluster.
set -euo pipefail

if command -v kcat >/dev/null 2>&1 || command -v kafkacat >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "kcat is missing and this is not a Debian-like system: install kcat (or kafkacat)" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi
echo "installing Debian's kcat package"
$SUDO apt-get update -qq
# bookworm and later call it kcat; older releases only have kafkacat
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq kcat >/dev/null 2>&1 \
    || DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq kafkacat >/dev/null
