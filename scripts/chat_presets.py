"""The Llama-family model presets' tokenizer facts for scripts/sft_prepare_hf.py --preset: the
special tokens (bos/eos/pad and the chat markers each template emits), the vocabulary size
(src/config/presets.cpp's vocab_size, the rows of the embedding) and a chat template that renders
plain {"role", "content"} system/user/assistant messages as the model's own template does.

Provenance, said plainly: this machine is offline, so none of this was checked against the real
tokenizer_config.json files. The vocabulary sizes are the models' config.json values (also in
presets.cpp). The special tokens and templates are written from memory of the Hub files
(HuggingFaceTB/SmolLM2-*-Instruct, Qwen/Qwen2.5-0.5B-Instruct, Qwen/Qwen3-0.6B,
meta-llama/Llama-3.2-1B-Instruct, as of 2024-2025); the ids in the comments too. The templates keep
only the plain-message branches (no tools, no documents, no images). A tokenizer directory's own
chat_template always wins over these; they are the fallback for tokenizers saved without one.
"""
from collections import namedtuple

# required: tokens that must each be one id in the tokenizer (the template emits them, or they are
# the bos/eos/pad). bos/eos/pad fill only the roles the tokenizer itself leaves unnamed.
Preset = namedtuple("Preset", "vocab_size bos eos pad required template source")

# SmolLM2-Instruct (from memory): ids 0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|>, then
# <repo_name>, <file_sep>, ... <empty_output> (16); tokenizer_config: bos <|im_start|>, eos
# <|im_end|>, pad <|im_end|>, unk <|endoftext|> (the base models: bos = eos = <|endoftext|>).
# No BOS added on encode. ChatML with a default system turn when the first message is not one.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Qwen2.5-Instruct (from memory): 151643 <|endoftext|>, 151644 <|im_start|>, 151645 <|im_end|>,
# ... 151664 <|file_sep|> (len 151665 < 151936); tokenizer_config: bos null, eos <|im_end|>
# (the base models: <|endoftext|>), pad <|endoftext|>. ChatML; without a system message first,
# the default one below. Other roles than system/user/assistant (and tool) render nothing.
QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

# Qwen3 (from memory): Qwen2.5's ids plus 151665 <tool_response>, 151666 </tool_response>,
# 151667 <think>, 151668 </think> (len 151669); eos <|im_end|>, pad <|endoftext|>, bos null. No
# default system turn. An assistant turn after the last user message gets a think block
# "<think>\n{reasoning}\n</think>\n\n" when it is the last message or has reasoning (an empty one
# for a plain last reply); earlier replies keep only the text after "</think>". Because the last
# reply renders differently from the same reply followed by more turns, sft_prepare_hf.py locates
# such turns by their content (see turn_spans there).
QWEN3_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}"
    "{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step_tool and message.role == 'user' and not(message.content.startswith("
    "'<tool_response>') and message.content.endswith('</tool_response>')) %}"
    "{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{%- set content = message.content %}{%- set reasoning_content = '' %}"
    "{%- if '</think>' in content %}"
    "{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1]"
    ".lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}"
    "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + "
    "'\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content }}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}")

# Llama-3.2-Instruct (from memory): 128000 <|begin_of_text|>, 128001 <|end_of_text|>, 128004
# <|finetune_right_pad_id|>, 128006 <|start_header_id|>, 128007 <|end_header_id|>, 128008
# <|eom_id|>, 128009 <|eot_id|> (len 128256); tokenizer_config: bos <|begin_of_text|>, eos
# <|eot_id|> (the base model: <|end_of_text|>), no pad; its post-processor adds BOS on encode
# (the template emits bos_token itself; chat text is encoded without added tokens). The system
# header always comes first, with "Today Date:" from date_string, else strftime_now (transformers
# >= 4.45 defines it: today's date), else "26 Jul 2024"; contents are trimmed.
LLAMA32_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if not date_string is defined %}"
    "{%- if strftime_now is defined %}{%- set date_string = strftime_now('%d %b %Y') %}"
    "{%- else %}{%- set date_string = '26 Jul 2024' %}{%- endif %}"
    "{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content']|trim %}{%- set messages = messages[1:] %}"
    "{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Cutting Knowledge Date: December 2023\\n' }}"
    "{{- 'Today Date: ' + date_string + '\\n\\n' }}"
    "{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")

CHATML_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_SMOLLM2 = Preset(49152, "<|im_start|>", "<|im_end|>", "<|im_end|>", CHATML_TOKENS,
                  SMOLLM2_TEMPLATE, "SmolLM2-Instruct")
_QWEN3 = Preset(151936, None, "<|im_end|>", "<|endoftext|>", CHATML_TOKENS + ("<think>", "</think>"),
                QWEN3_TEMPLATE, "Qwen3")
PRESETS = {
    "smollm2-135m": _SMOLLM2,
    "smollm2-360m": _SMOLLM2,
    "qwen2.5-0.5b": Preset(151936, None, "<|im_end|>", "<|endoftext|>", CHATML_TOKENS,
                           QWEN25_TEMPLATE, "Qwen2.5-Instruct"),
    "qwen3-0.6b": _QWEN3,
    "qwen3-1.7b": _QWEN3,  # the Qwen3 dense models share one tokenizer and chat template
    "qwen3-4b": _QWEN3,
    "qwen3-8b": _QWEN3,
    "llama-3.2-1b": Preset(128256, "<|begin_of_text|>", "<|eot_id|>", None,
                           ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                            "<|end_header_id|>", "<|eot_id|>"), LLAMA32_TEMPLATE,
                           "Llama-3.2-Instruct"),
}
# Presets whose data come from the C++ sft_prepare (byte tokenizer, vocab 264), not from here.
BYTE_TOKENIZER_PRESETS = ("gpt2-tiny", "llama-tiny")
