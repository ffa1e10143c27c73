#!/usr/bin/env python3
"""Writes cases.json: Jinja templates, variables and what Python's jinja2 renders for them, configured the way HF
transformers renders chat templates (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its
tojson/raise_exception). tests/unit/jinja_test.cc checks glint's interpreter against every case.

Regenerate after adding a case (needs python3-jinja2, Debian 12's 3.1.x):  python3 make_cases.py > cases.json
Cases whose template jinja2 rejects are stored with "error": true; glint must reject them too.
"""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi <there> & \"you\""},
    {"role": "assistant", "content": "Hello!", "reasoning_content": "greet"},
    {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": " part two"}]},
]

CASES = [
    # text and whitespace control
    ("plain text", "hello\nworld\n", {}),
    ("trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter", {}),
    ("lstrip_blocks", "  {% if true %}\n  x\n  {% endif %}\n", {}),
    ("lstrip disabled with +", "  {%+ if true %}x{% endif %}", {}),
    ("trim disabled with +", "{% if true +%}\nx{% endif %}", {}),
    ("minus strips", "a   \n  {%- if true -%}  \n b {%- endif %}  c", {}),
    ("variable minus", "a  {{- 'b' -}}  c", {}),
    ("variable not lstripped", "  {{ 'x' }}\n", {}),
    ("comment", "a {# note #} b\n  {# line #}\nc", {}),
    ("comment minus", "a  {#- note -#}  b", {}),
    ("raw", "{% raw %}{{ not evaluated }}{% endraw %}", {}),
    ("text after tag newline", "{% set x = 1 %}\n\n{{ x }}", {}),
    ("lstrip after variable", "{{ 'a' }}  {% if true %}b{% endif %}", {}),
    ("crlf text", "a\r\n{% if true %}\r\nb{% endif %}", {}),
    ("trailing newline dropped once", "a\n\n", {}),
    ("lstrip after text on the same line", "x  {% if true %}y{% endif %}", {}),
    ("lstrip tabs", "a\n\t \t{% if true %}b{% endif %}", {}),
    ("lstrip after variable line", "{{ 'v' }}\n   {% if true %}b{% endif %}", {}),
    ("lstrip comment", "a\n   {# c #}\nb", {}),
    ("minus and trim", "{% for x in [1, 2] -%}\n  {{ x }}\n{%- endfor %}\nend", {}),
    ("trim after endfor", "{% for x in [1, 2] %}\n{{ x }}\n{% endfor %}\nend", {}),
    # literals and printing
    ("ints and floats", "{{ 1 }} {{ 1.5 }} {{ 2.0 }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e16 }} {{ 123456789012345678 }}", {}),
    ("none and bools", "{{ none }} {{ None }} {{ true }} {{ False }}", {}),
    ("list repr", "{{ [1, 'a', none, true, 2.5, [\"q'\"]] }}", {}),
    ("dict repr", "{{ {'a': 1, 'b': 'x', 'c': {'d': none}} }}", {}),
    ("string escapes", "{{ 'a\\nb\\tc\\\\d\\'e' }}|{{ \"\\u00e9\\x41\" }}", {}),
    ("adjacent strings", "{{ 'a' 'b' \"c\" }}", {}),
    ("tuple", "{{ (1, 2) }} {{ (1,) }} {{ () }}", {}),
    ("undefined prints empty", "[{{ missing }}]", {}),
    ("repr of quotes", "{{ [\"it's\", 'say \"x\"', 'both \\' \"'] }}", {}),
    ("unicode repr", "{{ ['é', '中文', '\\x00'] }}", {}),
    # operators
    ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }}", {}),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 * 3 ~ 4 }} {{ (1 + 2) ~ 3 }}", {}),
    ("concat binds tighter than +", "{{ 1 + 2 ~ 3 }}", {}),
    ("string concat", "{{ 'a' + 'b' }} {{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }}", {}),
    ("comparisons", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ true == 1 }}", {}),
    ("in", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'x' not in 'abc' }} {{ 'a' in missing }}", {}),
    ("and or not", "{{ 1 and 'x' }} {{ 0 or '' or 'z' }} {{ not 0 }} {{ not 'a' and 'b' }} {{ none or 5 }}", {}),
    ("conditional expr", "{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}]", {}),
    ("nested conditional", "{{ 'a' if false else 'b' if true else 'c' }}", {}),
    ("unary", "{{ -3 }} {{ +3 }} {{ - -3 }} {{ -x }}", {"x": 4}),
    # attributes and subscripts
    ("attribute and item", "{{ m.role }} {{ m['content'] }} {{ m.nope }}|{{ list[0] }} {{ list[-1] }} {{ list[5] }}|{{ list.0 }}", {"m": {"role": "user", "content": "hi"}, "list": [1, 2, 3]}),
    ("slices", "{{ s[1:] }} {{ s[:2] }} {{ s[::-1] }} {{ l[1:3] }} {{ l[::2] }} {{ l[-2:] }} {{ s[10:] }}", {"s": "héllo", "l": [1, 2, 3, 4, 5]}),
    ("string index", "{{ s[0] }}{{ s[-1] }}", {"s": "héllo"}),
    ("attribute of none", "[{{ n.x }}]", {"n": None}),
    # statements
    ("if elif else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}", {}),
    ("for loop vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {}),
    ("for prev next", "{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", {}),
    ("loop cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("for else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("for filter", "{% for x in range(10) if x % 3 == 0 %}{{ x }}{{ loop.index }}{{ loop.length }} {% endfor %}", {}),
    ("for unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 2, "a": 1}}),
    ("for over dict", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 2, "a": 1}}),
    ("break continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("nested loops", "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ a }}{{ b }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("set scope in loop", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", {}),
    ("set tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("set block", "{% set x %}in {{ 1 + 1 }}{% endset %}[{{ x }}]", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }}", {}),
    ("macro sees globals", "{% set g = 'G' %}{% macro f() %}{{ g }}{{ v }}{% endmacro %}{{ f() }}", {"v": "V"}),
    ("macro recursion", "{% macro count(n) %}{{ n }}{% if n > 0 %}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(3) }}", {}),
    ("filter block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}", {}),
    # filters
    ("length and count", "{{ 'héllo' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }} {{ missing | length }}", {}),
    ("tojson", "{{ d | tojson }}", {"d": {"name": "é\"\n", "n": [1, 2.5, None, True], "o": {}}}),
    ("tojson args", "{{ d | tojson(indent=2) }}|{{ d | tojson(ensure_ascii=True) }}|{{ d | tojson(sort_keys=True) }}|{{ d | tojson(separators=(',', ':')) }}", {"d": {"b": ["x", "é", "😀"], "a": {"c": 1.0}}}),
    ("tojson floats", "{{ [0.1, 1e-7, 1e22, 3.0, -0.0, 100.0, 1.5e300] | tojson }}", {}),
    ("trim", "[{{ '  a b \\n' | trim }}] [{{ 'xxaxx' | trim('x') }}]", {}),
    ("default", "{{ missing | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ none | d('z') }} {{ 0 | default(5, boolean=true) }}", {}),
    ("string filters", "{{ 'hello world' | upper }} {{ 'HeLLo' | lower }} {{ 'hello world-x' | title }} {{ 'hELLO' | capitalize }} {{ 'a<b>&' | e }} {{ 5 | string }}", {}),
    ("join", "{{ [1, 2, 3] | join(', ') }} {{ ['a', 'b'] | join }} {{ users | join('/', attribute='name') }}", {"users": [{"name": "x"}, {"name": "y"}]}),
    ("first last", "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} [{{ [] | first }}]", {}),
    ("list reverse", "{{ 'abc' | list }} {{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }}", {}),
    ("items", "{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}", {"d": {"x": 1, "y": 2}}),
    ("map select", "{{ users | map(attribute='name') | join(',') }} {{ [1, 0, 2] | select | list }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3] | reject('odd') | list }} {{ ['a', 'B'] | map('upper') | list }}", {"users": [{"name": "x"}, {"name": "y"}]}),
    ("selectattr", "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ ms | rejectattr('role', 'eq', 'user') | list | length }} {{ ms | selectattr('flag') | list | length }}", {"ms": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b", "flag": True}, {"role": "user", "content": "c"}]}),
    ("sort unique", "{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2, 1, 3] | unique | list }} {{ us | sort(attribute='n') | map(attribute='n') | list }}", {"us": [{"n": 2}, {"n": 1}]}),
    ("dictsort", "{{ {'b': 1, 'a': 2} | dictsort }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }}", {}),
    ("numbers", "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3 | float }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.1 | round(0, 'ceil') }}", {}),
    ("sum min max", "{{ [1, 2, 3] | sum }} {{ [1, 2, 3] | sum(start=10) }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'a'] | max }}", {}),
    ("replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'ab' | replace('', '-') }}", {}),
    ("indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}", {}),
    ("wordcount", "{{ 'hello big  world' | wordcount }}", {}),
    ("attr", "{{ d | attr('k') }}", {"d": {"k": "v"}}),
    # tests
    ("tests types", "{{ 's' is string }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ [1] is iterable }} {{ {} is mapping }} {{ none is none }} {{ true is boolean }} {{ x is defined }} {{ y is undefined }} {{ 's' is sequence }} {{ 1 is iterable }}", {"x": 1}),
    ("tests values", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 2 is gt 1 }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 1 is in [1] }} {{ true is true }} {{ 0 is false }} {{ none is sameas none }}", {}),
    ("test not", "{{ x is not defined }} {{ x is not none }}", {"x": None}),
    ("test in condition", "{% if m.tool_calls is defined and m.tool_calls %}calls{% else %}none{% endif %}", {"m": {"tool_calls": []}}),
    # methods
    ("strip methods", "[{{ '  a  '.strip() }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}][{{ 'xay'.strip('xy') }}][{{ '\\n\\ta\\n'.strip() }}]", {}),
    ("split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  a  b  c '.split(none, 1) }} {{ '  a  b  c '.rsplit(none, 1) }}", {}),
    ("split think", "{{ c.split('</think>')[0].split('<think>')[-1] }}|{{ c.split('</think>')[-1] }}", {"c": "<think>reason</think>answer"}),
    ("startswith", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('x') }}", {}),
    ("case methods", "{{ 'Hello World'.upper() }} {{ 'Hello'.lower() }} {{ \"they're bill's\".title() }} {{ 'hello'.capitalize() }}", {}),
    ("find replace count", "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ 'hello'.replace('l', 'L') }} {{ 'héllo'.find('l') }}", {}),
    ("join method", "{{ ', '.join(['a', 'b']) }}", {}),
    ("format method", "{{ '{} and {}'.format('a', 1) }} {{ '{0}{0}'.format('x') }} {{ '{name}!'.format(name='n') }} {{ '{{}}'.format() }}", {}),
    ("dict methods", "{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 9) }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }}", {"d": {"a": 1, "b": 2}}),
    ("splitlines", "{{ 'a\\nb\\r\\nc'.splitlines() }}", {}),
    ("is methods", "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'a1'.isalnum() }} {{ '  '.isspace() }} {{ ''.isdigit() }}", {}),
    ("removeprefix", "{{ 'prefix-x'.removeprefix('prefix-') }} {{ 'x.json'.removesuffix('.json') }}", {}),
    # globals
    ("range", "{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(10, 0, -3) | list }}", {}),
    ("dict global", "{{ dict(a=1, b=2) }}", {}),
    ("raise_exception", "{{ raise_exception('bad role') }}", {}),
    # errors jinja2 reports
    ("undefined attribute", "{{ missing.x }}", {}),
    ("unknown filter", "{{ 1 | nosuchfilter }}", {}),
    ("unclosed tag", "{% if x %}", {}),
    ("unclosed variable", "{{ x ", {}),
    ("bad syntax", "{{ 1 + }}", {}),
    ("int overflow is fine in python, error here", "{{ 2 ** 10 }}", {}),
    ("none iteration", "{% for x in n %}{% endfor %}", {"n": None}),
    ("add str int", "{{ 'a' + 1 }}", {}),
    ("division by zero", "{{ 1 / 0 }}", {}),
    ("set on non-namespace", "{% set d = {} %}{% set d.x = 1 %}", {}),
    ("break outside loop", "{% break %}", {}),
    ("endfor mismatch", "{% for x in y %}{% endif %}", {}),
    # chat-template shapes
    ("messages loop", "{% for m in messages %}<|{{ m.role }}|>{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}", {"messages": MESSAGES, "add_generation_prompt": True}),
    ("last user index", "{% set ns = namespace(last=-1) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{{ ns.last }}", {"messages": MESSAGES}),
    ("messages slice", "{% for m in messages[1:] %}{{ m.role }} {% endfor %}{{ messages[0]['role'] }}", {"messages": MESSAGES}),
    ("tools json", "{% for tool in tools %}{{ tool | tojson(ensure_ascii=False) }}\n{% endfor %}", {"tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather für a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]}),
    ("tool call args", "{% for k, v in args.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v if v is string else v | tojson(ensure_ascii=False) }}</arg_value>{% endfor %}", {"args": {"city": "Paris", "days": 3, "opts": {"unit": "C"}, "flag": False}}),
]


def main():
    out = []
    for name, template, variables in CASES:
        case = {"name": name, "template": template, "variables": variables}
        try:
            case["expected"] = env.from_string(template).render(**variables)
        except Exception as error:  # noqa: BLE001 - any jinja2 failure means glint must fail too
            case["error"] = True
            case["python_error"] = f"{type(error).__name__}: {error}"
        out.append(case)
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
