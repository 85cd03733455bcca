#!/usr/bin/env python3
"""tests/reference/grammar/check_walks.py [BUILD_DIR] — the grammar tests'
JSON validator checked against Python's jsonschema.

tests/unit/grammar validates every output of its JSON walks with a small
validator of its own (json_schema_check.cpp), so that it runs without Python.
This script is how that validator is checked: it runs the walks
(BUILD_DIR/bin/test_grammar, default build/) with KVASIR_GRAMMAR_DUMP set,
then validates every dumped output with jsonschema (Draft 2020-12) and
compares the verdicts. KVASIR_GRAMMAR_WALKS=N in the environment makes the
walks N times as many.

jsonschema comes from PyPI into a venv of its own (BUILD_DIR/venv-grammar-ref,
made on first use). Strict specs are checked as XGrammar compiles them: every
object schema without "additionalProperties" gets false, every tuple
("prefixItems") without "items" gets false. Exit 0 when jsonschema agrees
with every verdict, 1 when not (each disagreement printed), 2 on bad usage.
Run by hand; not part of ctest.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

JSONSCHEMA = "jsonschema==4.23.0"


def venv_python(build):
    venv = os.path.join(build, "venv-grammar-ref")
    py = os.path.join(venv, "bin", "python3")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", JSONSCHEMA], check=True)
    return py


def strict(schema):
    """The schema with strict mode's defaults written out."""
    s = copy.deepcopy(schema)

    def visit(node):
        if not isinstance(node, dict):
            return
        if ("properties" in node or node.get("type") == "object") \
                and "additionalProperties" not in node:
            node["additionalProperties"] = False
        if "prefixItems" in node and "items" not in node:
            node["items"] = False
        for key in ("properties", "$defs"):
            for sub in node.get(key, {}).values():
                visit(sub)
        for key in ("anyOf", "prefixItems"):
            for sub in node.get(key, []):
                visit(sub)
        for key in ("items", "additionalProperties"):
            visit(node.get(key))

    visit(s)
    return s


def check(dump_path):
    """Runs inside the venv: compares jsonschema's verdicts with ours."""
    import jsonschema
    agree = disagree = 0
    with open(dump_path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            schema = strict(rec["schema"]) if rec["strict"] else rec["schema"]
            errors = list(jsonschema.Draft202012Validator(schema).iter_errors(
                json.loads(rec["text"])))
            if bool(errors) == bool(rec["ours"]):
                agree += 1
                continue
            disagree += 1
            print(f"{rec['case']}: ours '{rec['ours']}', jsonschema "
                  f"{[e.message for e in errors]}: {rec['text']!r}")
    print(f"check_walks: {agree + disagree} outputs, jsonschema agrees with {agree}, "
          f"disagrees with {disagree}")
    return 1 if disagree or not agree else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        return check(sys.argv[2])
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
    build = os.path.abspath(sys.argv[1] if len(sys.argv) == 2 else os.path.join(root, "build"))
    binary = os.path.join(build, "bin", "test_grammar")
    if not os.path.exists(binary):
        print(f"check_walks: no {binary}; build the target test_grammar first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "walks.jsonl")
        env = dict(os.environ, KVASIR_GRAMMAR_DUMP=dump, KVASIR_SOURCE_DIR=os.path.abspath(root))
        subprocess.run([binary, "--gtest_filter=GrammarJsonWalk.Schemas*"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        return subprocess.run([venv_python(build), os.path.abspath(__file__), "--check",
                               dump]).returncode


if __name__ == "__main__":
    sys.exit(main())
