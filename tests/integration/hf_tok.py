"""Tokenizers for the Python data tools' tests, built with public APIs that mean the same on
transformers 4.44 / tokenizers 0.19 (.pyref) and on the newest releases (.pynew, issue 35): GPT-2's
byte-level BPE from OpenAI's files (the tokenizers library's own ByteLevelBPETokenizer) wrapped in
transformers' PreTrainedTokenizerFast, and apply_chat_template's ids as a plain list."""
import os

END = "<|endoftext|>"


def gpt2_fast(transformers, gpt2_dir, **kwargs):
    """GPT-2 (50257 ids, <|endoftext|> its bos/eos/unk) as a transformers fast tokenizer."""
    import tokenizers
    bpe = tokenizers.ByteLevelBPETokenizer.from_file(os.path.join(gpt2_dir, "encoder.json"),
                                                     os.path.join(gpt2_dir, "vocab.bpe"))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer.from_str(bpe.to_str()),
                                                bos_token=END, eos_token=END, unk_token=END, **kwargs)


def chat_ids(tok, messages, **kwargs):
    """apply_chat_template(tokenize=True) as a list of ids (transformers 5 returns a BatchEncoding
    unless return_dict=False; 4.44 has the same argument, default False)."""
    return list(tok.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs))


# A Qwen3-style tokenizer directory written by the installed transformers/tokenizers: argv = out dir,
# scripts/ (for chat_presets.QWEN3_TEMPLATE), the conversations as JSON; prints apply_chat_template's ids,
# the versions and len(tokenizer) as one JSON line.
QWEN3_WRITER = """
import json, sys
sys.path.insert(0, sys.argv[2])
from chat_presets import QWEN3_TEMPLATE
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=False)
corpus = ["What is two plus two? It is four.", "Think step by step, then answer.", "Hello there, how are you?"]
tok.train_from_iterator(corpus * 50, trainers.BpeTrainer(vocab_size=400, show_progress=False,
                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
tok.add_tokens(["<think>", "</think>", "<tool_call>", "</tool_call>"])
fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
fast.chat_template = QWEN3_TEMPLATE
fast.save_pretrained(sys.argv[1])
with open(sys.argv[1] + "/tokenizer_config.json") as f:
    config = json.load(f)
config["tokenizer_class"] = "Qwen2Tokenizer"  # as Qwen3's own
with open(sys.argv[1] + "/tokenizer_config.json", "w") as f:
    json.dump(config, f)
tok = transformers.AutoTokenizer.from_pretrained(sys.argv[1])
convs = json.loads(sys.argv[3])
ids = [list(tok.apply_chat_template(c, tokenize=True, return_dict=False)) for c in convs]
print(json.dumps({"ids": ids, "transformers": transformers.__version__,
                  "tokenizers": __import__("tokenizers").__version__, "vocab": len(tok)}))
"""

QWEN3_CHATS = [
    [{"role": "user", "content": "What is two plus two?"}, {"role": "assistant", "content": "It is four."}],
    [{"role": "system", "content": "Think step by step."}, {"role": "user", "content": "Hello there"},
     {"role": "assistant", "content": "Hello, how are you?"},
     {"role": "user", "content": "What is two plus two?"},
     {"role": "assistant", "content": "<think>\nTwo and two.\n</think>\n\nIt is four."}],
]
