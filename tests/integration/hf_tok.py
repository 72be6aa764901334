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
