#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (NU_FUZZ=ON) and runs each for a
# bounded time: the GGUF reader, then the tokenizers (on the vocabularies in
# ../shared/vocab), then the chat-template engine, then the grammars (GBNF, JSON Schema, regex and the
# matcher), then the server's request parser, tool-call answer parser, strict
# JSON check (with the answers' escaper), and its HTTP side as raw bytes (a
# live server in the fuzzer's process).
# Exits non-zero if a fuzzer finds a crash, a leak or undefined behaviour; the
# input that triggered it is left in the build directory's fuzz-artifacts/.
#
# usage: scripts/fuzz.sh [SECONDS]        (default 120: the whole run, shared
#                                          evenly by the fuzzers, 10 s at least each)
#   NU_FUZZ_BUILD   build directory (default: build-fuzz in the project root)
#   NU_FUZZ_JOBS    parallel fuzzing processes (default 1)
set -euo pipefail

seconds="${1:-120}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -eq 0 ]; then
  echo "usage: $0 [SECONDS]" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${NU_FUZZ_BUILD:-$root/build-fuzz}"
jobs="${NU_FUZZ_JOBS:-1}"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DNU_FUZZ=ON -DNU_TESTS=OFF >/dev/null
# Only the fuzzers (and the layers they link, instrumented).
cmake --build "$build" --target fuzz_gguf fuzz_tokenizer fuzz_jinja fuzz_grammar fuzz_request \
  fuzz_tools fuzz_json fuzz_http

# New inputs go to working corpora in the build directory; the committed
# seeds are only read.
artifacts="$build/fuzz-artifacts/"
mkdir -p "$build/fuzz-corpus/gguf" "$build/fuzz-corpus/tokenizer" "$artifacts"

# With several jobs libFuzzer runs them as child processes logging to fuzz-N.log.
parallel=()
if [ "$jobs" -gt 1 ]; then parallel=(-jobs="$jobs" -workers="$jobs"); fi
# SECONDS is the whole budget: keep n_fuzzers equal to the fuzzers run below.
n_fuzzers=8
seconds=$((seconds / n_fuzzers < 10 ? 10 : seconds / n_fuzzers))
common=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts"
        -print_final_stats=1)

cd "$build"

# write_dict FILE WORD...: a libFuzzer dictionary with each word as an entry
# (appended to what FILE already holds).
write_dict() {
  local out=$1 w
  shift
  for w in "$@"; do printf '"%s"\n' "$w" >>"$out"; done
}

# fuzz_capped NAME CAP MAX_LEN WHAT: fuzz_NAME for at most CAP seconds (of
# the per-fuzzer budget) with NAME.dict, inputs up to MAX_LEN bytes, its
# working corpus, the seeds in $seeds and the committed regression inputs of
# fuzz/corpus/NAME (inputs that once failed, kept so they are run every time).
fuzz_capped() {
  local name=$1 secs=$(( seconds < $2 ? seconds : $2 )) kept=()
  [ -d "$root/fuzz/corpus/$name" ] && kept=("$root/fuzz/corpus/$name")
  echo "fuzzing $4 for ${secs}s ..."
  "$build/fuzz/fuzz_$name" "${common[@]/-max_total_time=*/-max_total_time=$secs}" -max_len="$3" \
    -dict="$build/$name.dict" "${parallel[@]}" "$build/fuzz-corpus/$name" "$seeds" "${kept[@]}"
}

echo "fuzzing gguf for ${seconds}s ..."
"$build/fuzz/fuzz_gguf" "${common[@]}" -dict="$root/fuzz/gguf.dict" "${parallel[@]}" \
  "$build/fuzz-corpus/gguf" "$root/fuzz/corpus/gguf"

# Seeds: the tokenizer test texts (the first byte of an input picks the
# vocabulary and whether special tokens are parsed).
seeds="$build/fuzz-corpus/tokenizer-seeds"
mkdir -p "$seeds"
cp "$root/../shared/vocab/ggml-vocab-gpt-2.gguf.inp" "$seeds/texts" 2>/dev/null || true
printf '\x80a<|endoftext|>b<fim_prefix> <|User|>' >"$seeds/special"
echo "fuzzing the tokenizers for ${seconds}s ..."
"$build/fuzz/fuzz_tokenizer" "${common[@]}" -max_len=4096 "${parallel[@]}" \
  "$build/fuzz-corpus/tokenizer" "$seeds"

# Chat templates: seeded with the real templates of ../shared/chat_templates,
# with a dictionary of Jinja syntax.
seeds="$build/fuzz-corpus/jinja-seeds"
mkdir -p "$seeds" "$build/fuzz-corpus/jinja"
cp "$root"/../shared/chat_templates/*.jinja "$seeds/" 2>/dev/null || true
printf '"{{"\n"}}"\n"{%%"\n"%%}"\n"{#"\n"#}"\n"{%%-"\n"-%%}"\n"{{-"\n"-}}"\n"{%%+"\n' >"$build/jinja.dict"
write_dict "$build/jinja.dict" if elif else endif for endfor in set endset macro endmacro call \
  endcall filter endfilter with endwith raw endraw break continue generation endgeneration \
  namespace loop caller not and or is defined none true false tojson trim items selectattr map \
  join length default range
echo "fuzzing the chat templates for ${seconds}s ..."
"$build/fuzz/fuzz_jinja" "${common[@]}" -max_len=8192 -dict="$build/jinja.dict" "${parallel[@]}" \
  "$build/fuzz-corpus/jinja" "$seeds"

# Grammars: one seed per front end (the first byte picks GBNF, JSON Schema,
# regex, a JSON-string pattern or choices; the text to match follows a NUL
# byte).
seeds="$build/fuzz-corpus/grammar-seeds"
mkdir -p "$seeds" "$build/fuzz-corpus/grammar"
printf '\x00root ::= "a" [b-d]* ("x" | y){1,3} # c\ny ::= [^\\n\\u00e9]? .\n\x00abbxy\xc3\xa9' \
  >"$seeds/gbnf"
printf '\x01{"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":300},'`
      `'"b":{"type":"string","format":"date"},"c":{"$ref":"#"}},"required":["a"]}\x00{"a":12}' \
  >"$seeds/schema"
printf '\x02^(ab|c)*d{2,3}[^x-z]\\d+$\x00ababcdd1' >"$seeds/regex"
printf '\x03[a-z]+"x\x00"ab\\"x"' >"$seeds/pattern"
printf '\x07yes\nno\nmaybe\nye\n\xc3\xa9t\xc3\xa9\x00maybe' >"$seeds/choices"
: >"$build/grammar.dict"
write_dict "$build/grammar.dict" '::=' '|' '[^' '\\u00e9' '\\x41' '{2,5}' '(?:' 'properties' \
  'required' 'type' 'items' 'prefixItems' 'anyOf' 'oneOf' 'allOf' '$ref' '#/$defs/' 'minimum' \
  'exclusiveMaximum' 'maxLength' 'pattern' 'format' 'date-time' 'additionalProperties' 'enum' 'const'
fuzz_capped grammar 60 2048 "the grammars"

# Server requests (server/openai_params.c), for at most 30 s: the first byte
# picks chat, completions or Anthropic's Messages (+4: count_tokens; translated
# into a chat request first), the rest is the JSON body.
seeds="$build/fuzz-corpus/request-seeds"
mkdir -p "$seeds" "$build/fuzz-corpus/request"
printf '\x00{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":'`
      `'"text","text":"hi"}]}],"max_tokens":8,"temperature":0.7,"top_p":0.9,"n":2,"stream":true,'`
      `'"stream_options":{"include_usage":true},"stop":["\\n","x"],"logprobs":true,"top_logprobs":3,'`
      `'"logit_bias":{"13":-100},"seed":-5,"response_format":{"type":"json_schema","json_schema":'`
      `'{"name":"p","schema":{"type":"object"}}}}' >"$seeds/chat"
printf '\x01{"prompt":[[1,2,3],[4]],"max_tokens":0,"echo":true,"logprobs":5,"best_of":3,"n":2,'`
      `'"top_k":40,"min_p":0.1,"typical_p":0.5,"repetition_penalty":1.1,"penalty_last_n":-1,'`
      `'"no_repeat_ngram_size":3,"min_tokens":2,"ignore_eos":false,"choice":["a","b"]}' >"$seeds/completion"
printf '\x01{"prompt":"Once","beam_width":3,"n":2,"length_penalty":0.5,"early_stopping":true}' >"$seeds/beam"
printf '\x02{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":'`
      `'"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":[{"type":'`
      `'"thinking","thinking":"h"},{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":'`
      `'"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}],"tools":[{"name":'`
      `'"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},"thinking":{"type":'`
      `'"enabled","budget_tokens":2},"stop_sequences":["x"],"top_k":3}' >"$seeds/anthropic"
printf '\x01{"prompt":"Once","dry_multiplier":0.8,"dry_base":1.75,"dry_allowed_length":2,'`
      `'"dry_penalty_last_n":-1,"dry_sequence_breakers":["\\n",":"],"xtc_probability":0.5,'`
      `'"xtc_threshold":0.1,"top_n_sigma":1,"dynatemp_range":0.5,"dynatemp_exponent":1,"mirostat":2,'`
      `'"mirostat_tau":5,"mirostat_eta":0.1,"banned_strings":["ab"],"banned_tokens":[3,[4,5]]}' >"$seeds/samplers"
: >"$build/request.dict"
write_dict "$build/request.dict" messages prompt role content system user assistant max_tokens \
  max_completion_tokens temperature top_p stream stream_options include_usage stop presence_penalty frequency_penalty \
  logit_bias logprobs top_logprobs echo seed response_format json_schema json_object best_of \
  top_k min_p typical_p repetition_penalty penalty_last_n beam_width null true false '\\u0000' \
  dry_multiplier dry_base dry_allowed_length dry_penalty_last_n dry_sequence_breakers \
  xtc_probability xtc_threshold top_n_sigma dynatemp_range dynatemp_exponent mirostat \
  mirostat_tau mirostat_eta banned_strings banned_tokens \
  tool_use tool_result thinking budget_tokens stop_sequences input_schema \
  '\\ud800' 1e999 -0 9007199254740993
fuzz_capped request 30 4096 "the server's request parser"

# Tool-call answers (server/tools.c), for at most 30 s: byte 0 picks the call
# format (low two bits: generic, Hermes, Mistral, Llama 3), +4 a grammar-shaped
# answer, +8 parallel_tool_calls off; byte 1 seeds where the stream is cut.
seeds="$build/fuzz-corpus/tools-seeds"
mkdir -p "$seeds" "$build/fuzz-corpus/tools"
printf '\x01\x07I will check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'`
      `'</tool_call>\n<tool_call>\n{"name":"search","arguments":{"q":"x"}}\n</tool_call>' >"$seeds/hermes"
printf '\x05\x03<tool_call>{"name":"f","arguments":{"a":[1,2,{"b":null}]}}</tool_call> done' \
  >"$seeds/hermes-grammar"
printf '\x02\x11[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}}, '`
      `'{"name": "f", "arguments": {}}]' >"$seeds/mistral"
printf '\x03\x05<|python_tag|>{"name": "search", "parameters": {"query": "caf\xc3\xa9"}}' >"$seeds/llama3"
printf '\x0b\x09{"name": "get_weather", "parameters": {"city": "Rome"}}' >"$seeds/llama3-bare"
printf '\x00\x02{"tool_calls": [{"name": "get_weather", "arguments": "{\\"city\\": \\"Lima\\"}"}, '`
      `'{"name": "f", "arguments": {}}]}' >"$seeds/generic"
printf '\x04\x01{"tool_calls":[{"name":"f","arguments":{"x":1}}]}' >"$seeds/generic-grammar"
# Malformed: cut short, an unknown tool, broken JSON, a broken grammar-shaped
# call, and text that only looks like calls.
printf '\x01\x00<tool_call>{"name": "get_weather", "arguments": {"city": ' >"$seeds/bad-unclosed"
printf '\x02\x04[TOOL_CALLS][{"name":"nope","arguments":{}}]' >"$seeds/bad-unknown"
printf '\x00\x06{"tool_calls": [{"name": "f", "arguments": {]}' >"$seeds/bad-json"
printf '\x05\x02<tool_call>{"name":"f","arguments":{"a":1]}</tool_call>' >"$seeds/bad-grammar"
printf '\x01\x0aJust text: [1, 2] and {braces} and <tool_ca' >"$seeds/bad-text"
: >"$build/tools.dict"
write_dict "$build/tools.dict" '<tool_call>' '</tool_call>' '<think>' '</think>' '[TOOL_CALLS]' '<|python_tag|>' name \
  arguments parameters tool_calls get_weather search '\\"' '\\u00e9' null true
fuzz_capped tools 30 4096 "the server's tool-call parser"

# The strict JSON check of request bodies (server/json_check.c), for at most
# 30 s: raw bytes as a body, checked against cJSON, and as generated text
# through the answers' escaper.
seeds="$build/fuzz-corpus/json-seeds"
mkdir -p "$seeds" "$build/fuzz-corpus/json"
printf '{"a":[1,-0.5e+3,true,false,null,"\\u00e9\\ud83d\\ude00"],"b":{"c":{}}}' >"$seeds/ok"
printf '{"a":1,"\\u0061":2}' >"$seeds/duplicate"
printf '["a\x01b", "\x00"]' >"$seeds/control"
printf '[01, 1., .5, 1e, -, "\\x", "\\ud800"]' >"$seeds/malformed"
printf '\xc3\xa9\xff\xed\xa0\x80"\\\n' >"$seeds/text"
: >"$build/json.dict"
write_dict "$build/json.dict" '{' '}' '[' ']' ':' ',' '\\\"' '\\\\' '\\u0000' '\\ud800' '\\udc00' \
  '\\u00e9' true false null 1e999 -0 '\\n'
fuzz_capped json 30 4096 "the strict JSON check"

# The HTTP side (fuzz/fuzz_http.c: a live server in the fuzzer's process),
# for at most 60 s: raw request bytes, framing and all.
seeds="$build/fuzz-corpus/http-seeds"
mkdir -p "$seeds" "$build/fuzz-corpus/http"
printf 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n' >"$seeds/health"
printf 'HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n' >"$seeds/pipelined"
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\n{"prompt":"Hi","max_tokens":2}' \
  >"$seeds/completion"
printf 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n'`
      `'3a\r\n{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}\r\n0\r\n\r\n' >"$seeds/chunked"
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n{"a":1}' \
  >"$seeds/two-lengths"
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n' \
  >"$seeds/length-and-chunked"
printf 'POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 36\r\n\r\n{"content":"a b","with_pieces":true}' \
  >"$seeds/tokenize"
: >"$build/http.dict"
write_dict "$build/http.dict" 'GET ' 'POST ' 'HEAD ' ' HTTP/1.1\x0d\x0a' 'Host: x\x0d\x0a' \
  '\x0d\x0a\x0d\x0a' 'Content-Length: ' 'Transfer-Encoding: chunked\x0d\x0a' \
  'Connection: close\x0d\x0a' 'Expect: 100-continue\x0d\x0a' \
  '/v1/completions' '/v1/chat/completions' '/tokenize' '/detokenize' '/v1/models' '/health' \
  '/metrics' '/v1/inspect' '\"stream\":true' '\"max_tokens\":' '\"prompt\":'
fuzz_capped http 60 4096 "the HTTP side (raw bytes to a live server)"
