"""Make a tiny llama-architecture GGUF with seeded random weights and a real tokenizer's vocabulary.

The file exists to prove an engine build end to end (load, prefill, decode, prompt cache) in seconds,
e.g. a CUDA llama-server on a lent GPU machine (bench/gpu_check.sh). Its answers are noise; what
matters is that llama-server loads it, offloads every layer, and that the same request gives the same
token ids. The same arguments give a byte-identical file.

    python bench/tiny_gguf.py                              # bench/gpu_check/tiny-llama.gguf
    python bench/tiny_gguf.py --vocab-from OTHER.gguf -o out.gguf --embd 32 --layers 1
    python bench/tiny_gguf.py --describe FILE.gguf         # one line: architecture, tensors, sha256

The vocabulary (every `tokenizer.*` key, chat template included) is copied from --vocab-from, by
default the kit's shipped SmolLM2-135M-Instruct model; the model's vocabulary size follows it. Any
GGUF with a tokenizer works, the tiny file itself too (which is how a machine without the kit
regenerates it). Needs numpy and the `gguf` package.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from reset_check import positive  # its neighbour in bench/gpu_check/ (a script's folder is on sys.path)

DEFAULT_OUT = Path(__file__).resolve().parent / "gpu_check" / "tiny-llama.gguf"
ARCH = "llama"
# Small embeddings next to unit-gain blocks: with tied output weights, large embeddings make a random
# model repeat its last input token; these give varied (meaningless) token streams.
EMBD_SCALE = 0.05


class Refused(Exception):
    """A bad input, reported as one line."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_vocab_source() -> Path:
    try:
        from kit.models import DEFAULT_MODEL, ensure_model
    except ImportError as error:
        raise Refused(f"the kit is not importable here ({error}); pass --vocab-from FILE.gguf") from None
    return ensure_model(DEFAULT_MODEL).path


def tokenizer_fields(gguf, source: Path) -> list[tuple[str, object, object, object]]:
    """(key, value, type, sub_type) for every tokenizer.* key of `source`, in file order."""
    try:
        reader = gguf.GGUFReader(source)
    except (OSError, ValueError) as error:
        raise Refused(f"cannot read {source} as GGUF: {error}") from None
    fields = []
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        main = field.types[0]
        sub = field.types[1] if main == gguf.GGUFValueType.ARRAY else None
        fields.append((name, field.contents(), main, sub))
    names = {f[0] for f in fields}
    if not {"tokenizer.ggml.model", "tokenizer.ggml.tokens"} <= names:
        raise Refused(f"{source} carries no tokenizer (tokenizer.ggml.model and tokenizer.ggml.tokens)")
    return fields


def weights(args: argparse.Namespace, n_vocab: int):
    """(name, array) of every tensor, drawn in a fixed order from one seeded generator."""
    import numpy as np

    rng = np.random.default_rng(args.seed)
    matrix_type = np.float16 if args.dtype == "f16" else np.float32
    head_dim = args.embd // args.heads

    def matrix(rows: int, cols: int, scale: float):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype(matrix_type)

    def norm(size: int):
        return np.ones(size, dtype=np.float32)  # norm vectors stay F32, as llama.cpp expects

    # The output projection is tied to the embeddings (llama.cpp uses token_embd when output is absent).
    yield "token_embd.weight", matrix(n_vocab, args.embd, EMBD_SCALE)
    for layer in range(args.layers):
        blk = f"blk.{layer}"
        yield f"{blk}.attn_norm.weight", norm(args.embd)
        yield f"{blk}.attn_q.weight", matrix(args.heads * head_dim, args.embd, args.embd ** -0.5)
        yield f"{blk}.attn_k.weight", matrix(args.kv_heads * head_dim, args.embd, args.embd ** -0.5)
        yield f"{blk}.attn_v.weight", matrix(args.kv_heads * head_dim, args.embd, args.embd ** -0.5)
        yield f"{blk}.attn_output.weight", matrix(args.embd, args.heads * head_dim, args.embd ** -0.5)
        yield f"{blk}.ffn_norm.weight", norm(args.embd)
        yield f"{blk}.ffn_gate.weight", matrix(args.ff, args.embd, args.embd ** -0.5)
        yield f"{blk}.ffn_up.weight", matrix(args.ff, args.embd, args.embd ** -0.5)
        yield f"{blk}.ffn_down.weight", matrix(args.embd, args.ff, args.ff ** -0.5)
    yield "output_norm.weight", norm(args.embd)


def tensor_count(layers: int) -> int:
    """Tensors in a file made with `layers` blocks: embeddings, output norm, 9 per block."""
    return 2 + 9 * layers


def make(args: argparse.Namespace) -> Path:
    import gguf

    source = Path(args.vocab_from) if args.vocab_from else default_vocab_source()
    if not source.is_file():
        raise Refused(f"--vocab-from {source} is not a file")
    fields = tokenizer_fields(gguf, source)
    n_vocab = len(next(f[1] for f in fields if f[0] == "tokenizer.ggml.tokens"))
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(out.name + ".partial")
    V = gguf.GGUFValueType
    writer = gguf.GGUFWriter(staging, arch=ARCH)
    writer.add_key_value("general.name", f"kit tiny llama, random weights (seed {args.seed})", V.STRING)
    writer.add_key_value("general.file_type", 1 if args.dtype == "f16" else 0, V.UINT32)  # MOSTLY_F16 / ALL_F32
    for key, value, vtype in [
        ("context_length", args.ctx, V.UINT32),
        ("embedding_length", args.embd, V.UINT32),
        ("block_count", args.layers, V.UINT32),
        ("feed_forward_length", args.ff, V.UINT32),
        ("attention.head_count", args.heads, V.UINT32),
        ("attention.head_count_kv", args.kv_heads, V.UINT32),
        ("attention.layer_norm_rms_epsilon", 1e-5, V.FLOAT32),
        ("rope.freq_base", 10000.0, V.FLOAT32),
        ("rope.dimension_count", args.embd // args.heads, V.UINT32),
        ("vocab_size", n_vocab, V.UINT32),
    ]:
        writer.add_key_value(f"{ARCH}.{key}", value, vtype)
    for key, value, main, sub in fields:
        writer.add_key_value(key, value, main, sub_type=sub)
    for name, array in weights(args, n_vocab):
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    staging.replace(out)
    return out


def describe(path: Path) -> str:
    """One line about a GGUF: architecture, tensors, vocabulary, context, layers, size, sha256."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as error:
        raise Refused(f"cannot read {path} as GGUF: {error}") from None

    def value(key: str):
        field = reader.fields.get(key)
        return field.contents() if field is not None else None

    arch = value("general.architecture")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    n_vocab = len(tokens.data) if tokens is not None else 0
    return (f"{path.name}: architecture {arch}, {len(reader.tensors)} tensors, vocabulary {n_vocab}, "
            f"context {value(f'{arch}.context_length')}, layers {value(f'{arch}.block_count')}, "
            f"{path.stat().st_size} bytes, sha256 {sha256_file(path)}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tiny_gguf.py", description="Make a tiny llama GGUF with seeded random weights and a real vocabulary.")
    parser.add_argument("-o", "--output", default=str(DEFAULT_OUT), help="where to write (default: %(default)s)")
    parser.add_argument("--vocab-from", metavar="GGUF", help="GGUF to copy the tokenizer from (default: the kit's "
                        "SmolLM2-135M-Instruct model)")
    parser.add_argument("--embd", type=positive, default=64, help="embedding width (default: %(default)s)")
    parser.add_argument("--layers", type=positive, default=4, help="transformer blocks (default: %(default)s)")
    parser.add_argument("--heads", type=positive, default=1, help="attention heads (default: %(default)s; "
                        "head size = embd / heads, 64 by default, which every CUDA attention kernel supports)")
    parser.add_argument("--kv-heads", type=positive, default=1, help="key/value heads (default: %(default)s)")
    parser.add_argument("--ff", type=positive, default=128, help="feed-forward width (default: %(default)s)")
    parser.add_argument("--ctx", type=positive, default=4096, help="trained context length (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=20261007, help="weight seed (default: %(default)s)")
    parser.add_argument("--dtype", choices=("f16", "f32"), default="f16", help="matrix type (default: %(default)s)")
    parser.add_argument("--describe", metavar="GGUF", help="print one line about an existing GGUF and exit")
    args = parser.parse_args(argv)
    if args.embd % args.heads or (args.embd // args.heads) % 2:
        parser.error(f"--embd {args.embd} must split into --heads {args.heads} heads of an even size")
    if args.heads % args.kv_heads:
        parser.error(f"--heads {args.heads} must be a multiple of --kv-heads {args.kv_heads}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        if args.describe:
            path = Path(args.describe)
            if not path.is_file():
                raise Refused(f"{path} is not a file")
            print(describe(path))
            return 0
        out = make(args)
        print(f"{out}: architecture {ARCH}, {tensor_count(args.layers)} tensors, {args.dtype}, "
              f"{out.stat().st_size} bytes, sha256 {sha256_file(out)}")
    except ModuleNotFoundError as error:
        print(f"tiny_gguf.py: {error.name} is not installed (pip install numpy gguf)", file=sys.stderr)
        return 2
    except (Refused, OSError) as error:
        print(f"tiny_gguf.py: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
