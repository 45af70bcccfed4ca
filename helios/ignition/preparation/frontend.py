"""Frontend declarations detected at preparation time (preparation side, host).

Owns turning a checkpoint's tokenizer and chat-template text into typed FrontendContract data: the
parser selectors (NONE unless the template shows the syntax: think tags select THINK reasoning,
`<tool_call>` with `<function=` tags selects TOOL_PARSER_QWEN_CODER), their syntax data, the prompt envelope (found by
rendering the template on a probe conversation), the template tokens and the EOS ids. Nothing here
runs at serving time; the runtime only reads the typed result.
"""

from __future__ import annotations

from collections.abc import Mapping

from helios.proto import contract_pb2

C = contract_pb2

# The plain template a core carries when the checkpoint has none: message contents, concatenated.
PLAIN_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_QWEN_CODER = dict(opener="<tool_call>", closer="</tool_call>", invoke_open="<function=", invoke_name_close=">",
                   invoke_close="</function>", parameter_open="<parameter=", parameter_name_close=">",
                   parameter_close="</parameter>", wrapping_newlines=True)
_PROBE = "\u2063probe\u2063"  # text no template produces by itself


def _render(template: str, messages: list[dict], add_generation_prompt: bool, bos: str, eos: str) -> str | None:
    from helios.frontend.template import ChatTemplate  # sandboxed jinja2

    try:
        return ChatTemplate(template).render(messages=messages, tools=None, add_generation_prompt=add_generation_prompt,
                                             bos_token=bos, eos_token=eos)
    except Exception:  # a template that cannot render the probe simply yields no envelope data
        return None


def prompt_syntax(template: str, *, bos: str, eos: str) -> C.PromptSyntax:
    """assistant_open: what the generation prompt appends; message_end: what follows a user message."""
    messages = [{"role": "user", "content": _PROBE}]
    closed = _render(template, messages, False, bos, eos)
    opened = _render(template, messages, True, bos, eos)
    syntax = C.PromptSyntax()
    if closed is None or opened is None:
        return syntax
    if opened.startswith(closed) and len(opened) > len(closed):
        syntax.assistant_open = opened[len(closed):]
    at = closed.find(_PROBE)
    if at >= 0:
        end = closed[at + len(_PROBE):].strip()
        # Only a single-marker ending counts (e.g. "<|im_end|>"); a template that closes user turns
        # with something richer declares no message end.
        if end and len(end.split()) == 1:
            syntax.message_end = end
    return syntax


def frontend_contract(*, chat_template: str, vocabulary: Mapping[str, int], special_tokens: Mapping[str, int],
                      eos_token_ids: tuple[int, ...], bos_text: str, eos_text: str) -> C.FrontendContract:
    """The typed frontend settings of a text core, detected from template text and tokenizer data."""
    frontend = C.FrontendContract(
        image_preparation=C.IMAGE_PREPARATION_NONE,
        image_layout=C.IMAGE_LAYOUT_NONE,
        eos_token_ids=list(eos_token_ids),
    )
    if _THINK_OPEN in chat_template and _THINK_CLOSE in chat_template:
        frontend.reasoning_parser = C.REASONING_PARSER_THINK
        frontend.reasoning_syntax.CopyFrom(C.ReasoningSyntax(open=_THINK_OPEN, close=_THINK_CLOSE,
                                                             wrapping_newlines=True))
    else:
        frontend.reasoning_parser = C.REASONING_PARSER_NONE
    if _QWEN_CODER["opener"] in chat_template and _QWEN_CODER["invoke_open"] in chat_template:
        frontend.tool_parser = C.TOOL_PARSER_QWEN_CODER
        frontend.tool_syntax.CopyFrom(C.ToolSyntax(**_QWEN_CODER))
    else:
        frontend.tool_parser = C.TOOL_PARSER_NONE
    frontend.prompt_syntax.CopyFrom(prompt_syntax(chat_template, bos=bos_text, eos=eos_text))
    for text, token_id in sorted(special_tokens.items(), key=lambda item: item[1]):
        if text in chat_template and vocabulary.get(text) == token_id:
            frontend.template_tokens.append(C.TemplateToken(text=text, id=token_id))
    return frontend
