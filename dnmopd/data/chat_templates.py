"""Our Jinja chat templates for Qwen3.5 and Qwen3 text conversations (qwen35.md 6.3).

They reproduce the official templates for system / user / assistant turns without tools or images:
assistant turns after the last user message carry a think block (empty when there is no reasoning; Qwen3
only on the last turn or a turn with reasoning), and the generation prompt is ``<|im_start|>assistant\\n``
followed, with ``enable_thinking=False``, by the empty think block ``<think>\\n\\n</think>\\n\\n``.
Qwen3.5 trims message content and opens ``<think>\\n`` when thinking is on; Qwen3 keeps content as is and
opens nothing. Anything else (tools, other roles, non-string content) is refused with an error instead of
being rendered differently from the real template.
"""

_TEMPLATE = """\
{%- if messages | length == 0 %}{{ raise_exception('at least one message is required') }}{%- endif %}
{%- set ns = namespace(last_query=-1) %}
{%- for message in messages %}
    {%- if message.role not in ['system', 'user', 'assistant'] %}
        {{- raise_exception('unsupported role ' ~ message.role ~ ' (system, user, assistant only)') }}
    {%- endif %}
    {%- if message.content is not string %}
        {{- raise_exception('message content must be a string') }}
    {%- endif %}
    {%- if message.role == 'system' and not loop.first %}
        {{- raise_exception('a system message is only allowed first') }}
    {%- endif %}
    {%- if message.role == 'user' %}{%- set ns.last_query = loop.index0 %}{%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content CONTENT_FILTER %}
    {%- if message.role != 'assistant' %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- else %}
        {%- set reasoning = message.reasoning_content if message.reasoning_content is string else '' %}
        {%- if '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].split('<think>')[-1] %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_queryTHINK_BLOCK_CONDITION %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
THINKING_PROMPT    {%- endif %}
{%- endif %}
"""
"""Both flavors' template; the three places where they differ are filled in by ``_flavor``."""


def _flavor(*, content_filter: str, think_block_condition: str, thinking_prompt: str) -> str:
    return (_TEMPLATE.replace("CONTENT_FILTER", content_filter)
            .replace("THINK_BLOCK_CONDITION", think_block_condition)
            .replace("THINKING_PROMPT", thinking_prompt))


CHAT_TEMPLATES = {
    # trimmed content; every assistant turn after the last user message gets a think block; the thinking
    # generation prompt opens <think>
    "qwen3.5": _flavor(content_filter="| trim", think_block_condition="",
                       thinking_prompt="    {%- else %}\n        {{- '<think>\\n' }}\n"),
    # content as is; only the last turn, or one with reasoning, gets a think block; the thinking generation
    # prompt opens nothing
    "qwen3": _flavor(content_filter="", think_block_condition=" and (loop.last or reasoning.strip('\\n'))",
                     thinking_prompt=""),
}

EMPTY_THINK_BLOCK = "<think>\n\n</think>\n\n"
"""What a non-thinking generation prompt ends with (both flavors)."""
