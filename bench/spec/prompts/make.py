#!/usr/bin/env python3
"""Writes a.jsonl, b.jsonl, c.jsonl and d.jsonl beside this file from
sources_a.py and sources_bcd.py (the texts themselves; README.md says what
each set is). Deterministic: re-running it leaves the files unchanged.

One request per line: {"id", "messages", and where the set needs them
"tools", "response_format", "session" and "turn"}.
"""
import json
import os

import sources_a
import sources_bcd

HERE = os.path.dirname(os.path.abspath(__file__))


def user(text):
    return [{"role": "user", "content": text}]


def set_a():
    out = []
    for i, (name, task) in enumerate(sources_a.CODE_TASKS):
        body = f"{task}\n\nFile `{name}`:\n```\n{sources_a.CODE[name]}```"
        out.append({"id": f"a-code-{i + 1:02d}", "messages": user(body)})
    for i, (doc, task) in enumerate(sources_a.DOC_TASKS):
        body = f"{task}\n\nDocument:\n\"\"\"\n{sources_a.DOCS[doc]}\"\"\""
        out.append({"id": f"a-doc-{i + 1:02d}", "messages": user(body)})
    for i, (task, text) in enumerate(sources_a.TEXTS):
        body = f"{task}\n\nText:\n\"\"\"\n{text}\n\"\"\""
        out.append({"id": f"a-text-{i + 1:02d}", "messages": user(body)})
    return out


def set_b():
    return [{"id": f"b-{i + 1:02d}", "messages": user(q)} for i, q in enumerate(sources_bcd.OPEN_CHAT)]


def set_c():
    """Turn t of a session holds the task and the first t-1 steps (each an
    assistant tool call and its tool result), as an agent framework re-sends
    the whole conversation every turn; the model writes step t."""
    out = []
    for s, (task, steps) in enumerate(sources_bcd.AGENT_SESSIONS):
        for t in range(len(steps) + 1):
            msgs = [{"role": "system", "content": sources_bcd.AGENT_SYSTEM}] + user(task)
            for k, (name, args, result) in enumerate(steps[:t]):
                cid = f"call_{s + 1}_{k + 1}"
                msgs.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": cid, "type": "function",
                     "function": {"name": name, "arguments": json.dumps(args)}}]})
                msgs.append({"role": "tool", "tool_call_id": cid, "content": result})
            out.append({"id": f"c-s{s + 1}-t{t + 1:02d}", "session": s + 1, "turn": t + 1,
                        "messages": msgs, "tools": sources_bcd.TOOLS})
    return out


def set_d():
    out = []
    for i, (prompt, name, fields) in enumerate(sources_bcd.SCHEMAS):
        schema = {"type": "object", "properties": {k: {"type": v} for k, v in fields.items()},
                  "required": list(fields), "additionalProperties": False}
        out.append({"id": f"d-{i + 1:02d}",
                    "messages": user(prompt + " Answer in JSON."),
                    "response_format": {"type": "json_schema",
                                        "json_schema": {"name": name, "schema": schema}}})
    return out


def main():
    for name, rows in (("a", set_a()), ("b", set_b()), ("c", set_c()), ("d", set_d())):
        with open(os.path.join(HERE, f"{name}.jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")  # key order kept: a schema's is its properties' order
        print(f"{name}.jsonl: {len(rows)} requests")


if __name__ == "__main__":
    main()
