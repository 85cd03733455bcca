#!/usr/bin/env python3
"""Writes tests/data/kquants/kquants.bin: random Q4_K, Q5_K, Q6_K and Q5_0
blocks and their weights as the `gguf` package from PyPI dequantises them
(gguf.quants.dequantize, a numpy port of ggml's dequantize_row_q*_K). The
kernels test (tests/unit/kernels/test_kquant_reference.cpp) checks Kvasir's
dequantize_row against it, so the block layouts are checked against an
implementation that is not ours.

Every byte of a block is random (all scale/min/quant bit patterns) except the
f16 super-block scales, drawn from a few magnitudes and both signs so the
products stay finite.

Format (little-endian): b"KVKQ", u32 version 1, u32 count; then per type:
u32 ggml type, u32 n_blocks, n_blocks * block_bytes bytes, n_blocks * block f32
(block: 256 weights for the K-quants, 32 for Q5_0).

Run:  python3 -m pip install gguf==0.19.0 numpy
      python3 tests/reference/kquants/make_kquants.py
"""
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OUT = os.path.join(ROOT, "tests", "data", "kquants", "kquants.bin")
N_BLOCKS = 24

# (type, block bytes, byte offsets of its f16 scales, weights per block)
TYPES = [(T.Q4_K, 144, [0, 2], 256), (T.Q5_K, 176, [0, 2], 256), (T.Q6_K, 210, [208], 256),
         (T.Q5_0, 22, [0], 32)]


def main():
    rng = np.random.default_rng(20261129)
    out = [b"KVKQ", struct.pack("<II", 1, len(TYPES))]
    for qtype, nbytes, scale_offsets, per_block in TYPES:
        blocks = rng.integers(0, 256, size=(N_BLOCKS, nbytes), dtype=np.uint8)
        for off in scale_offsets:
            mag = rng.choice([1e-4, 1e-3, 1e-2, 0.5], size=N_BLOCKS)
            sign = rng.choice([-1.0, 1.0], size=N_BLOCKS)
            vals = (mag * sign * rng.uniform(0.5, 1.5, size=N_BLOCKS)).astype(np.float16)
            blocks[:, off:off + 2] = vals.view(np.uint8).reshape(N_BLOCKS, 2)
        weights = quants.dequantize(blocks, qtype).astype(np.float32).reshape(N_BLOCKS, per_block)
        assert np.all(np.isfinite(weights))
        out.append(struct.pack("<II", int(qtype), N_BLOCKS))
        out.append(blocks.tobytes())
        out.append(weights.astype("<f4").tobytes())
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "wb") as f:
        f.write(b"".join(out))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
