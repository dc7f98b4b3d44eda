#!/usr/bin/env bash
# Start `vllm serve` with the settings the kit's protocols need (entrypoint of Dockerfile.vllm).
#
#   vllm-serve.sh MODEL [extra vllm serve flags...]
#
# MODEL may also come from $KIT_VLLM_MODEL. Prefix caching is chosen per server process:
# $KIT_PREFIX_CACHING=on (default) or off, or the flag --prefix-caching=on|off given here.
set -euo pipefail

usage() {
    cat <<USAGE
Usage: vllm-serve.sh [--prefix-caching=on|off] MODEL [extra 'vllm serve' flags...]

Runs: vllm serve MODEL --host 0.0.0.0 --port \${KIT_VLLM_PORT:-8000} --max-num-seqs 1 --seed 42
      --max-model-len \${KIT_MAX_MODEL_LEN:-16384} --enable-prompt-tokens-details
      --enable-prefix-caching | --no-enable-prefix-caching
Environment: KIT_VLLM_MODEL, KIT_PREFIX_CACHING (on|off, default on), KIT_VLLM_PORT, KIT_MAX_MODEL_LEN.
USAGE
}

die() {
    printf 'vllm-serve.sh: %s\n' "$*" >&2
    exit 2
}

caching=${KIT_PREFIX_CACHING:-on}
model=${KIT_VLLM_MODEL:-}
while (($#)); do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --prefix-caching=*) caching=${1#*=}; shift ;;
        --) shift; break ;;
        -*) break ;;
        *) model=$1; shift; break ;;
    esac
done
[[ -n $model ]] || { usage >&2; die "no model given; pass MODEL or set KIT_VLLM_MODEL"; }

case $caching in
    on) caching_flag=--enable-prefix-caching ;;
    off) caching_flag=--no-enable-prefix-caching ;;
    *) die "prefix caching must be 'on' or 'off', got '$caching'" ;;
esac

args=(
    serve "$model"
    --host 0.0.0.0
    --port "${KIT_VLLM_PORT:-8000}"
    --max-num-seqs 1
    --seed 42
    --max-model-len "${KIT_MAX_MODEL_LEN:-16384}"
    --enable-prompt-tokens-details
    "$caching_flag"
    "$@"
)
if [[ ${KIT_DRY_RUN:-0} == 1 ]]; then
    printf '%s\n' "vllm ${args[*]}"
    exit 0
fi
exec vllm "${args[@]}"
