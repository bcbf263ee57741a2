#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""
Renders real chat templates with Jinja2 (configured as Hugging Face transformers does:
sandboxed, trim_blocks, lstrip_blocks, loopcontrols, raise_exception) and writes one case per
(template, conversation, add_generation_prompt) into OUTDIR, for test-chat's
jinja_cross_check to compare with chat_render().

Case file NNN.case (all lengths in bytes of UTF-8):
    template <name>
    family <family>
    add_assistant <0|1>
    expect <ok|error>
    messages <count>
    <role> <len>\n<content bytes>\n      (count times)
    expected <len>\n<expected bytes>\n  (only when expect ok)

Usage: chat_jinja_reference.py SHARED_TEMPLATE_DIR OUTDIR

Where our C renderer legitimately differs from a template it is compared with, the case is
either skipped or the Jinja text normalised in a documented way (see EXCEPTIONS below and the
comment at the top of daemon/engine/chat.c).
"""
import os
import sys

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Templates that the shared reference folder lacks, embedded verbatim as the models ship them.
EMBEDDED = {
    # meta-llama/Llama-2-7b-chat-hf (tokenizer_config.json)
    "embedded-Llama-2-chat": (
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
        "{% set system_message = messages[0]['content'] %}{% else %}"
        "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
        "{% for message in loop_messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate "
        "user/assistant/user/assistant/...') }}"
        "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
        "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + "
        "message['content'] %}"
        "{% else %}{% set content = message['content'] %}{% endif %}"
        "{% if message['role'] == 'user' %}"
        "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
        "{% endif %}{% endfor %}"
    ),
    # meta-llama/Meta-Llama-3-8B-Instruct (tokenizer_config.json)
    "embedded-Llama-3-8B-Instruct": (
        "{% set loop_messages = messages %}{% for message in loop_messages %}"
        "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
        "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
        "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
        "{% endif %}"
    ),
    # teknium/OpenHermes-2.5-Mistral-7B: plain ChatML
    "embedded-OpenHermes-2.5": (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\\n' }}{% endif %}"
    ),
}

# name -> (family, bos_token, eos_token). Templates not listed here are not rendered.
TEMPLATES = {
    "embedded-Llama-2-chat": ("llama2", "<s>", "</s>"),
    "embedded-Llama-3-8B-Instruct": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "embedded-OpenHermes-2.5": ("chatml", "<s>", "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("chatml", "", "<|im_end|>"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("mistral", "<s>", "</s>"),
    "microsoft-Phi-3.5-mini-instruct.jinja": ("phi3", "<s>", "<|endoftext|>"),
    "google-gemma-2-2b-it.jinja": ("gemma", "<bos>", "<eos>"),
    # HuggingFaceTB-SmolLM3-3B.jinja: EXCEPTION, never rendered here. It always writes its own
    # "## Metadata ... Reasoning Mode" system block and rewrites the system prompt; our chatml
    # renderer writes the conversation as given (as llama.cpp's chatml does). test-chat only
    # checks that it is detected as chatml.
}

S, U, A = "system", "user", "assistant"
CONVERSATIONS = [
    [(S, "You are a helpful assistant."), (U, "Hello"), (A, "Hi there! How can I help?"),
     (U, "Who are you?")],
    [(U, "Hello")],
    [(U, "What is 2+2?"), (A, "4"), (U, "And 3+3?"), (A, "6")],
    [(S, "Be brief."), (U, "Hi"), (A, "Hello.")],
    # whitespace that some templates trim (Python's str.strip: Unicode whitespace too)
    [(S, "  Be nice.\n"), (U, "\n\tSpaces around  \n"), (A, "  padded answer \u00a0"),
     (U, "\u3000ideographic space\u2028")],
    [(U, "multi\nline\n\nwith {{ braces }} and {% tags %}"), (A, "ok\n")],
    [(S, ""), (U, "empty system prompt")],
    [(S, "sys only")],
    # roles that do not alternate: the [INST] and Gemma templates refuse them
    [(U, "one"), (U, "two")],
    [(A, "I start"), (U, "then you")],
    [(U, "q"), (A, "a"), (S, "late system"), (U, "q2")],
    [(S, "Sys"), (U, "Caf\u00e9 \U0001F600 \u043f\u0440\u0438\u0432\u0435\u0442")],
]


def has_system(conv):
    return any(role == S for role, _ in conv)


def skip_reason(name, family, conv):
    """EXCEPTIONS: cases where our renderer does not claim equality with this template."""
    if name == "Qwen-Qwen2.5-7B-Instruct.jinja" and (not conv or conv[0][0] != S):
        return "Qwen injects its own default system prompt; chatml does not"
    if family == "gemma" and has_system(conv):
        return "Gemma's template refuses a system role; we fold it into the first user turn"
    if family == "llama2" and any(r == S for r, _ in conv[1:]):
        return "Llama 2's template silently drops a later system message; we refuse it"
    return None


LLAMA31_DATES = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
LLAMA31_EMPTY_SYSTEM = "<|start_header_id|>system<|end_header_id|>\n\n<|eot_id|>"


def normalise(name, conv, text):
    """Documented differences turned back into equality (see chat.c)."""
    if name in ("meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja"):
        # Llama 3.1/3.2 always open with a system block holding date lines; we write neither
        # the dates nor an empty system block (as llama.cpp's llama3 rendering).
        assert LLAMA31_DATES in text, "date lines moved"
        text = text.replace(LLAMA31_DATES, "", 1)
        if not conv or conv[0][0] != S:
            assert text.startswith(LLAMA31_EMPTY_SYSTEM), "system block moved"
            text = text[len(LLAMA31_EMPTY_SYSTEM):]
    return text


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])

    def raise_exception(message):
        raise TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    return env


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    tdir, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    env = make_env()
    n = 0
    n_skipped = 0
    for name, (family, bos, eos) in TEMPLATES.items():
        if name in EMBEDDED:
            src = EMBEDDED[name]
        else:
            with open(os.path.join(tdir, name), encoding="utf-8") as f:
                src = f.read()
        tmpl = env.from_string(src)
        for conv in CONVERSATIONS:
            for add in (False, True):
                if skip_reason(name, family, conv):
                    n_skipped += 1
                    continue
                msgs = [{"role": r, "content": c} for r, c in conv]
                try:
                    text = tmpl.render(messages=msgs, add_generation_prompt=add,
                                       bos_token=bos, eos_token=eos)
                    expect = "ok"
                except TemplateError:
                    expect = "error"
                out = bytearray()
                out += f"template {name}\nfamily {family}\nadd_assistant {int(add)}\n".encode()
                out += f"expect {expect}\nmessages {len(conv)}\n".encode()
                for role, content in conv:
                    b = content.encode("utf-8")
                    out += f"{role} {len(b)}\n".encode() + b + b"\n"
                if expect == "ok":
                    # The tokenizer adds the leading BOS; chat_render never writes it.
                    if bos and text.startswith(bos):
                        text = text[len(bos):]
                    text = normalise(name, conv, text)
                    b = text.encode("utf-8")
                    out += f"expected {len(b)}\n".encode() + b + b"\n"
                with open(os.path.join(outdir, f"{n:03d}.case"), "wb") as f:
                    f.write(out)
                n += 1
    print(f"wrote {n} cases ({n_skipped} skipped as documented exceptions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
