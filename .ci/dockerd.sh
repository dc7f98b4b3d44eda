#!/usr/bin/env bash
# A private Docker daemon for CI and the `docker` test tier; it never touches the machine's default socket.
#
#   .ci/dockerd.sh start DIR   start dockerd with its socket, data, exec root and pid file under DIR;
#                              prints `DOCKER_HOST=unix://DIR/docker.sock` (the only stdout line)
#   .ci/dockerd.sh stop DIR    stop that daemon by its pid file and remove DIR
#
# DIR defaults to $KIT_DOCKERD_DIR or /tmp/kit-dockerd-$UID. Flags (measured on Debian 12's docker.io
# 20.10): no iptables or masquerading, so containers reach nothing outside; a bridge of its own (kit<hash>,
# never docker0) and ports published on loopback (docker-proxy) work; storage overlay2, falling back to vfs where overlay cannot mount (a
# container's own overlay filesystem). A stub `nvidia-container-runtime-hook` is first on the daemon's
# PATH: dockerd 20.10 registers its `nvidia` device driver when that executable exists at start, so a
# GPU request (`--gpus all`) reaches the container (as NVIDIA_VISIBLE_DEVICES) on a machine with no GPU.
set -euo pipefail

cmd=${1:-}
dir=${2:-${KIT_DOCKERD_DIR:-/tmp/kit-dockerd-$(id -u)}}
sock="$dir/docker.sock"
# Its own bridge (not docker0, which another daemon on the machine may own), named and numbered from DIR.
hash=$(printf '%s' "$dir" | md5sum | cut -c1-8)
bridge="kit$hash"
subnet="10.$((0x${hash:0:2} % 200 + 20)).$((0x${hash:2:2})).1/24"

fail() { echo "dockerd.sh: $*" >&2; exit 1; }

running() { [[ -f $dir/dockerd.pid ]] && kill -0 "$(cat "$dir/dockerd.pid")" 2>/dev/null; }

start_with() {  # storage driver
    mkdir -p "$dir/bin" "$dir/data" "$dir/exec"
    cat >"$dir/bin/nvidia-container-runtime-hook" <<'EOF'
#!/bin/sh
# Stub NVIDIA prestart hook (kit CI): makes dockerd register its nvidia driver; gives no GPU.
exit 0
EOF
    chmod +x "$dir/bin/nvidia-container-runtime-hook"
    rm -f "$sock"
    if ! ip link show "$bridge" >/dev/null 2>&1; then
        ip link add name "$bridge" type bridge && ip addr add "$subnet" dev "$bridge" && ip link set "$bridge" up
    fi
    PATH="$dir/bin:$PATH" setsid dockerd --host "unix://$sock" --data-root "$dir/data" --exec-root "$dir/exec" \
        --pidfile "$dir/dockerd.pid" --iptables=false --ip-masq=false --bridge="$bridge" \
        --storage-driver="$1" >>"$dir/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 1 60); do
        if DOCKER_HOST="unix://$sock" docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
            return 0
        fi
        kill -0 $! 2>/dev/null || return 1
        sleep 0.5
    done
    return 1
}

case $cmd in
start)
    command -v dockerd >/dev/null || fail "no dockerd on PATH (apt-get install -y docker.io)"
    command -v docker >/dev/null || fail "no docker client on PATH (apt-get install -y docker.io)"
    [[ $(id -u) -eq 0 ]] || fail "a private dockerd needs root"
    if ! running; then
        mkdir -p "$dir"
        : >"$dir/dockerd.log"
        if ! start_with overlay2; then
            [[ -f $dir/dockerd.pid ]] && kill "$(cat "$dir/dockerd.pid")" 2>/dev/null || true
            sleep 1
            echo "--- overlay2 failed; trying vfs" >>"$dir/dockerd.log"
            start_with vfs || fail "dockerd did not start; see $dir/dockerd.log"
        fi
    fi
    echo "DOCKER_HOST=unix://$sock"
    ;;
stop)
    if running; then
        pid=$(cat "$dir/dockerd.pid")
        kill "$pid"
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    # The daemon's mounts must be gone before its folders can be removed.
    grep -o " $dir/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    ip link show "$bridge" >/dev/null 2>&1 && ip link del "$bridge"
    rm -rf "$dir"
    ;;
*)
    fail "usage: .ci/dockerd.sh start|stop [DIR]"
    ;;
esac
