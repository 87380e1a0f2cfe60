#!/usr/bin/env bash
# Run a command inside rafka's own virtualenv, creating it first on a fresh machine.
#
#   bash scripts/run.sh rafka demo      # the embedded end-to-end scenario
#   bash scripts/run.sh pytest          # every test tier (-m core for the fast one)
#
# Set-up is idempotent: the venv is rebuilt only when pyproject.toml or
# constraints.txt changed (a stamp file holds their hash). A JDK is installed with
# apt-get when `java` is missing, since Spark (through RayDP) needs one, and kcat
# when missing, for the compat tier.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="${RAFKA_VENV:-$repo/.venv}"
python_bin="${PYTHON:-python3.11}"
command -v "$python_bin" >/dev/null 2>&1 || python_bin=python3

log() { printf '[rafka setup] %s\n' "$*" >&2; }

apt_install() {   # apt_install PACKAGE COMMAND: COMMAND is missing on this (fresh) machine
    log "$2 not found: installing $1 (apt-get)"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$1" >/dev/null
}

ensure_java() {   # Spark (through RayDP) needs a JDK
    command -v java >/dev/null 2>&1 || apt_install openjdk-17-jdk-headless java
}

ensure_kcat() {   # the compat tier drives rafka with kcat (librdkafka's CLI)
    command -v kcat >/dev/null 2>&1 || apt_install kcat kcat
}

ensure_venv() {
    local stamp="$venv/.rafka-stamp"
    local want
    want=$(cat "$repo/pyproject.toml" "$repo/constraints.txt" | sha256sum | cut -d' ' -f1)
    if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
        && "$venv/bin/python" -c "import rafka" >/dev/null 2>&1; then
        return
    fi
    log "creating virtualenv $venv with $("$python_bin" --version 2>&1)"
    [ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q -c "$repo/constraints.txt" -e "$repo[test]"
    echo "$want" > "$stamp"
}

ensure_java
ensure_kcat
ensure_venv
export PATH="$venv/bin:$PATH"
# Spark executors start Python workers: they must run the driver's interpreter, or
# they cannot import pyspark (RayDP on Ray 2.60).
export PYSPARK_PYTHON="$venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$venv/bin/python"
cd "$repo"
if [ "$#" -eq 0 ]; then set -- rafka demo; fi
exec "$@"
