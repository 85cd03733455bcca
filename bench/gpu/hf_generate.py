#!/usr/bin/env python3
"""The peer for bench/gpu: Hugging Face transformers `generate` (the naive
PyTorch loop) on the same model folder and GPU, N concurrent sequences of a
P-token prompt, S new tokens each (greedy, no early stop). Prints one JSON
line per N, or one line saying it was skipped (torch/transformers missing:
the GPU machine cannot install them, they must already be there).

usage: hf_generate.py MODEL_DIR [--batches 32,128] [--prompt 32] [--steps 64]
"""
import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batches", default="32,128")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--steps", type=int, default=64)
    a = ap.parse_args()
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except Exception as e:  # ImportError, or a broken install
        print(json.dumps({"what": "hf_generate", "skipped": f"torch/transformers unavailable: {e}"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"what": "hf_generate", "skipped": "torch sees no CUDA device"}))
        return 0
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).cuda().eval()
    vocab = model.config.vocab_size
    for n in [int(x) for x in a.batches.split(",") if x]:
        ids = torch.tensor([[(r * 131 + t * 7) % vocab for t in range(a.prompt)] for r in range(n)],
                           device="cuda")
        mask = torch.ones_like(ids)
        kw = dict(attention_mask=mask, do_sample=False, min_new_tokens=a.steps,
                  max_new_tokens=a.steps, pad_token_id=0)
        with torch.no_grad():
            model.generate(ids, **dict(kw, min_new_tokens=2, max_new_tokens=2))  # warm-up
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, **kw)
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        new = (out.shape[1] - a.prompt) * n
        print(json.dumps({"what": "hf_generate", "concurrent": n, "prompt": a.prompt,
                          "steps": a.steps, "tok_s": round(new / dt, 1),
                          "note": "includes the prefill (generate cannot separate it)"}))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
