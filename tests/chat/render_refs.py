#!/usr/bin/env python3
"""Renders the reasoning cases of tests/chat/cases.json with the reference engine.

The reference is Python's Jinja2 (Debian: python3-jinja2; these files were made with 3.1.6) set up
as Hugging Face transformers' apply_chat_template sets it up, exactly as
../shared/chat_templates/README.md describes for the expected files there:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loop controls and a
{% generation %} tag that renders its body, transformers' tojson (json.dumps with
ensure_ascii=False), raise_exception, and strftime_now on a fixed clock (2026-11-21 00:00:00).
The variables are messages, add_generation_prompt, tools, bos_token / eos_token from
../shared/chat_templates/templates.json (undefined when null), and the case's "vars"
(enable_thinking, ...).

For every template named in TEMPLATES and every case it writes tests/chat/expected/NAME.CASE.txt,
or NAME.CASE.error.txt ("ExceptionType: message") when rendering raised. test_chat_template
renders the same and compares byte for byte.

Usage: python3 tests/chat/render_refs.py [--check]   (NU_SHARED_DIR: default <repo>/../shared)
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox
from jinja2 import nodes

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("NU_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared"))
TEMPLATES = ["gemma4_31b_it", "qwen3_5_4b", "qwen3_0_6b", "deepseek_r1_distill_qwen_32b", "gpt_oss_120b"]
CLOCK = datetime.datetime(2026, 11, 21, 0, 0, 0)


class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %}...{% endgeneration %}: the body, unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def environment():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = CLOCK.strftime
    return env


def render(env, source, info, case):
    variables = {"messages": case["messages"], "add_generation_prompt": case["add_generation_prompt"],
                 "tools": case["tools"]}
    for key in ("bos_token", "eos_token"):
        if info.get(key) is not None:
            variables[key] = info[key]
    variables.update(case.get("vars", {}))
    try:
        return env.from_string(source).render(**variables), False
    except Exception as e:  # the expected file records what the reference raised
        return f"{type(e).__name__}: {e}", True


def main():
    check = "--check" in sys.argv[1:]
    with open(os.path.join(HERE, "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    with open(os.path.join(SHARED, "chat_templates", "templates.json"), encoding="utf-8") as f:
        infos = json.load(f)
    env = environment()
    different = 0
    for name in TEMPLATES:
        with open(os.path.join(SHARED, "chat_templates", name + ".jinja"), encoding="utf-8",
                  newline="") as f:
            source = f.read()
        for case_id, case in cases.items():
            text, failed = render(env, source, infos[name], case)
            out = os.path.join(HERE, "expected",
                               f"{name}.{case_id}.error.txt" if failed else f"{name}.{case_id}.txt")
            data = text.encode("utf-8")
            if check:
                same = os.path.exists(out) and open(out, "rb").read() == data
                different += not same
                print(f"{name}.{case_id}: {'same' if same else 'DIFFERENT'}")
            else:
                with open(out, "wb") as f:
                    f.write(data)
                print(f"{name}.{case_id}: {'error' if failed else len(data)}")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
