#!/usr/bin/env bash
# Black-box test of structured output on `glint serve` with the embedded tiny model: the schema suite
# (tests/data/structured/schemas.json) sampled at temperature 1 with several seeds, every finished output validated
# with Debian's python3-jsonschema; regex, choice and GBNF outputs checked; required and named tool calls validated
# against their parameter schemas; bad schemas, regexes and grammars refused with a 400 naming what is wrong; a
# schema that cannot finish within max_tokens ends with finish_reason "length". Args: path-to-glint, tests/data dir.
set -euo pipefail
glint="$1"
data="$2"
source "$(dirname "${BASH_SOURCE[0]}")/lib/serve_util.sh"  # $work, fail, start_server, stop_server, metric

python3 -c "import jsonschema" 2>/dev/null || fail "python3-jsonschema is missing (scripts/setup.sh installs it)"
start_server --memory 256M --max-seqs 16 --max-model-len 1024
python3 - "$base" "$data/structured/schemas.json" <<'EOF' || fail "structured output checks failed"
import concurrent.futures, json, re, sys, urllib.error, urllib.request
import jsonschema

base, suite_path = sys.argv[1], sys.argv[2]
suite = json.load(open(suite_path))["schemas"]
SEEDS = [1, 2, 3]
NO_THINKING = {"enable_thinking": False}  # the constraint starts at the answer; no free reasoning first

def post(path, body):
    request = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)

def chat(extra, content="Answer in JSON.", max_tokens=200, seed=1, n=1):
    body = {"messages": [{"role": "user", "content": content}], "temperature": 1, "seed": seed,
            "max_tokens": max_tokens, "n": n, "chat_template_kwargs": NO_THINKING}
    body.update(extra)
    status, reply = post("/v1/chat/completions", body)
    assert status == 200, (status, reply)
    return reply

failures = []
def check(condition, what):
    if not condition:
        failures.append(what)

# 1. The schema suite: every output that finished is valid against its schema (and is the whole content).
def sample_schema(entry, seed):
    fmt = {"type": "json_schema", "json_schema": {"name": entry["name"], "schema": entry["schema"], "strict": True}}
    return entry, seed, chat({"response_format": fmt}, seed=seed)

finished = {entry["name"]: 0 for entry in suite}
jobs = [(entry, seed) for entry in suite for seed in SEEDS]
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    for entry, seed, reply in pool.map(lambda job: sample_schema(*job), jobs):
        choice = reply["choices"][0]
        text = choice["message"]["content"]
        if choice["finish_reason"] == "length":
            continue
        check(choice["finish_reason"] == "stop", f"{entry['name']} seed {seed}: finish {choice['finish_reason']}")
        try:
            value = json.loads(text)
            jsonschema.Draft202012Validator(entry["schema"]).validate(value)
            finished[entry["name"]] += 1
        except Exception as error:  # noqa: BLE001 - any failure is reported with the text
            failures.append(f"{entry['name']} seed {seed}: {text!r}: {error}")
for name, count in finished.items():
    check(count >= 1, f"{name}: no seed finished within max_tokens")
print("schemas: finished and valid per schema:", finished)

# n > 1 and the vLLM field: every choice valid.
entry = suite[0]
reply = chat({"structured_outputs": {"json": entry["schema"]}}, n=3, seed=7)
for choice in reply["choices"]:
    if choice["finish_reason"] == "stop":
        jsonschema.validate(json.loads(choice["message"]["content"]), entry["schema"])
reply = chat({"guided_json": json.dumps(entry["schema"])}, seed=8)  # guided_json as a JSON string
if reply["choices"][0]["finish_reason"] == "stop":
    jsonschema.validate(json.loads(reply["choices"][0]["message"]["content"]), entry["schema"])
reply = chat({"response_format": {"type": "json_object"}}, seed=9)
if reply["choices"][0]["finish_reason"] == "stop":
    check(isinstance(json.loads(reply["choices"][0]["message"]["content"]), dict), "json_object is not an object")

# 2. Regex, choice and grammar outputs.
REGEX = r"[A-Z][a-z]{2,5}-\d{3}(x|yz)?"
for seed in SEEDS:
    for field in ({"guided_regex": REGEX}, {"structured_outputs": {"regex": REGEX}}):
        text = chat(field, seed=seed, max_tokens=40)["choices"][0]["message"]["content"]
        check(re.fullmatch(REGEX, text) is not None, f"regex {field}: {text!r}")
    choices = ["yes", "no", "maybe so", "日本語"]
    for field in ({"guided_choice": choices}, {"structured_outputs": {"choice": choices}}):
        text = chat(field, seed=seed, max_tokens=40)["choices"][0]["message"]["content"]
        check(text in choices, f"choice {field}: {text!r}")
    gbnf = 'root ::= "(" num ("+" num)* ")"\nnum ::= [1-9] [0-9]{0,2}'
    reply = chat({"guided_grammar": gbnf}, seed=seed, max_tokens=60)["choices"][0]
    if reply["finish_reason"] == "stop":
        check(re.fullmatch(r"\([1-9][0-9]{0,2}(\+[1-9][0-9]{0,2})*\)", reply["message"]["content"]) is not None,
              f"grammar: {reply['message']['content']!r}")
reply = post("/v1/completions", {"prompt": "Code:", "guided_regex": REGEX, "temperature": 1, "seed": 4,
                                 "max_tokens": 40})[1]
check(re.fullmatch(REGEX, reply["choices"][0]["text"]) is not None, f"completions regex: {reply['choices'][0]}")

# 3. Tool calls: required and named choices follow the tools' parameter schemas.
ADD = {"type": "object", "properties": {"a": {"type": "number", "minimum": -100, "maximum": 100},
                                        "b": {"type": "integer", "minimum": 0, "maximum": 9}},
       "required": ["a", "b"]}
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"]}
tools = [{"type": "function", "function": {"name": "add", "parameters": ADD}},
         {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
schemas = {"add": ADD, "get_weather": WEATHER}
validated_calls = {"required": 0, "named": 0}
for seed in SEEDS:
    for tool_choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        choice = chat({"tools": tools, "tool_choice": tool_choice}, content="Weather in Paris?", seed=seed,
                      max_tokens=320)["choices"][0]
        if choice["finish_reason"] == "length":
            continue
        calls = choice["message"].get("tool_calls") or []
        check(choice["finish_reason"] == "tool_calls" and calls, f"tool_choice {tool_choice}: {choice}")
        for call in calls:
            name = call["function"]["name"]
            check(name in schemas, f"unknown tool {name}")
            if isinstance(tool_choice, dict):
                check(name == "get_weather", f"named choice called {name}")
            try:
                jsonschema.validate(json.loads(call["function"]["arguments"]), schemas.get(name, {}))
                validated_calls["named" if isinstance(tool_choice, dict) else "required"] += 1
            except Exception as error:  # noqa: BLE001
                failures.append(f"tool {name} seed {seed}: {call['function']['arguments']!r}: {error}")

print("tool calls validated:", validated_calls)
check(min(validated_calls.values()) >= 1, f"too few tool calls finished within max_tokens: {validated_calls}")

# 4. Refusals: a 400 whose message names the keyword or construct.
BAD = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
        {"type": "string", "contentEncoding": "base64"}}}}, "contentEncoding"),
    ({"guided_json": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}, "oneOf"),
    ({"guided_json": {"type": "array", "uniqueItems": True}}, "uniqueItems"),
    ({"guided_json": {"$ref": "#/$defs/none"}}, "points at nothing"),
    ({"guided_json": {"type": "number", "minimum": 3.5, "maximum": 1}}, "exclude every number"),
    ({"guided_regex": "(a)\\1"}, "backreferences"),
    ({"guided_regex": "(?=x)y"}, "lookaround"),
    ({"guided_grammar": "root ::= item\n"}, "'item'"),
    ({"guided_grammar": "root ::= root \"a\" | \"b\""}, "left-recursive"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "both constrain"),
    ({"structured_outputs": {"structural_tag": "x"}}, "structural_tag"),
]
for extra, word in BAD:
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 8}
    body.update(extra)
    status, reply = post("/v1/chat/completions", body)
    message = reply.get("error", {}).get("message", "")
    check(status == 400 and word in message, f"{extra}: expected 400 naming {word!r}, got {status} {message!r}")

# 5. A schema that cannot finish within max_tokens ends with "length".
choice = chat({"guided_json": {"type": "string", "minLength": 300}}, max_tokens=6)["choices"][0]
check(choice["finish_reason"] == "length", f"long schema: {choice}")

if failures:
    print("\n".join(failures), file=sys.stderr)
    sys.exit(1)
print("structured output: all checks passed")
EOF
compiled="$(metric glint_structured_output_grammars_compiled_total)"
[[ -n "$compiled" ]] && python3 -c "import sys; sys.exit(0 if float('$compiled') >= 10 else 1)" ||
  fail "glint_structured_output_grammars_compiled_total is '$compiled'; expected the suite's compilations"
grep -q "structured output: compiled" "$work/server.log" || fail "no compile time in the server log"
stop_server
echo "PASS structured_output"
