#!/usr/bin/env python3
"""Reference chat renderings by jinja2, as Hugging Face renders chat templates.

    python3 tests/reference/tokenizer/make_chat_refs.py [model.gguf] [out.json]

Templates: the default model's own `tokenizer.chat_template` (ChatML), plus
the published Llama 3, Llama 2 and Mistral instruct templates as fixtures.
Environment as transformers' apply_chat_template: sandboxed, trim_blocks,
lstrip_blocks, raise_exception(). Errors raised by a template are recorded.
"""
import json
import os
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
          "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant"
          "<|end_header_id|>\n\n' }}{% endif %}")
LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
          "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
          "{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
          "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
          "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
          "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
          "{% endfor %}")
MISTRAL = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
           "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
           "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
           "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
           "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")


def gguf_template(path):
    from gguf import GGUFReader
    r = GGUFReader(path)
    f = r.fields["tokenizer.chat_template"]
    tmpl = bytes(f.parts[f.data[0]]).decode()
    toks = r.fields["tokenizer.ggml.tokens"]

    def tok(key):
        fid = r.fields[key]
        i = int(fid.parts[fid.data[0]][0])
        return bytes(toks.parts[toks.data[i]]).decode()
    return tmpl, tok("tokenizer.ggml.bos_token_id"), tok("tokenizer.ggml.eos_token_id")


def conversations():
    U, A, S = "user", "assistant", "system"
    m = lambda r, c: {"role": r, "content": c}  # noqa: E731
    convs = [
        [m(U, "Hello!")],
        [m(S, "You are a pirate."), m(U, "Hi")],
        [m(U, "What is 2+2?"), m(A, "4."), m(U, "And 3+3?")],
        [m(S, "Be brief."), m(U, "Name a color."), m(A, "Blue."), m(U, "Another?"), m(A, "Red.")],
        [m(U, "")],
        [m(S, ""), m(U, "empty system")],
        [m(U, "  padded with spaces  ")],
        [m(U, "\n\nnewlines around\n\n")],
        [m(U, "line one\nline two\n\tindented")],
        [m(U, "Unicode: café, 中文, 😀, Ελληνικά")],
        [m(U, "Looks special: <|im_start|>user\nhi<|im_end|>")],
        [m(U, "[INST] fake [/INST] <<SYS>> </s> <s>")],
        [m(S, "Multi\nline\nsystem"), m(U, "ok"), m(A, "sure"), m(U, "thanks")],
        [m(U, "a"), m(A, "b"), m(U, "c"), m(A, "d"), m(U, "e"), m(A, "f"), m(U, "g")],
        [m(U, "code:\n```python\nprint('hi')\n```")],
        [m(U, "quotes ' \" and backslash \\ and {{ braces }} {% tags %}")],
        [m(A, "assistant first")],
        [m(U, "trailing tab\t")],
        [m(U, "\u3000ideographic space\u3000")],
        [m(U, "x" * 500)],
        [m(S, "sys"), m(U, "u1"), m(A, "a1"), m(U, "u2"), m(A, "a2"), m(U, "u3")],
        [m(U, "French: « Bonjour » à tous !")],
        [m(U, "emoji 👨‍👩‍👧‍👦 family")],
        [m(U, " "), m(A, " "), m(U, " ")],
        [m(U, "Q"), m(A, "  spaced answer  "), m(U, "Q2")],
        [m(S, "  spaced system  "), m(U, "hi")],
        [m(U, "u"), m(U, "u again")],
        [m(S, "only system")],
        [],
        [m(U, "numbers 1234567890 and dates 2024-01-01")],
        [m("tool", "tool output"), m(U, "what did the tool say?")],
        [m(U, "\r\nwindows\r\n")],
    ]
    return convs


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests", "data", "tokenizer", "chat_refs.json")
    tmpl, bos, eos = gguf_template(model)
    templates = {
        "model": {"template": tmpl, "bos": bos, "eos": eos, "family": "chatml"},
        "llama3": {"template": LLAMA3, "bos": "<|begin_of_text|>", "eos": "<|eot_id|>", "family": "llama3"},
        "llama2": {"template": LLAMA2, "bos": "<s>", "eos": "</s>", "family": "llama2"},
        "mistral": {"template": MISTRAL, "bos": "<s>", "eos": "</s>", "family": "mistral"},
    }
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)
    env.globals["raise_exception"] = raise_exception
    cases = []
    for name, t in templates.items():
        compiled = env.from_string(t["template"])
        for conv in conversations():
            for gen in (False, True):
                case = {"template": name, "messages": conv, "add_generation_prompt": gen}
                try:
                    case["expected"] = compiled.render(messages=conv, add_generation_prompt=gen,
                                                       bos_token=t["bos"], eos_token=t["eos"])
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"reference": "jinja2", "version": jinja2.__version__, "templates": templates, "cases": cases},
                  f, ensure_ascii=False, indent=0)
    print(f"{out}: {len(cases)} renderings")


if __name__ == "__main__":
    main()
