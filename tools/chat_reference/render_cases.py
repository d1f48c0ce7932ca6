#!/usr/bin/env python3
"""Renders the chat-template test cases (tests/chat/data/cases/*.json) with Python's Jinja2, the
independent reference for Strata's Jinja subset, and writes each case's .expected file.

    sudo apt-get install python3-jinja2        # Debian's package (3.1.x); any Jinja2 3.x works
    /usr/bin/python3 tools/chat_reference/render_cases.py            # all cases
    /usr/bin/python3 tools/chat_reference/render_cases.py --check    # compare only, write nothing
    /usr/bin/python3 tools/chat_reference/render_cases.py glm        # cases whose name starts with "glm"

A case is a JSON object: "template" (a file in tests/chat/data), "messages" (OpenAI-style:
role, content, reasoning_content, tool_calls, tool_call_id, name), and optionally "tools",
"add_generation_prompt" (default true), "bos_token", "eos_token" (default ""),
"extra_context" (merged into the template's variables, e.g. {"enable_thinking": false}) and
"now" (Unix time for strftime_now, UTC).

The environment is Hugging Face transformers' chat-template environment: trim_blocks and
lstrip_blocks, the loop-controls extension, `tojson` as json.dumps(ensure_ascii=False, ...),
raise_exception(), strftime_now(); plus llama.cpp's `from_json` filter (json.loads), which the
DeepSeek-V3.2 template uses for string tool-call arguments. It is jinja2's SandboxedEnvironment
rather than transformers' immutable one, because the Kimi K2 templates append to and pop from a
list (llama.cpp's renderer allows that too).

Each message is given to the template as Strata's chat_message_to_json builds it (the same
object the engine renders): role, content (null when absent), reasoning_content and its alias
`thinking` (gpt-oss templates read that name), tool_calls, tool_call_id, name - only the fields
the case sets, in that order.
"""
import datetime
import json
import pathlib
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox

DATA = pathlib.Path(__file__).resolve().parents[2] / "tests" / "chat" / "data"


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def message_object(m):
    out = {"role": m["role"], "content": m.get("content")}
    if m.get("reasoning_content") is not None:
        out["reasoning_content"] = m["reasoning_content"]
        out["thinking"] = m["reasoning_content"]
    if m.get("tool_calls") is not None:
        out["tool_calls"] = m["tool_calls"]
    for key in ("tool_call_id", "name"):
        if m.get(key) is not None:
            out[key] = m[key]
    return out


def render(case):
    env = jinja2.sandbox.SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.filters["from_json"] = json.loads
    env.globals["raise_exception"] = raise_exception
    now = case.get("now")
    when = datetime.datetime.fromtimestamp(now, datetime.timezone.utc) if now is not None else datetime.datetime.now(datetime.timezone.utc)
    env.globals["strftime_now"] = lambda fmt: when.strftime(fmt)
    template = env.from_string((DATA / case["template"]).read_text(encoding="utf-8"))
    ctx = {
        "messages": [message_object(m) for m in case["messages"]],
        "add_generation_prompt": case.get("add_generation_prompt", True),
        "bos_token": case.get("bos_token", ""),
        "eos_token": case.get("eos_token", ""),
    }
    if "tools" in case:
        ctx["tools"] = case["tools"]
    ctx.update(case.get("extra_context", {}))
    return template.render(**ctx)


def main(argv):
    check = "--check" in argv
    prefixes = [a for a in argv if not a.startswith("--")]
    changed = 0
    for path in sorted((DATA / "cases").glob("*.json")):
        if prefixes and not any(path.stem.startswith(p) for p in prefixes):
            continue
        case = json.loads(path.read_text(encoding="utf-8"))
        text = render(case)
        expected = path.with_suffix(".expected")
        old = expected.read_text(encoding="utf-8") if expected.exists() else None
        if old == text:
            continue
        changed += 1
        print(("differs: " if check else "writes: ") + expected.name)
        if not check:
            expected.write_text(text, encoding="utf-8")
    print(f"jinja2 {jinja2.__version__}: {changed} case(s) {'differ' if check else 'written'}")
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
