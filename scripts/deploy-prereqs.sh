#!/usr/bin/env bash
# What the deploy tier (tests/deploy) needs on this machine, installed with apt-get
# when missing: iproute2 (`ip netns`, the bridge), openssh-server (an sshd per
# namespace host; it brings the ssh client and ssh-keygen) and rsync (`ray up`
# copies file_mounts with it). util-linux's `unshare` is part of every Debian/Ubuntu
# base system. Idempotent: nothing is installed, and apt is not asked, when all are
# present. Run as root (the tier creates network namespaces).
set -euo pipefail

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
{ [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1; } \
    || missing+=(openssh-server openssh-client)
command -v rsync >/dev/null 2>&1 || missing+=(rsync)
[ "${#missing[@]}" -eq 0 ] && exit 0

printf '[rafka deploy] installing %s (apt-get)\n' "${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
# policy-rc.d or not: the packaged sshd service is not needed (each host runs its own)
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
