#!/usr/bin/env bash
# A Hugging Face folder served end to end by the REAL kvasird: the tiny
# model written both as a GGUF file and as a folder of the same weights and
# tokenizer (config.json, model.safetensors, tokenizer.json,
# tokenizer_config.json with the chat template, generation_config.json).
# Asserts: the folder's daemon gets ready; a text and a chat completion
# answer 200 with text; the greedy text equals the GGUF file's; the folder's
# generation_config.json temperature is the default of a request that sets
# none; a folder with a corrupt tokenizer.json, or a generation_config.json
# default no request could send, is refused at start with a message naming
# the file.
#
# With the default model present, the same again as a new user would meet
# it: SmolLM2's weights dequantised to F32, written as a folder (its real
# tokenizer.json with merges, its chat template) and as an F32 GGUF file by
# hf_from_gguf; the two must give the same greedy text.
#
# Usage: test_hf_folder.sh KVASIRD WRITE_TINY_MODEL HF_FROM_GGUF [SOURCE_DIR]
set -uo pipefail

KVASIRD=${1:?kvasird path}
WRITER=${2:?write_tiny_model path}
HF_FROM_GGUF=${3:?hf_from_gguf path}
SRC=${4:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$SRC/tests/integration/lib.sh"

WORK=$(mktemp -d /tmp/kvasir-hf-folder.XXXXXX)
trap kv_cleanup EXIT

# temperature 0 in generation_config.json: a request without one is greedy
# only if the folder's default is applied (the engine's own is 1).
"$WRITER" llama "$WORK/tiny.gguf" "$WORK/hf" '{"temperature": 0.0, "eos_token_id": [258]}' ||
  { echo "FAIL cannot write the tiny model"; exit 1; }

config() {  # config MODEL SOCK [LAYERS_A LAYERS_B [KV_MEMORY]]
  cat <<CFG
[model]
path = "$1"
[plan]
max_rows = 4
max_tokens = 64
[[stages]]
layers = "${3:-0}"
device = "cpu"
threads = 1
[[stages]]
layers = "${4:-1}"
device = "cpu"
threads = 1
[kv]
memory = "${5:-8MiB}"
[server]
socket = "$2"
CFG
}

# post SOCK ROUTE BODY: the HTTP status, then the body, on stdout.
post() {
  kv_curl "$1" -w '\n%{http_code}' -H 'Content-Type: application/json' -d "$3" "http://x$2"
}
field() {  # field JSON_LINE PYTHON_EXPR(r)
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

COMPLETION='{"prompt": "Hello world 42", "max_tokens": 12, "ignore_eos": true,
             "skip_special_tokens": false, "temperature": 0}'
UNSET='{"prompt": "Hello world 42", "max_tokens": 12, "ignore_eos": true,
        "skip_special_tokens": false}'
CHAT='{"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 8,
       "ignore_eos": true, "skip_special_tokens": false, "temperature": 0}'
# Structured output: the tail builds its grammar vocabulary from the same
# tokenizer the daemon loaded (for a folder, its tokenizer.json).
JSON='{"messages": [{"role": "user", "content": "Give me a number as JSON."}], "max_tokens": 24,
       "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "n",
       "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}}'

wait_ready() {  # wait_ready PID SOCK: until /health is 200; false once PID exits or at 60 s
  local until=$((SECONDS + 60))
  while [ $SECONDS -lt $until ] && ! kv_gone "$1"; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --unix-socket "$2" http://x/health)" \
      == 200 ] && return 0
    sleep 0.1
  done
  return 1
}

declare -A TEXT
serve() {  # serve NAME MODEL [CONFIG ARGS]: starts kvasird on MODEL, runs the requests, stops it
  local sock="$WORK/$1.sock" out code
  config "$2" "$sock" "${@:3}" > "$WORK/$1.toml"
  kv_spawn DPID "$WORK/$1.toml" "$WORK/$1.log"
  if ! wait_ready "$DPID" "$sock"; then
    bad "$1: kvasird did not become ready"; tail -20 "$WORK/$1.log"; return
  fi
  ok "$1: ready"
  for req in completion unset chat json; do
    case $req in
      completion) out=$(post "$sock" /v1/completions "$COMPLETION") ;;
      unset) out=$(post "$sock" /v1/completions "$UNSET") ;;
      chat) out=$(post "$sock" /v1/chat/completions "$CHAT") ;;
      json) out=$(post "$sock" /v1/chat/completions "$JSON") ;;
    esac
    code=$(tail -1 <<< "$out")
    expect "$1: $req answers 200" "$code" 200
    [ "$code" == 200 ] || { echo "$out"; continue; }
    if [ $req == chat ] || [ $req == json ]; then
      TEXT[$1.$req]=$(field "$(head -1 <<< "$out")" 'repr(r["choices"][0]["message"]["content"])')
    else
      TEXT[$1.$req]=$(field "$(head -1 <<< "$out")" 'repr(r["choices"][0]["text"])')
    fi
    [ "${TEXT[$1.$req]}" != "''" ] || bad "$1: $req gave no text"
  done
  kill -TERM "$DPID"
  wait "$DPID" || bad "$1: kvasird exited $? on SIGTERM"
}

serve gguf "$WORK/tiny.gguf"
serve folder "$WORK/hf"
echo "     GGUF greedy text: ${TEXT[gguf.completion]-}; chat: ${TEXT[gguf.chat]-}"
# A text missing on either side fails (the two placeholders differ).
expect "greedy completion: folder = GGUF" "${TEXT[folder.completion]-none}" \
  "${TEXT[gguf.completion]-no GGUF text}"
expect "greedy chat: folder = GGUF" "${TEXT[folder.chat]-none}" "${TEXT[gguf.chat]-no GGUF text}"
expect "structured output (the folder's tokenizer.json at the tail): folder = GGUF" \
  "${TEXT[folder.json]-none}" "${TEXT[gguf.json]-no GGUF text}"
expect "generation_config.json's temperature 0 is the default" \
  "${TEXT[folder.unset]-none}" "${TEXT[gguf.completion]-no GGUF text}"
# And the GGUF file, without that default, samples at temperature 1.
[ "${TEXT[gguf.unset]-}" != "${TEXT[gguf.completion]-}" ] && ok "the GGUF default is still 1" ||
  bad "the GGUF file's unset temperature gave the greedy text"

# A corrupt tokenizer.json: refused at start, naming the file.
cp -r "$WORK/hf" "$WORK/bad"
head -c 300 "$WORK/hf/tokenizer.json" > "$WORK/bad/tokenizer.json"
config "$WORK/bad" "$WORK/bad.sock" > "$WORK/bad.toml"
timeout 60 "$KVASIRD" --config "$WORK/bad.toml" > "$WORK/bad.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ]; then ok "corrupt tokenizer.json: exit $rc"; else
  bad "corrupt tokenizer.json: kvasird exited $rc"; fi
if grep -q "$WORK/bad/tokenizer.json" "$WORK/bad.log"; then ok "the refusal names the file"; else
  bad "the refusal does not name $WORK/bad/tokenizer.json:"; cat "$WORK/bad.log"; fi

# A generation_config.json default no request could send: refused at start.
cp -r "$WORK/hf" "$WORK/badgen"
echo '{"top_p": 0}' > "$WORK/badgen/generation_config.json"
config "$WORK/badgen" "$WORK/badgen.sock" > "$WORK/badgen.toml"
timeout 60 "$KVASIRD" --config "$WORK/badgen.toml" > "$WORK/badgen.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "badgen/generation_config.json: top_p" "$WORK/badgen.log"
then ok "bad generation_config.json: refused naming the file and key"; else
  bad "bad generation_config.json: exit $rc"; cat "$WORK/badgen.log"; fi

# SmolLM2 as a folder and as an F32 GGUF file of the same weights.
MODEL="$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$MODEL" ]; then
  echo "skip SmolLM2 folder: $MODEL is missing (scripts/fetch-model)"
elif ! "$HF_FROM_GGUF" "$MODEL" "$WORK/smol.gguf" "$WORK/smol"; then
  bad "hf_from_gguf could not write SmolLM2"
else
  COMPLETION='{"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}'
  UNSET=$COMPLETION
  CHAT='{"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 16,
         "temperature": 0}'
  serve smol-gguf "$WORK/smol.gguf" 0-14 15-29 32MiB
  rm -f "$WORK/smol.gguf"
  serve smol-folder "$WORK/smol" 0-14 15-29 32MiB
  echo "     SmolLM2 greedy text: ${TEXT[smol-gguf.completion]-}; chat: ${TEXT[smol-gguf.chat]-}"
  expect "SmolLM2 greedy completion: folder = F32 GGUF" "${TEXT[smol-folder.completion]-none}" \
    "${TEXT[smol-gguf.completion]-no GGUF text}"
  expect "SmolLM2 greedy chat: folder = F32 GGUF" "${TEXT[smol-folder.chat]-none}" \
    "${TEXT[smol-gguf.chat]-no GGUF text}"
  expect "SmolLM2 structured output: folder = F32 GGUF" "${TEXT[smol-folder.json]-none}" \
    "${TEXT[smol-gguf.json]-no GGUF text}"
  python3 -c 'import ast, json, sys; o = json.loads(ast.literal_eval(sys.argv[1])); assert isinstance(o["n"], int)' \
    "${TEXT[smol-folder.json]-''}" 2> /dev/null &&
    ok "SmolLM2 folder's structured output is the schema's JSON: ${TEXT[smol-folder.json]-}" ||
    bad "SmolLM2 folder's structured output: ${TEXT[smol-folder.json]-none}"
fi

kv_finish
