#!/usr/bin/env bash
# Burrow (Debian's burrow, LinkedIn's consumer lag checker) and ZooKeeper (Debian's
# zookeeper, where Burrow keeps its own state) for tests/compat/test_burrow.py:
# installed with apt-get when missing. Prints nothing when both are there.
set -euo pipefail

missing=()
command -v Burrow >/dev/null 2>&1 || missing+=(burrow)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
[ "${#missing[@]}" -eq 0 ] && exit 0

echo "[rafka setup] installing ${missing[*]} (apt-get) for the Burrow test" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo -n"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
