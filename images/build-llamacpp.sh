#!/usr/bin/env bash
# Build llama-server (CUDA) at the llama.cpp commit the paper used, and install it into a prefix.
#
# One script for both places a GPU build happens: the build stage of Dockerfile.llamacpp and a
# native build on a GPU pod without Docker. It fetches exactly one commit, refuses to build
# anything else, builds only the llama-server target, copies the binary and its shared libraries
# into PREFIX/bin and PREFIX/lib, and writes PREFIX/build-info.json.
set -euo pipefail

readonly PIN=7e4c0a96880dae4fc4268ad441f8a6446bd5460a
readonly DEFAULT_REPO=https://github.com/ggml-org/llama.cpp.git

usage() {
    cat <<USAGE
Usage: build-llamacpp.sh [options] PREFIX

Build llama-server at llama.cpp commit ${PIN} with CUDA and install it into PREFIX
(PREFIX/bin/llama-server, PREFIX/lib/*.so*, PREFIX/build-info.json).

Options:
  --archs LIST   CUDA architectures, ';'-separated (default: \$CUDA_ARCHITECTURES or 89)
  --src DIR      where the source checkout lives (default: a temporary folder, removed afterwards)
  --repo URL     git remote to fetch the pinned commit from (default: ${DEFAULT_REPO})
  --no-fetch     use the checkout already in --src as it is (offline builds); still verified
  --jobs N       parallel build jobs (default: number of CPUs)
  --portable     add -DGGML_NATIVE=OFF so the CPU code does not use the build machine's
                 instruction set (for images that run on other hosts; the paper built natively)
  --dry-run      print the commands that would run, run nothing
  -h, --help     show this help

The build fails unless the checked-out commit equals the pin.
USAGE
}

die() {
    printf 'build-llamacpp.sh: %s\n' "$*" >&2
    exit 1
}

json_string() {
    # Print $1 as a JSON string literal (escapes backslash, quote and control characters).
    local s=$1
    s=${s//\\/\\\\}
    s=${s//\"/\\\"}
    s=${s//$'\n'/\\n}
    s=${s//$'\t'/\\t}
    printf '"%s"' "$s"
}

archs=${CUDA_ARCHITECTURES:-89}
src=""
repo=$DEFAULT_REPO
fetch=1
jobs=""
portable=0
dry_run=0
prefix=""

while (($#)); do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --archs) [[ $# -ge 2 ]] || die "--archs needs a value"; archs=$2; shift 2 ;;
        --src) [[ $# -ge 2 ]] || die "--src needs a value"; src=$2; shift 2 ;;
        --repo) [[ $# -ge 2 ]] || die "--repo needs a value"; repo=$2; shift 2 ;;
        --jobs) [[ $# -ge 2 ]] || die "--jobs needs a value"; jobs=$2; shift 2 ;;
        --no-fetch) fetch=0; shift ;;
        --portable) portable=1; shift ;;
        --dry-run) dry_run=1; shift ;;
        --) shift; break ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [[ -z $prefix ]] || die "only one PREFIX allowed (got '$prefix' and '$1')"; prefix=$1; shift ;;
    esac
done
if (($#)); then
    [[ -z $prefix && $# -eq 1 ]] || die "only one PREFIX allowed"
    prefix=$1
fi
[[ -n $prefix ]] || { usage >&2; die "missing PREFIX"; }
[[ $archs =~ ^[0-9]+[a-z]?(-real|-virtual)?(\;[0-9]+[a-z]?(-real|-virtual)?)*$ ]] \
    || die "--archs must be a ';'-separated list of CUDA architectures such as 89 or '86;89;90', got '$archs'"
[[ -z $jobs || $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive integer, got '$jobs'"
((fetch || dry_run)) || [[ -n $src ]] || die "--no-fetch needs --src DIR with a llama.cpp checkout"
if [[ -z $jobs ]]; then
    jobs=$(nproc 2>/dev/null || echo 4)
fi

cmake_flags=(
    -DGGML_CUDA=ON
    "-DCMAKE_CUDA_ARCHITECTURES=${archs}"
    -DLLAMA_CURL=OFF
    -DCMAKE_BUILD_TYPE=Release
    # Let the installed binary find its libraries next to it (PREFIX/lib) without LD_LIBRARY_PATH.
    "-DCMAKE_INSTALL_RPATH=\$ORIGIN/../lib"
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
)
if ((portable)); then
    cmake_flags+=(-DGGML_NATIVE=OFF)
fi

if ((dry_run)); then
    src_shown=${src:-"<temporary folder>"}
    if ((fetch)); then
        printf '+ git -C %s fetch --depth 1 %s %s\n' "$src_shown" "$repo" "$PIN"
    fi
    printf '+ verify HEAD == %s\n' "$PIN"
    printf '+ cmake -S %s -B %s/build %s\n' "$src_shown" "$src_shown" "${cmake_flags[*]}"
    printf '+ cmake --build %s/build --config Release --target llama-server -j %s\n' "$src_shown" "$jobs"
    printf '+ install into %s (bin/, lib/, build-info.json)\n' "$prefix"
    exit 0
fi

command -v git >/dev/null || die "git not found; install it (apt-get install -y git)"

cleanup_src=0
if [[ -z $src ]]; then
    src=$(mktemp -d "${TMPDIR:-/tmp}/llamacpp-src.XXXXXX")
    cleanup_src=1
fi
cleanup() {
    if ((cleanup_src)); then
        rm -rf -- "$src"
    fi
}
trap cleanup EXIT

if ((fetch)); then
    mkdir -p "$src"
    if [[ ! -d $src/.git ]]; then
        git -C "$src" init --quiet
    fi
    git -C "$src" fetch --quiet --depth 1 "$repo" "$PIN" \
        || die "could not fetch commit $PIN from $repo"
    git -C "$src" -c advice.detachedHead=false checkout --quiet --force FETCH_HEAD
fi

head=$(git -C "$src" rev-parse HEAD 2>/dev/null) || die "$src is not a git checkout"
[[ $head == "$PIN" ]] || die "checkout in $src is at $head, expected the pinned commit $PIN"

command -v cmake >/dev/null || die "cmake not found; install it (apt-get install -y cmake build-essential)"
command -v nvcc >/dev/null || die "nvcc not found; install the CUDA toolkit or put /usr/local/cuda/bin on PATH"
cuda_release=$(nvcc --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p')
cuda_full=$(nvcc --version | sed -n 's/.*release [0-9.]*, V\([0-9][0-9.]*\).*/\1/p')
[[ -n $cuda_release ]] || die "could not read the CUDA version from 'nvcc --version'"

build=$src/build
cmake -S "$src" -B "$build" "${cmake_flags[@]}"
cmake --build "$build" --config Release --target llama-server -j "$jobs"

binary=$build/bin/llama-server
[[ -x $binary ]] || die "build finished but $binary is missing"

mkdir -p "$prefix/bin" "$prefix/lib"
cp -f "$binary" "$prefix/bin/llama-server"
# Shared libraries (libllama, libggml*, libmtmd) with their version symlinks.
found_lib=0
while IFS= read -r -d '' lib; do
    cp -a "$lib" "$prefix/lib/"
    found_lib=1
done < <(find "$build" \( -name 'lib*.so' -o -name 'lib*.so.*' \) \( -type f -o -type l \) -print0)
((found_lib)) || die "no shared libraries found under $build"

# Every library must resolve except the driver's libcuda, which the host (or the NVIDIA container
# runtime) provides at run time.
unresolved() {
    ldd "$prefix/bin/llama-server" | awk '/not found/ && $1 !~ /^libcuda\.so/ {print $1}'
}
needs_library_path=false
missing=$(unresolved)
if [[ -n $missing ]]; then
    # The RPATH ($ORIGIN/../lib) did not take; the libraries still work through LD_LIBRARY_PATH.
    missing=$(LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" unresolved)
    [[ -z $missing ]] || die "llama-server cannot find: $missing"
    needs_library_path=true
    printf 'build-llamacpp.sh: warning: set LD_LIBRARY_PATH=%s/lib to run llama-server\n' "$prefix" >&2
fi

flags_json=""
for flag in "${cmake_flags[@]}" --target llama-server; do
    flags_json+="${flags_json:+, }$(json_string "$flag")"
done
archs_json=""
IFS=';' read -r -a arch_list <<<"$archs"
for arch in "${arch_list[@]}"; do
    archs_json+="${archs_json:+, }$(json_string "$arch")"
done

cat >"$prefix/build-info.json" <<JSON
{
  "project": "llama.cpp",
  "commit": $(json_string "$PIN"),
  "repository": $(json_string "$repo"),
  "target": "llama-server",
  "cuda_version": $(json_string "$cuda_release"),
  "cuda_version_full": $(json_string "$cuda_full"),
  "cuda_architectures": [${archs_json}],
  "cmake_flags": [${flags_json}],
  "needs_ld_library_path": ${needs_library_path},
  "built_at": $(json_string "$(date -u +%Y-%m-%dT%H:%M:%SZ)")
}
JSON

printf 'llama-server %s (CUDA %s, archs %s) installed in %s\n' "${PIN:0:7}" "$cuda_release" "$archs" "$prefix"
