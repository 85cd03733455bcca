#!/usr/bin/env python3
"""Reference encodings by the Hugging Face `tokenizers` package.

    python3 tests/reference/tokenizer/make_hf_refs.py [out_dir]

Trains one small BPE tokenizer per family (pre-tokenizer configuration as the
family's tokenizer.json has it) on the corpus, saves its tokenizer.json, and
records encode(add_special_tokens=True) and round trip of a slice of the corpus
(valid UTF-8 strings only: the package takes str). No network.
"""
import json
import os
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(__file__))
from corpus import corpus  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>"]


def byte_level(family):
    tok = Tokenizer(models.BPE(ignore_merges=(family == "llama3")))
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if family == "gpt2":
        tok.pre_tokenizer = bl
    elif family == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl])
    else:
        rx = LLAMA3 if family == "llama3" else QWEN2
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(rx), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return tok, trainer


def spm():
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    alphabet = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<unk>", "<s>", "</s>"] + alphabet,
                                  show_progress=False)
    return tok, trainer


def gemma():
    """Gemma 3's form: spaces become "▁" with none prepended, a Split on " "
    that finds nothing left to split, byte fallback, <bos> added."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    alphabet = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>"] + alphabet,
                                  show_progress=False)
    return tok, trainer


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "tokenizer")
    texts = []
    for b in corpus():
        try:
            texts.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    train = [t for t in texts if "<|" not in t]
    sample = texts[::4]
    for family in ["gpt2", "smollm", "llama3", "qwen2", "spm", "gemma"]:
        tok, trainer = {"spm": spm, "gemma": gemma}.get(family, lambda: byte_level(family))()
        tok.train_from_iterator(train, trainer)
        bos = {"spm": "<s>", "gemma": "<bos>"}.get(family, "<|begin_of_text|>")
        if family in ("llama3", "spm", "gemma"):
            tok.post_processor = processors.TemplateProcessing(
                single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))])
        tok.add_tokens(["<custom>"])  # a non-special added token
        path = os.path.join(out_dir, f"hf_{family}.json")
        tok.save(path)
        ref = os.path.join(out_dir, f"hf_{family}.jsonl")
        n_rt = 0
        with open(ref, "w", encoding="utf-8") as f:
            f.write(json.dumps({"reference": "tokenizers", "version": tokenizers.__version__,
                                "tokenizer": os.path.basename(path)}) + "\n")
            for t in sample:
                ids = tok.encode(t, add_special_tokens=True).ids
                # Round trip without the BOS the post-processor adds.
                rt = tok.decode(tok.encode(t, add_special_tokens=False).ids, skip_special_tokens=False) == t
                n_rt += rt
                f.write(json.dumps({"text": t, "ids": ids, "rt": rt}, ensure_ascii=False) + "\n")
        print(f"{family}: {len(sample)} strings, {n_rt} round-trip")


if __name__ == "__main__":
    main()
