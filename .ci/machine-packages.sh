#!/usr/bin/env bash
# Debian packages the test suite uses, installed when missing (root only; elsewhere it names them):
# cmake, make and g++ build the embedded engine's portable CPU backend (the README's prerequisite line),
# binutils gives objdump (the test that cross-checks the CPU-extension scanner), chromium renders the
# bundle's HTML report in a real browser, docker.io (dockerd 20.10) and debootstrap run the docker tier
# (a private daemon, .ci/dockerd.sh; a base image made without a registry).
set -euo pipefail

need=()
command -v cmake >/dev/null || need+=(cmake)
{ command -v make >/dev/null && command -v c++ >/dev/null; } || need+=(build-essential)
command -v objdump >/dev/null || need+=(binutils)
command -v chromium >/dev/null || need+=(chromium)
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]} == 0)); then
    echo "machine packages: all present"
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    printf 'machine packages: missing %s; install them (apt-get install -y %s)\n' "${need[*]}" "${need[*]}" >&2
    exit 1
fi
echo "machine packages: installing ${need[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
