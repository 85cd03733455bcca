#!/usr/bin/env python3
"""bench/peers/make_model.py: a random-weight GGUF of the Llama-3.2-1B shape
(hidden 2,048, 16 layers, 32 heads, 8 KV heads, FFN 8,192, tied embeddings)
with SmolLM2's 49,152-token vocabulary and tokenizer, copied from
models/SmolLM2-135M-Instruct.Q4_1.gguf. Every matrix is Q8_0 (~1.1 GB).

  bench/peers/make_model.py [OUT.gguf]
      default OUT: ~/.cache/kvasir/models/random-llama-3.2-1b-shape.Q8_0.gguf
      (shared by the worktrees; not rewritten when present); prints the path

Why: the default model (135M, ~97 MB) fits a large L3, so it measures cache,
not DRAM; a 1B-class model is what CPU users serve. bench/gpu/make_model.py
writes safetensors for the GPU path; this writes what the CPU engines (Kvasir
and llama.cpp) both read. Weights: random int8 quants under one fp16 scale
per block, std ~0.02 (norms 1.0): no NaN, no structure the kernels could
exploit; timing only, the text it generates is noise.

Runs under bench/peers/python (numpy + gguf); re-runs itself there.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER_FROM = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kvasir",
                           "models", "random-llama-3.2-1b-shape.Q8_0.gguf")
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 2048, 16, 32, 8, 8192
HEAD_DIM = HIDDEN // HEADS
QK8_0 = 32  # values per Q8_0 block: an fp16 scale, then 32 int8 quants


def reexec():
    if not os.environ.get("KVASIR_PEERS_PY"):
        py = os.path.join(ROOT, "bench", "peers", "python")
        os.execv(py, [py, "--run", os.path.abspath(sys.argv[0])] + sys.argv[1:])


def tensors():
    """(name, rows, cols) of every matrix, then the norms (name, n)."""
    mats = [("token_embd.weight", 49152, HIDDEN)]
    norms = [("output_norm.weight", HIDDEN)]
    kv = KV_HEADS * HEAD_DIM
    for i in range(LAYERS):
        p = f"blk.{i}."
        mats += [(p + "attn_q.weight", HIDDEN, HIDDEN), (p + "attn_k.weight", kv, HIDDEN),
                 (p + "attn_v.weight", kv, HIDDEN), (p + "attn_output.weight", HIDDEN, HIDDEN),
                 (p + "ffn_gate.weight", FFN, HIDDEN), (p + "ffn_up.weight", FFN, HIDDEN),
                 (p + "ffn_down.weight", HIDDEN, FFN)]
        norms += [(p + "attn_norm.weight", HIDDEN), (p + "ffn_norm.weight", HIDDEN)]
    return mats, norms


def q8_0(rng, rows, cols):
    """rows x cols random Q8_0 values as bytes, shape (rows, cols / 32 * 34)."""
    import numpy as np
    q = rng.integers(-127, 128, size=(rows, cols // QK8_0, 2 + QK8_0), dtype=np.int8).view(np.uint8)
    # int8 uniform in [-127, 127] has std ~73.6: a scale of 0.02 / 73.6 gives std 0.02.
    q[:, :, 0:2] = np.frombuffer(np.float16(0.02 / 73.6).tobytes(), dtype=np.uint8)
    return q.reshape(rows, -1)


def copy_tokenizer(w, src):
    import gguf
    for f in gguf.GGUFReader(src).fields.values():
        if not f.name.startswith("tokenizer."):
            continue
        vt = f.types[0]
        sub = f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), vt, sub_type=sub)


def main():
    reexec()
    import gguf
    import numpy as np
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    if len(sys.argv) == 1 and os.path.exists(out):
        print(out)
        return 0
    mats, norms = tensors()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    w = gguf.GGUFWriter(out + ".part", arch="llama")
    w.add_name("random llama-3.2-1b shape (smollm2 vocabulary)")
    w.add_context_length(8192)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(49152)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    copy_tokenizer(w, TOKENIZER_FROM)
    row_bytes = lambda cols: cols // QK8_0 * (2 + QK8_0)
    for name, rows, cols in mats:
        w.add_tensor_info(name, (rows, row_bytes(cols)), np.dtype(np.uint8), rows * row_bytes(cols),
                          raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    for name, n in norms:
        w.add_tensor_info(name, (n,), np.dtype(np.float32), 4 * n)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(1)
    for name, rows, cols in mats:
        w.write_tensor_data(q8_0(rng, rows, cols))
    for name, n in norms:
        w.write_tensor_data(np.ones(n, dtype=np.float32))
    w.close()
    os.replace(out + ".part", out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
