"""The tokenizer reference corpus: >= 2,000 byte strings, deterministic.

Hand-written seeds (prose, code, numbers, whitespace, scripts, special-token
look-alikes, invalid UTF-8) plus seeded random combinations of them.
Everything is bytes, so invalid UTF-8 can be part of it.
"""
import random

PROSE_EN = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "I'm sure you'll agree we've done what we could; they'd said it's fine, hadn't they?",
    "DON'T SHOUT. I'LL HEAR YOU. We'Re fine, You'VE seen it.",
    "Serving a large language model is mostly a matter of keeping the GPU busy.",
    "Dr. Smith (the one from St. Mary's) paid $1,234.56 on 2024-03-15 at 10:45 a.m.",
    "\"Quoted text,\" she said -- and then: 'single quotes' too... really?!",
    "E-mail me at someone@example.com or visit https://example.org/path?q=1&r=two#frag.",
    "Hello world",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "Mr. O'Neil's dog's bone isn't here.",
]
PROSE_FR = [
    "Le cœur a ses raisons que la raison ne connaît point.",
    "À l'école, les élèves étudiaient l'œuvre de Molière ; c'était en été.",
    "« Où est-ce que tu vas ? » demanda-t-elle, l'air inquiet.",
    "Ça coûte 12,50 € — n'est-ce pas trop cher ? Noël approche.",
    "L'hôpital Saint-Éloi, près du château, ferme à 18 h 30.",
]
CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "const f = async (x) => { await fetch(`/api/${x}`); return x?.y ?? null; };",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "<html><body><div class=\"a\">Hi &amp; bye</div></body></html>",
    "for i in $(seq 1 10); do echo \"$i\" >> /tmp/out.txt; done",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "template <typename T> auto f(T&& x) -> decltype(auto) { return std::forward<T>(x); }",
    "    indented_with_spaces = {'a': [1, 2, 3], 'b': None}  # comment\n",
    "x+=1;y-=2;z*=3;w/=4;a%=5;b<<=6;c>>=7;d&=8;e|=9;f^=10;",
    "{\"key\": [1, 2.5, -3e10, true, false, null], \"nested\": {\"k\": \"v\"}}",
]
NUMBERS = [
    "0", "7", "42", "123", "1234", "12345", "123456", "1234567", "3.14159265358979",
    "-273.15", "1e-9", "6.022e23", "0xDEADBEEF", "0b101010", "1,000,000", "1 000 000",
    "2024-01-31", "31/12/1999", "12:30:45.123", "+1 (555) 123-4567", "v1.2.3-rc.4",
    "٠١٢٣٤٥٦٧٨٩", "１２３４５", "²³¹", "Ⅻ Ⅳ ⅷ", "①②③", "१२३", "๑๒๓", "½ ¾ ⅓",
]
WHITESPACE = [
    " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n", "\n ", " \t \n ",
    "a  b", "a   b", "a\tb", "a\t\tb", "a \n b", "a\n\n\nb", "word    ", "    word",
    "a\u00a0b", "a\u3000b", "a\u2028b", "a\u2003\u2003b", "a\u0085b", "a\x0bb\x0cc",
    "line1\r\nline2\rline3\n", "    \n    \n", "x \u00a0 y", "\x1c\x1d\x1e\x1f",
]
SCRIPTS = [
    "你好，世界！这是一个测试。", "日本語のテキストとカタカナ、ひらがな。", "한국어 문장입니다.",
    "Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם",
    "नमस्ते दुनिया", "สวัสดีชาวโลก", "Xin chào thế giới", "Tiếng Việt có dấu: ắ ằ ẳ ẵ ặ",
    "😀😃😄😁 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✨", "emoji at end 🎉", "🚀rocket", "a\u0301e\u0300o\u0302 (combining)",
    "ﬁ ﬂ ﬀ ligatures", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇", "\u200b\u200c\u200d\ufeff zero width",
    "mixed English 和中文 and русский and 😀", "math: ∀x∈ℝ, x² ≥ 0 ⇒ √x² = |x|",
    "𝕳𝖊𝖑𝖑𝖔 𝐁𝐨𝐥𝐝", "\U0001F9D1\u200d\U0001F4BB", "\ue000\uf8ff private use", "\U000e0001 tags",
    "Unicode 15.1: \U0002ebf0\U0002ebf1 x\u2ffc\u31ef", "unassigned \U000e0080\u0378 here",
]
SPECIAL = [
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|><|im_end|>",
    "text<|im_end|>text", "<|im_start|>system\nYou are helpful.<|im_end|>",
    "< |im_start| >", "<|im_start", "im_start|>", "<|IM_START|>", "<<|im_start|>>",
    "<repo_name>x<file_sep>y<filename>z", "<fim_prefix>a<fim_middle>b<fim_suffix>c",
    "<s>", "</s>", "<unk>", "[INST] hi [/INST]", "<|begin_of_text|>", "<|eot_id|>",
    "<|im_end|> after", "before <|im_end|>", " <|im_start|> ", "<|endoftext|><|endoftext|>",
    "<jupyter_code>print(1)<jupyter_output>1", "<issue_start>x<issue_comment>y<issue_closed>",
    "<gh_stars>100", "<empty_output>", "<commit_before>a<commit_msg>b<commit_after>",
    "<reponame>", "<|im_start|>user\n<|im_start|>nested<|im_end|><|im_end|>",
]
LONG = [
    "a" * 1000, "supercalifragilisticexpialidocious" * 30, "1" * 300, "-" * 200, " " * 100,
    "\n" * 50, "\t" * 40, "😀" * 100, "中" * 200, "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "https://example.com/" + "a/b/c/" * 50, "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=" * 10,
    "aB" * 300, "x" * 5000,
]
INVALID = [
    b"\xff", b"\xfe\xff", b"abc\x80def", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82(",
    b"\xf0\x9f\x98", b"caf\xe9", b"\xc0\x80", b"\xc1\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
    b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf", b"\x80\x81\x82\x83", b"\xf8\x88\x80\x80\x80",
    b"hello \xff world", b"\xc3\xa9\xc3", b"<|im_end|>\xff<|im_start|>", b"12\xff34",
    b"\xef\xbb\xbfBOM", b"\x00nul\x00", b"\x01\x02\x03\x7f", b"a\xe2\x82\xacb\xe2\x82",
]


def _b(s):
    return s if isinstance(s, bytes) else s.encode("utf-8")


def corpus():
    rng = random.Random(20240601)
    seeds = [PROSE_EN, PROSE_FR, CODE, NUMBERS, WHITESPACE, SCRIPTS, SPECIAL, LONG, INVALID]
    out = []
    for group in seeds:
        out.extend(_b(s) for s in group)
    pool = [_b(s) for g in seeds[:-2] for s in g] + [_b(s) for s in INVALID]
    words = " ".join(PROSE_EN + PROSE_FR).split()
    # Sentence mixes.
    for _ in range(600):
        k = rng.randint(2, 6)
        sep = rng.choice([b" ", b"\n", b"", b"  ", b"\t", b"\n\n", b" \n"])
        out.append(sep.join(rng.choice(pool) for _ in range(k)))
    # Word salads with punctuation, digits and whitespace runs.
    for _ in range(500):
        parts = []
        for _ in range(rng.randint(1, 25)):
            r = rng.random()
            if r < 0.6:
                w = rng.choice(words)
                if rng.random() < 0.1:
                    w = w.upper()
                parts.append(w)
            elif r < 0.75:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
            elif r < 0.85:
                parts.append(rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "n't"]))
            else:
                parts.append(rng.choice(["!", "?", "...", ",", ";", ":", "(", ")", "\"", "--", "#", "@", "&"]))
        text = ""
        for p in parts:
            text += p + rng.choice([" ", " ", " ", "", "  ", "\n", "\t", "   "])
        out.append(text.encode())
    # Random codepoints from many blocks (assigned and some unassigned).
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x20A0, 0x20CF),
              (0x2100, 0x22FF), (0x3000, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00),
              (0xFF00, 0xFFEF), (0x1F300, 0x1F6FF), (0x1D400, 0x1D7FF), (0x10000, 0x1007F)]
    for _ in range(450):
        s = []
        for _ in range(rng.randint(1, 40)):
            lo, hi = rng.choice(ranges)
            c = rng.randint(lo, hi)
            if 0xD800 <= c <= 0xDFFF:
                c = 0x41
            s.append(chr(c))
            if rng.random() < 0.2:
                s.append(rng.choice([" ", "  ", "\n", "1", "22", "a"]))
        out.append("".join(s).encode("utf-8"))
    # Random bytes (mostly invalid UTF-8), avoiding sequences that decode
    # leniently to codepoints above U+10FFFF (the reference aborts on them).
    for _ in range(150):
        b = bytearray(rng.randint(0, 255) for _ in range(rng.randint(1, 30)))
        for i in range(len(b)):
            if b[i] >= 0xF4:
                b[i] = rng.choice([0x80, 0xC3, 0xFF & 0xFE, 0x41])
                if b[i] >= 0xF4:
                    b[i] = 0x3F
        out.append(bytes(b))
    # Numbers and dates in context.
    for _ in range(200):
        y, m, d = rng.randint(1900, 2100), rng.randint(1, 12), rng.randint(1, 28)
        fmt = rng.choice(["{y}-{m:02d}-{d:02d}", "{d}/{m}/{y}", "on {d} {mon} {y}", "{y}{m:02d}{d:02d}",
                          "${a},{b:03d}.{c:02d}", "{a}.{c}%", "-{a}e{c}", "{a}x{b}", "T+{a}:{c:02d}"])
        mon = rng.choice(["Jan", "février", "March", "août", "Dec"])
        out.append(fmt.format(y=y, m=m, d=d, mon=mon, a=rng.randint(0, 99999), b=rng.randint(0, 999),
                              c=rng.randint(0, 99)).encode())
    # Special-token look-alikes in context.
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<file_sep>", "<|im_start",
                "|>", "<|", "<s>", "</s>"]
    for _ in range(150):
        parts = [rng.choice(specials + words) for _ in range(rng.randint(1, 10))]
        out.append(rng.choice(["", " ", "\n"]).join(parts).encode())
    # Dedupe, keep order.
    seen, res = set(), []
    for s in out:
        if s not in seen:
            seen.add(s)
            res.append(s)
    return res


if __name__ == "__main__":
    c = corpus()
    print(len(c), sum(len(s) for s in c))
