"""The teacher-forced references both parity scripts write (make_refs.py for
the default model, make_gemma3_refs.py for Gemma 3): for each prompt llama.cpp
tokenizes it, greedily continues it for n_cont tokens, and at each of the
n_cont predicting positions (the last prompt token and the first n_cont - 1
continuation tokens) its top `top` tokens with their log-probabilities are
recorded. Runs under the peer's venv (scripts/install-peer), as its callers do.
"""
import hashlib
import json

import numpy as np
import llama_cpp


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def case(llm, kind, text, add_bos, n_cont, top):
    """One prompt's record: its ids, llama.cpp's greedy continuation and the
    top tokens at every predicting position."""
    ids = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
    llm.reset()
    llm.eval(ids)
    cont = []
    for _ in range(n_cont):
        nxt = int(np.argmax(np.array(llm.scores[llm.n_tokens - 1])))
        cont.append(nxt)
        llm.eval([nxt])
    positions = []
    for i in range(n_cont):
        lp = log_softmax(np.array(llm.scores[len(ids) - 1 + i]))
        best = np.argsort(-lp)[:top]
        positions.append([[int(t), round(float(lp[t]), 5)] for t in best])
    print(f"{kind:12s} {len(ids):3d} prompt tokens: {llm.detokenize(cont)[:60]!r}")
    return {"kind": kind, "text": text, "prompt": ids, "continuation": cont, "top": positions}


def write_refs(model, out_path, prompts, generator, n_ctx, add_bos, n_cont=64, top=8):
    """Every prompt's case into out_path as JSON, with the model's sha256 and
    the peer's version."""
    with open(model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=n_ctx, n_threads=2,
                          logits_all=True, verbose=False, seed=0)
    out = {"generator": generator, "llama_cpp_python": llama_cpp.__version__,
           "model_sha256": sha, "n_cont": n_cont, "top": top,
           "cases": [case(llm, kind, text, add_bos, n_cont, top) for kind, text in prompts]}
    with open(out_path, "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
    print("wrote", out_path)
