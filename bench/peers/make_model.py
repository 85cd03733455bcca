#!/usr/bin/env python3
"""bench/peers/make_model.py: random-weight GGUF files with the exact layer
shapes of Llama-3.2-1B and Llama-3.1-8B, in Q8_0 or in Q4_K_M as llama.cpp's
llama-quantize lays that out, for the CPU engines (Kvasir and llama.cpp).

  bench/peers/make_model.py [--shape 1b|8b] [--type q8_0|q4_k_m] [OUT.gguf]
      default: --shape 1b --type q8_0, OUT under ~/.cache/kvasir/models/
      (random-llama-3.2-1b-shape.Q8_0.gguf, random-llama-3.1-8b-shape.Q4_K_M.gguf,
      ...; shared by the worktrees; a default OUT that exists is not
      rewritten); prints the path

Shapes (the real models' config.json):
  1b: hidden 2,048, 16 layers, 32 heads, 8 KV heads, FFN 8,192, tied
      embeddings (no output.weight), rope theta 500,000;
  8b: hidden 4,096, 32 layers, 32 heads, 8 KV heads, FFN 14,336, untied
      output.weight, rope theta 500,000.
The vocabulary is NOT the real models' 128,256 tokens: both files carry
SmolLM2's 49,152-token vocabulary and tokenizer (copied from
models/SmolLM2-135M-Instruct.Q4_1.gguf) so that the benchmarks' prompts
tokenize on both engines. The embedding and output matrices are therefore
49,152 rows, not 128,256 (1B: 0.10 G of the 1.24 G parameters instead of
0.26 G; 8B: 0.40 G instead of 1.05 G). No rope_freqs tensor (Llama 3's
long-context RoPE scaling): it changes no cost at these context lengths.

Q4_K_M, as llama-quant.cpp (llama_tensor_get_type_impl) picks per tensor:
Q6_K for output.weight (token_embd.weight when the embeddings are tied,
since it is then the output matrix too), and for attn_v / ffn_down on the
layers its use_more_bits rule picks (the first and last eighth of the
layers, and every third one between); Q4_K for everything else (token_embd
of the untied 8B included); norms f32. Q8_0: every matrix Q8_0.

Why: the default model (135M, ~97 MB) fits a large L3, so it measures cache,
not DRAM; 1B- and 8B-class models are what CPU users serve. Weights: random
quants under scales chosen so each weight has std ~0.02 and mean ~0 (norms
1.0): no NaN, no structure the kernels could exploit; timing only, the text
generated is noise. Written tensor by tensor (the 8B Q8_0 file is ~7.6 GB;
the largest tensor held in memory is the 8B embedding, ~0.2 GB).

Runs under bench/peers/python (numpy + gguf); re-runs itself there.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER_FROM = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
MODELS = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kvasir", "models")
VOCAB = 49152
# name: (file stem, model name, hidden, layers, heads, kv heads, ffn, tied embeddings)
SHAPES = {
    "1b": ("random-llama-3.2-1b-shape", "Llama-3.2-1B", 2048, 16, 32, 8, 8192, True),
    "8b": ("random-llama-3.1-8b-shape", "Llama-3.1-8B", 4096, 32, 32, 8, 14336, False),
}
TYPES = {"q8_0": "Q8_0", "q4_k_m": "Q4_K_M"}
QK8_0, QK_K = 32, 256  # values per Q8_0 block / per K-quant super-block
STD = 0.02             # std of every random weight


def reexec():
    if not os.environ.get("KVASIR_PEERS_PY"):
        py = os.path.join(ROOT, "bench", "peers", "python")
        os.execv(py, [py, "--run", os.path.abspath(sys.argv[0])] + sys.argv[1:])


def use_more_bits(i, n):
    """llama-quant.cpp's rule for the layers Q4_K_M gives Q6_K attn_v / ffn_down."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensors(shape, qtype):
    """(name, rows, cols, ggml type name) of every matrix, then the norms (name, n)."""
    _, _, hidden, layers, heads, kv_heads, ffn, tied = SHAPES[shape]
    k_m = qtype == "q4_k_m"
    base = "Q4_K" if k_m else "Q8_0"
    more = lambda i: "Q6_K" if k_m and use_more_bits(i, layers) else base
    kv = kv_heads * (hidden // heads)
    mats = [("token_embd.weight", VOCAB, hidden, "Q6_K" if k_m and tied else base)]
    if not tied:
        mats.append(("output.weight", VOCAB, hidden, "Q6_K" if k_m else base))
    norms = [("output_norm.weight", hidden)]
    for i in range(layers):
        p = f"blk.{i}."
        mats += [(p + "attn_q.weight", hidden, hidden, base), (p + "attn_k.weight", kv, hidden, base),
                 (p + "attn_v.weight", kv, hidden, more(i)), (p + "attn_output.weight", hidden, hidden, base),
                 (p + "ffn_gate.weight", ffn, hidden, base), (p + "ffn_up.weight", ffn, hidden, base),
                 (p + "ffn_down.weight", hidden, ffn, more(i))]
        norms += [(p + "attn_norm.weight", hidden), (p + "ffn_norm.weight", hidden)]
    return mats, norms


def f16_bytes(np, values):
    """(n,) float values as (n, 2) uint8: little-endian fp16."""
    return np.asarray(values, dtype="<f2").view(np.uint8).reshape(-1, 2)


def q8_0(np, rng, rows, cols):
    """Q8_0 blocks { f16 d; i8 q[32] }: w = d * q, q uniform in [-127, 127] (std ~73.6)."""
    q = rng.integers(-127, 128, size=(rows, cols // QK8_0, 2 + QK8_0), dtype=np.int8).view(np.uint8)
    q[:, :, 0:2] = f16_bytes(np, [STD / 73.6])[0]
    return q.reshape(rows, -1)


def pack_k_scales(np, sc, m):
    """ggml's 12-byte packing of 8 six-bit scales and 8 six-bit mins (get_scale_min_k4)."""
    out = np.zeros(sc.shape[:-1] + (12,), dtype=np.uint8)
    out[..., 0:4] = (sc[..., 0:4] & 63) | ((sc[..., 4:8] >> 4) << 6)
    out[..., 4:8] = (m[..., 0:4] & 63) | ((m[..., 4:8] >> 4) << 6)
    out[..., 8:12] = (sc[..., 4:8] & 15) | ((m[..., 4:8] & 15) << 4)
    return out


def q4_k(np, rng, rows, cols):
    """Q4_K super-blocks { f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }:
    w = d*sc*q - dmin*m per 32-weight sub-block, q uniform in 0..15 (mean 7.5,
    std 4.6), sc in 32..63, m ~ sc*7.5/8 with dmin = 8d so the mean is ~0."""
    nb = cols // QK_K
    blk = np.empty((rows, nb, 144), dtype=np.uint8)
    d = STD / (47.5 * 4.6)
    blk[:, :, 0:2] = f16_bytes(np, [d])[0]
    blk[:, :, 2:4] = f16_bytes(np, [8 * d])[0]
    sc = rng.integers(32, 64, size=(rows, nb, 8), dtype=np.uint8)
    m = np.rint(sc * (7.5 / 8)).astype(np.uint8)
    blk[:, :, 4:16] = pack_k_scales(np, sc, m)
    blk[:, :, 16:144] = rng.integers(0, 256, size=(rows, nb, 128), dtype=np.uint8)
    return blk.reshape(rows, -1)


def q6_k(np, rng, rows, cols):
    """Q6_K super-blocks { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d }:
    w = d*sc*(q - 32), q uniform in 0..63 (std 18.5), sc in 16..63."""
    nb = cols // QK_K
    blk = np.empty((rows, nb, 210), dtype=np.uint8)
    blk[:, :, 0:192] = rng.integers(0, 256, size=(rows, nb, 192), dtype=np.uint8)
    blk[:, :, 192:208] = rng.integers(16, 64, size=(rows, nb, 16), dtype=np.uint8)
    blk[:, :, 208:210] = f16_bytes(np, [STD / (39.5 * 18.5)])[0]
    return blk.reshape(rows, -1)


# ggml type name -> (bytes per block, values per block, writer)
QUANTS = {"Q8_0": (34, QK8_0, q8_0), "Q4_K": (144, QK_K, q4_k), "Q6_K": (210, QK_K, q6_k)}


def copy_tokenizer(w, src):
    import gguf
    for f in gguf.GGUFReader(src).fields.values():
        if not f.name.startswith("tokenizer."):
            continue
        vt = f.types[0]
        sub = f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), vt, sub_type=sub)


def header(w, shape, qtype):
    import gguf
    _, real, hidden, layers, heads, kv_heads, ffn, _ = SHAPES[shape]
    w.add_name(f"random {real.lower()} shape (smollm2 vocabulary)")
    w.add_context_length(8192)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(hidden // heads)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if qtype == "q8_0" else gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    copy_tokenizer(w, TOKENIZER_FROM)


def write(out, shape, qtype):
    """Header, tensor infos, then each tensor's data as it is made (streaming)."""
    import gguf
    import numpy as np
    mats, norms = tensors(shape, qtype)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    w = gguf.GGUFWriter(out + ".part", arch="llama")
    header(w, shape, qtype)
    for name, rows, cols, t in mats:
        size, per, _ = QUANTS[t]
        row = cols // per * size
        w.add_tensor_info(name, (rows, row), np.dtype(np.uint8), rows * row,
                          raw_dtype=getattr(gguf.GGMLQuantizationType, t))
    for name, n in norms:
        w.add_tensor_info(name, (n,), np.dtype(np.float32), 4 * n)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(1)
    for name, rows, cols, t in mats:
        w.write_tensor_data(QUANTS[t][2](np, rng, rows, cols))
    for name, n in norms:
        w.write_tensor_data(np.ones(n, dtype=np.float32))
    w.close()
    os.replace(out + ".part", out)


def main():
    reexec()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="1b", choices=list(SHAPES))
    ap.add_argument("--type", default="q8_0", choices=list(TYPES))
    ap.add_argument("out", nargs="?", help="the file to write (default: under ~/.cache/kvasir/models)")
    a = ap.parse_args()
    out = a.out or os.path.join(MODELS, f"{SHAPES[a.shape][0]}.{TYPES[a.type]}.gguf")
    if a.out is None and os.path.exists(out):
        print(out)
        return 0
    write(out, a.shape, a.type)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
