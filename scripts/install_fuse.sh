#!/usr/bin/env bash
# Installs Debian's libfuse3 (the library mfusepy loads) and fusermount3 when they are not there yet.
# `make test` calls it: the power-cut file system of the fault tests (tests/faults/lazyfs.py) needs it.
set -euo pipefail

if ldconfig -p 2>/dev/null | grep 'libfuse3\.so\.3 ' >/dev/null && command -v fusermount3 >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "libfuse3 is missing and this is not a Debian-like system: install libfuse3 and fuse3" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi
echo "installing Debian's libfuse3-3 and fuse3 packages"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libfuse3-3 fuse3 >/dev/null
