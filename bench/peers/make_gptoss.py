#!/usr/bin/env python3
"""bench/peers/make_gptoss.py: a random-weight GGUF file with the exact layer
shapes, tensor names, types and metadata of gpt-oss-20b as llama.cpp's
convert_hf_to_gguf.py (conversion/gpt_oss.py) writes it, for the CPU
engines (Kvasir and llama.cpp).

  bench/peers/make_gptoss.py [OUT.gguf]
      default OUT: ~/.cache/kvasir/models/random-gpt-oss-20b-shape.gguf
      (shared by the worktrees; a default OUT that exists is not
      rewritten); prints the path. ~12 GB, written tensor by tensor.

Shape (openai/gpt-oss-20b's config.json): hidden 2,880, 24 layers, 64 query
heads and 8 KV heads of 64, 32 experts of width 2,880, 4 used per token,
sliding window 128 on the even layers, rope theta 150,000 with YaRN factor
32 over 4,096 positions, context 131,072. Types as the converter writes
them: the experts MXFP4 (the checkpoint's own blocks, repacked), norms,
biases, sinks and the router F32, the other matrices BF16 (the
checkpoint's type, `--outtype auto`).

The vocabulary is NOT the real 201,088 tokens of o200k_harmony: the file
carries SmolLM2's 49,152-token vocabulary and tokenizer (copied from
models/SmolLM2-135M-Instruct.Q4_1.gguf, as bench/peers/make_model.py does)
so that prompts tokenize on both engines; the embedding and output matrices
are 49,152 rows (0.28 G parameters instead of 1.16 G). Weights: random,
std ~0.02 (MXFP4: random codes under the E8M0 scale 2^-8; BF16: normal
values), norms 1, biases and sinks 0: no NaN, nothing for a kernel to
exploit; timing only, the text generated is noise.

  bench/peers/make_gptoss.py --tiny-o200k OUT.gguf
      a TINY file of the same family (hidden 64, 2 layers, 4 experts of
      64, 2 used, head_dim 16) whose tokenizer is shaped like gpt-oss's:
      tokenizer.ggml.pre "gpt-4o" (o200k's split), SmolLM2's byte-level
      vocabulary and merges, the harmony control tokens appended
      (HARMONY_SPECIALS, ids from 49,152), bos <|startoftext|>, eos
      <|return|>, and gpt-oss's chat template
      (tests/data/chat_templates/openai-gpt-oss-120b.jinja). 13 MB; for
      tokenizer and chat checks against llama.cpp
      (tests/reference/tokenizer/make_gpt4o_gguf_refs.py).

  bench/peers/make_gptoss.py --tiny-o200k OUT.gguf VOCAB.json
      the same tiny file with the REAL o200k_harmony vocabulary (201,088
      tokens and their merges, as tests/reference/tokenizer/dump_o200k.py
      writes them from openai_harmony) instead of SmolLM2's. 60 MB.

Runs under bench/peers/python (numpy + gguf); re-runs itself there.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model import copy_tokenizer  # noqa: E402  (the same tokenizer copy)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER_FROM = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
MODELS = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kvasir", "models")
VOCAB = 49152
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 2880, 24, 64, 8, 64
EXPERTS, USED, EXPERT_FFN = 32, 4, 2880
STD = 0.02
MXFP4_E = 120        # 2^(120 - 128) times the doubled e2m1 values (rms 5.85): std ~0.023
MXFP4_BYTES = 17     # per 32 weights


# o200k_harmony's control tokens (in its own id order), appended after
# SmolLM2's vocabulary by --tiny-o200k.
HARMONY_SPECIALS = ["<|startoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>",
                    "<|end|>", "<|message|>", "<|call|>"]
TEMPLATE = os.path.join(ROOT, "tests", "data", "chat_templates", "openai-gpt-oss-120b.jinja")


REAL_VOCAB = None  # dump_o200k.py's JSON, with --tiny-o200k OUT VOCAB.json


def use_tiny_shape():
    global VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, EXPERTS, USED, EXPERT_FFN
    VOCAB = len(REAL_VOCAB["tokens"]) if REAL_VOCAB else 49152 + len(HARMONY_SPECIALS)
    HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 64, 2, 4, 2, 16
    EXPERTS, USED, EXPERT_FFN = 4, 2, 64


def o200k_style_tokenizer(w):
    """SmolLM2's vocabulary and merges under gpt-oss's split, specials and template."""
    import gguf
    if REAL_VOCAB:
        tokens, types, merges = REAL_VOCAB["tokens"], REAL_VOCAB["types"], REAL_VOCAB["merges"]
    else:
        r = gguf.GGUFReader(TOKENIZER_FROM)
        tokens = list(r.fields["tokenizer.ggml.tokens"].contents()) + HARMONY_SPECIALS
        types = list(r.fields["tokenizer.ggml.token_type"].contents()) + [3] * len(HARMONY_SPECIALS)
        merges = list(r.fields["tokenizer.ggml.merges"].contents())
    ids = {t: i for i, t in enumerate(tokens)}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(ids["<|startoftext|>"])
    w.add_eos_token_id(ids["<|return|>"])
    w.add_pad_token_id(ids["<|endoftext|>"])
    w.add_add_bos_token(False)
    with open(TEMPLATE, encoding="utf-8") as f:
        w.add_chat_template(f.read())


def reexec():
    if not os.environ.get("KVASIR_PEERS_PY"):
        py = os.path.join(ROOT, "bench", "peers", "python")
        os.execv(py, [py, "--run", os.path.abspath(sys.argv[0])] + sys.argv[1:])


def tensors():
    """(name, kind, shape) in GGUF order; shape outermost first; kind F32, BF16 or MXFP4."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    out = [("token_embd.weight", "BF16", (VOCAB, HIDDEN))]
    for i in range(LAYERS):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", "F32", (HIDDEN,)),
                (p + "attn_q.weight", "BF16", (q, HIDDEN)), (p + "attn_q.bias", "F32", (q,)),
                (p + "attn_k.weight", "BF16", (kv, HIDDEN)), (p + "attn_k.bias", "F32", (kv,)),
                (p + "attn_v.weight", "BF16", (kv, HIDDEN)), (p + "attn_v.bias", "F32", (kv,)),
                (p + "attn_output.weight", "BF16", (HIDDEN, q)), (p + "attn_output.bias", "F32", (HIDDEN,)),
                (p + "attn_sinks.weight", "F32", (HEADS,)),
                (p + "post_attention_norm.weight", "F32", (HIDDEN,)),
                (p + "ffn_gate_inp.weight", "F32", (EXPERTS, HIDDEN)),
                (p + "ffn_gate_inp.bias", "F32", (EXPERTS,)),
                (p + "ffn_gate_exps.weight", "MXFP4", (EXPERTS, EXPERT_FFN, HIDDEN)),
                (p + "ffn_gate_exps.bias", "F32", (EXPERTS, EXPERT_FFN)),
                (p + "ffn_up_exps.weight", "MXFP4", (EXPERTS, EXPERT_FFN, HIDDEN)),
                (p + "ffn_up_exps.bias", "F32", (EXPERTS, EXPERT_FFN)),
                (p + "ffn_down_exps.weight", "MXFP4", (EXPERTS, HIDDEN, EXPERT_FFN)),
                (p + "ffn_down_exps.bias", "F32", (EXPERTS, HIDDEN))]
    out += [("output_norm.weight", "F32", (HIDDEN,)), ("output.weight", "BF16", (VOCAB, HIDDEN))]
    return out


def byte_shape(kind, shape):
    if kind == "F32":
        return shape, 4
    if kind == "BF16":
        return shape[:-1] + (shape[-1] * 2,), 1
    return shape[:-1] + (shape[-1] // 32 * MXFP4_BYTES,), 1


def data(np, rng, name, kind, shape):
    if kind == "F32":
        one = name.endswith("norm.weight")
        return np.full(shape, 1.0 if one else 0.0, dtype=np.float32)
    if kind == "BF16":
        f = rng.standard_normal(size=shape, dtype=np.float32) * np.float32(STD)
        return (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(byte_shape(kind, shape)[0])
    b = rng.integers(0, 256, size=byte_shape(kind, shape)[0], dtype=np.uint8)
    b.reshape(-1, MXFP4_BYTES)[:, 0] = MXFP4_E
    return b


def header(w):
    import gguf
    a = "gpt-oss"
    w.add_name("random gpt-oss-20b shape (smollm2 vocabulary)" if VOCAB == 49152
               else "tiny random gpt-oss (o200k_harmony tokenizer)" if REAL_VOCAB
               else "tiny random gpt-oss (o200k-style tokenizer on smollm2's vocabulary)")
    w.add_uint32(f"{a}.context_length", 131072)
    w.add_uint32(f"{a}.embedding_length", HIDDEN)
    w.add_uint32(f"{a}.block_count", LAYERS)
    w.add_uint32(f"{a}.feed_forward_length", EXPERT_FFN)
    w.add_uint32(f"{a}.attention.head_count", HEADS)
    w.add_uint32(f"{a}.attention.head_count_kv", KV_HEADS)
    w.add_uint32(f"{a}.attention.key_length", HEAD_DIM)
    w.add_uint32(f"{a}.attention.value_length", HEAD_DIM)
    w.add_float32(f"{a}.rope.freq_base", 150000.0)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32(f"{a}.expert_count", EXPERTS)
    w.add_uint32(f"{a}.expert_used_count", USED)
    w.add_uint32(f"{a}.expert_feed_forward_length", EXPERT_FFN)
    w.add_uint32(f"{a}.attention.sliding_window", 128 if HIDDEN > 64 else 5)
    w.add_string(f"{a}.rope.scaling.type", "yarn")
    w.add_float32(f"{a}.rope.scaling.factor", 32.0)
    w.add_uint32(f"{a}.rope.scaling.original_context_length", 4096)
    w.add_uint32(f"{a}.vocab_size", VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if VOCAB == 49152:
        copy_tokenizer(w, TOKENIZER_FROM)
    else:
        o200k_style_tokenizer(w)


def write(out):
    import gguf
    import numpy as np
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    w = gguf.GGUFWriter(out + ".part", arch="gpt-oss")
    header(w)
    all_t = tensors()
    for name, kind, shape in all_t:
        bshape, elem = byte_shape(kind, shape)
        nbytes = int(np.prod(bshape)) * elem
        if kind == "F32":
            w.add_tensor_info(name, bshape, np.dtype(np.float32), nbytes)
        else:
            w.add_tensor_info(name, bshape, np.dtype(np.uint8), nbytes,
                              raw_dtype=getattr(gguf.GGMLQuantizationType, kind))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(1)
    for name, kind, shape in all_t:
        w.write_tensor_data(data(np, rng, name, kind, shape))
    w.close()
    os.replace(out + ".part", out)


def main():
    reexec()
    if len(sys.argv) in (3, 4) and sys.argv[1] == "--tiny-o200k":
        global REAL_VOCAB
        if len(sys.argv) == 4:
            import json
            with open(sys.argv[3], encoding="utf-8") as f:
                REAL_VOCAB = json.load(f)
        use_tiny_shape()
        write(sys.argv[2])
        print(sys.argv[2])
        return 0
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(MODELS, "random-gpt-oss-20b-shape.gguf")
    if len(sys.argv) == 1 and os.path.exists(out):
        print(out)
        return 0
    write(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
