#!/usr/bin/env python3
"""Writes a Llama-shaped model with random bf16 weights as a Hugging Face
safetensors folder (config.json + model.safetensors), for bench/gpu.

Standard library only (the GPU machine has no network, so nothing is
installed there). Values: one block of 2**20 random bf16 numbers, normal-ish
with std 0.02 (norm weights 1.0), written at a different rotation for every
tensor: random enough for timing (no NaN/inf, no structure the GEMMs could
exploit), and fast (the 8B model is 16 GB: disk speed, not Python speed).

usage: make_model.py {llama-3.2-1b|llama-3-8b|tiny} OUT_DIR
"""
import json
import os
import random
import struct
import sys

SHAPES = {
    # hidden, ffn, layers, heads, kv_heads, vocab, tied
    "llama-3.2-1b": (2048, 8192, 16, 32, 8, 128256, True),
    "llama-3-8b": (4096, 14336, 32, 32, 8, 128256, False),
    "tiny": (256, 512, 2, 4, 2, 512, False),
}


def bf16_block(n, std, seed):
    rnd = random.Random(seed)
    out = bytearray(2 * n)
    for i in range(n):
        f = struct.pack("<f", rnd.gauss(0.0, std))
        out[2 * i : 2 * i + 2] = f[2:4]  # the top half of an f32 is its bf16 (truncated)
    return bytes(out)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in SHAPES:
        sys.exit(__doc__)
    name, out = sys.argv[1], sys.argv[2]
    h, ffn, layers, heads, kvh, vocab, tied = SHAPES[name]
    hd = h // heads
    tensors = []  # (name, shape, is_norm)
    tensors.append(("model.embed_tokens.weight", [vocab, h], False))
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors += [
            (p + "input_layernorm.weight", [h], True),
            (p + "self_attn.q_proj.weight", [heads * hd, h], False),
            (p + "self_attn.k_proj.weight", [kvh * hd, h], False),
            (p + "self_attn.v_proj.weight", [kvh * hd, h], False),
            (p + "self_attn.o_proj.weight", [h, heads * hd], False),
            (p + "post_attention_layernorm.weight", [h], True),
            (p + "mlp.gate_proj.weight", [ffn, h], False),
            (p + "mlp.up_proj.weight", [ffn, h], False),
            (p + "mlp.down_proj.weight", [h, ffn], False),
        ]
    tensors.append(("model.norm.weight", [h], True))
    if not tied:
        tensors.append(("lm_head.weight", [vocab, h], False))

    header, off = {}, 0
    for tname, shape, _ in tensors:
        n = 1
        for d in shape:
            n *= d
        header[tname] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + 2 * n]}
        off += 2 * n
    header["__metadata__"] = {"format": "pt"}
    hjson = json.dumps(header).encode()
    hjson += b" " * (-len(hjson) % 8)

    os.makedirs(out, exist_ok=True)
    block = bf16_block(1 << 20, 0.02, 1)
    one = struct.pack("<f", 1.0)[2:4]
    tmp = os.path.join(out, "model.safetensors.part")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for k, (tname, shape, is_norm) in enumerate(tensors):
            n = 1
            for d in shape:
                n *= d
            if is_norm:
                f.write(one * n)
                continue
            rot = (k * 7919 * 2) % len(block)
            src = block[rot:] + block[:rot]
            left = 2 * n
            while left > 0:
                chunk = src[: min(left, len(src))]
                f.write(chunk)
                left -= len(chunk)
    os.replace(tmp, os.path.join(out, "model.safetensors"))
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kvh,
        "head_dim": hd,
        "vocab_size": vocab,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 32.0 if name == "llama-3.2-1b" else 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print(f"{name}: {off / 1e9:.2f} GB of bf16 weights in {out}")


if __name__ == "__main__":
    main()
