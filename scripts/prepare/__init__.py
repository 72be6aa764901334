"""scripts/sft_prepare_hf.py's parts: errors, vocab (tokenizer), sources (JSONL, Parquet, Arrow),
records (dataset formats and column mapping), tokenize, rows (streamed HDF5), parallel, progress."""
