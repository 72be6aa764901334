#!/usr/bin/env python3
"""sft_prepare with a Hugging Face tokenizer: JSONL, Parquet, Arrow and datasets.save_to_disk
directories in TRL's dataset formats → the SPEC §4 HDF5 data file, with the same layout, flags, row
rules, atomic write and `error:` lines (exit 2, nothing written) as the C++ sft_prepare (byte
tokenizer). Tokens come from the `tokenizers` library through transformers; chat turns are rendered
with the tokenizer's chat_template exactly as apply_chat_template renders them (ChatML when it has
none), loss only on assistant turns. Streamed: rows are read, tokenized (in --workers processes) and
written a batch at a time, so memory is bounded by a batch, not the input; the output is the same
for any number of workers. The parts live in scripts/prepare/.

    python scripts/sft_prepare_hf.py --tokenizer DIR --input X.parquet --output Y.h5 --max-length T

--preset (scripts/chat_presets.py) checks the tokenizer against a Llama-family model preset and
supplies that model's chat template and special-token roles where the tokenizer has none.
Needs transformers, tokenizers, jinja2, pyarrow, h5py, numpy and no torch: the pinned ones of
scripts/setup_pyref.sh (.pyref) or the newest of scripts/setup_pynew.sh (.pynew); only their public
APIs are used (chat templates render in jinja2's sandbox, scripts/prepare/template.py).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # scripts/prepare/

from prepare import parallel, rows, sources  # noqa: E402
from prepare.errors import UserError  # noqa: E402
from prepare.progress import Progress  # noqa: E402
from prepare.records import DEFAULT_FIELDS, FORMATS  # noqa: E402
from prepare import tokenize  # noqa: E402
from prepare.vocab import CHATML, Vocab, load_tokenizer, preset_named, tokenizer_hash  # noqa: E402,F401

USAGE = """\
usage: sft_prepare_hf.py --tokenizer TOK --input X --output Y.h5 --max-length T
                         [--input X2 ...] [--format auto|prompt_completion|chat|text]
                         [--messages-field F] [--prompt-field F] [--completion-field F]
                         [--text-field F] [--roles NAME=ROLE,...] [--overflow truncate|drop]
                         [--pack] [--preset NAME] [--split NAME] [--config NAME]
                         [--workers N] [--batch-rows N] [--progress-every SECONDS]
  TOK is a directory saved by transformers (tokenizer.json + tokenizer_config.json with the
  chat_template and special tokens), a bare tokenizer.json, or a directory with GPT-2's BPE files
  (vocab.json + merges.txt, or OpenAI's encoder.json + vocab.bpe).
  X is a JSONL file, a Parquet file, an Arrow IPC file (.arrow), a datasets.save_to_disk directory
  (its data-0000N-of-M.arrow files in state.json's order; of a DatasetDict, the --split), a dataset
  repository downloaded from the Hub (the --split's files: by its README.md's configs: data_files,
  else data/<split>-NNNNN-of-NNNNN.*, else split names in folder or file names, else all files are
  train) or a quoted glob of files ('train-*.parquet', sorted); --input may be repeated (the rows
  follow in that order).
  Each row (a JSONL line's object or a Parquet/Arrow row; other columns are ignored) is, as TRL's
  dataset formats: {"prompt": P, "completion": C}; {"messages": [{"role": R, "content": X}, ...]};
  {"text": X}; or conversational {"prompt": [messages], "completion": [messages]}. A message is
  {"role", "content"} or ShareGPT's {"from", "value"} (human, gpt, system, tool → user, assistant,
  system, tool), and ShareGPT's {"conversations": [...]} is read as messages.
  prompt/completion: tokens encode(P) encode(C) EOS, where encode(P) adds what the tokenizer adds to
    a text (Llama-3: its BOS; GPT-2: nothing); loss on C and EOS.
  chat: the tokens of apply_chat_template(messages) (ChatML <|im_start|>R\\nX<|im_end|>\\n when the
    tokenizer has no chat_template); loss on each assistant turn: what the template emits after the
    assistant header up to the next turn (the content and its end-of-turn tokens).
  text: encode(X) EOS, loss on every token (TRL's dataset_text_field).
  conversational prompt/completion: as chat over prompt + completion, loss on the completion's
    assistant turns only.
  --max-length T      row length; must equal max_target_length in the config (alias --max-target-length)
  --format F          auto (each row by its fields, default), prompt_completion, chat or text
  --messages-field F  the column holding the messages (default messages, else conversations);
                      likewise --prompt-field F, --completion-field F, --text-field F
  --roles A=R,...     role names: A becomes R (system, user, assistant or tool), e.g.
                      --roles bot=assistant,observation=tool
  --split NAME        of a DatasetDict or Hub dataset directory: the split (default train;
                      an error when no --input is a directory)
  --config NAME       of a Hub dataset directory whose README.md lists several configs
  --workers N         tokenizing processes (default 1); the output is the same for every N
  --batch-rows N      rows per batch (default 1024): memory is bounded by a few batches per worker
  --progress-every S  seconds between progress lines on stderr (default: 0.5 on a terminal, else 10)
  --overflow truncate examples longer than T+1 tokens are cut to their first T+1 (default, as TRL:
                      the completion loses its end); one whose prompt alone leaves no completion
                      token in them is dropped
  --overflow drop     examples longer than T+1 tokens are left out
                      Dropped rows are listed (file and line/row) in Y.h5.dropped.jsonl.
  --pack              several examples per row (/segment_ids, /positions)
  --preset NAME       a model preset: smollm2-135m, smollm2-360m, qwen2.5-0.5b, qwen3-0.6b,
                      qwen3-1.7b, qwen3-4b, qwen3-8b, llama-3.2-1b. The tokenizer must have the model's special tokens (chat
                      markers, bos/eos/pad) as single ids and at most its vocab_size tokens; the
                      model's chat template is used when the tokenizer has none (its own wins), and
                      its bos/eos/pad fill the roles the tokenizer leaves unnamed.
  The file's vocab_size is the tokenizer's, added tokens included (GPT-2: 50257); rows are padded
  with its pad token (else EOS) at loss weight 0. Root attributes tokenizer "hf" and tokenizer_hash
  (FNV-1a 64 of tokenizer.json, else vocab.json + merges.txt, else encoder.json + vocab.bpe) let
  sft_train check that the model directory has the same tokenizer (docs/SPEC.md §4).
Exit: 0 ok, 2 bad usage or input (one `error:` line, no output file written), 1 other failure.
"""

VALUE_FLAGS = ("--tokenizer", "--input", "--output", "--max-length", "--max-target-length", "--format",
               "--overflow", "--preset", "--messages-field", "--prompt-field", "--completion-field",
               "--text-field", "--workers", "--batch-rows", "--progress-every", "--split", "--config",
               "--roles")
ROLE_NAMES = ("system", "user", "assistant", "tool")


def parse_roles(value):
    """--roles from=to,... → {from: to}; to is system, user, assistant or tool."""
    roles = {}
    for item in value.split(","):
        name, eq, role = (x.strip() for x in item.partition("="))
        if not eq or not name or role not in ROLE_NAMES:
            raise UserError(f'--roles: expected NAME=ROLE[,NAME=ROLE...] with ROLE one of '
                            f'{", ".join(ROLE_NAMES)}, got "{item.strip()}"')
        roles[name] = role
    return roles


def positive(arg, value, most):
    if not value.isdigit() or not 1 <= int(value) <= most:
        raise UserError(f'{arg}: expected a positive integer, got "{value}"')
    return int(value)


def parse_args(argv):
    opts = {"tokenizer": None, "inputs": [], "output": None, "T": None, "format": "auto",
            "overflow": "truncate", "pack": False, "preset": None, "fields": dict(DEFAULT_FIELDS),
            "workers": 1, "batch_rows": 1024, "progress_every": None, "split": None, "config": None,
            "roles": None}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--help", "-h"):
            sys.stdout.write(USAGE)
            sys.exit(0)
        if arg == "--pack":
            opts["pack"] = True
            i += 1
            continue
        if arg not in VALUE_FLAGS:
            raise UserError(f'unknown argument "{arg}" (see sft_prepare_hf.py --help)')
        if i + 1 >= len(argv):
            raise UserError(f"{arg}: needs a value")
        value = argv[i + 1]
        i += 2
        if arg in ("--max-length", "--max-target-length"):
            opts["T"] = positive(arg, value, 1 << 24)
        elif arg == "--format":
            if value not in FORMATS:
                raise UserError(f'--format: expected auto, prompt_completion, chat or text, got "{value}"')
            opts["format"] = value
        elif arg == "--overflow":
            if value not in ("drop", "truncate"):
                raise UserError(f'--overflow: expected drop or truncate, got "{value}"')
            opts["overflow"] = value
        elif arg.endswith("-field"):
            if not value:
                raise UserError(f"{arg}: needs a column name")
            opts["fields"][arg[2:-len("-field")]] = value
            if arg == "--messages-field":  # the named column only (no ShareGPT "conversations" fallback)
                opts["fields"]["sharegpt"] = value
        elif arg in ("--split", "--config"):
            if not value:
                raise UserError(f"{arg}: needs a name")
            opts[arg[2:]] = value
        elif arg == "--roles":
            opts["roles"] = {**(opts["roles"] or {}), **parse_roles(value)}
        elif arg == "--workers":
            opts["workers"] = positive(arg, value, 256)
        elif arg == "--batch-rows":
            opts["batch_rows"] = positive(arg, value, 1 << 20)
        elif arg == "--progress-every":
            try:
                opts["progress_every"] = float(value)
            except ValueError:
                opts["progress_every"] = -1
            if not opts["progress_every"] >= 0:
                raise UserError(f'--progress-every: expected seconds >= 0, got "{value}"')
        elif arg == "--input":
            opts["inputs"].append(value)
        else:
            if arg == "--preset":
                preset_named(value)
            opts[arg[2:]] = value
    if not (opts["tokenizer"] and opts["inputs"] and opts["output"] and opts["T"]):
        raise UserError("--tokenizer, --input, --output and --max-length are required")
    for given in opts["inputs"]:
        same = given == opts["output"]
        try:
            same = same or os.path.samefile(given, opts["output"])
        except OSError:
            pass
        if same:
            raise UserError("--output: is the same file as --input")
    opts["input"] = opts["inputs"][0]  # for messages naming "the input"
    return opts


def prepare(opts, vocab=None, sink=None, progress=None, report=None):
    """Reads, tokenizes and writes rows into sink (prepare.rows.H5Sink or MemorySink) a batch at a
    time, dropped rows into report (prepare.rows.DropReport) when given. Returns (rows, stats,
    straddling, vocab). The tokenizer is loaded from opts["tokenizer"] unless a Vocab is given
    (bench/bench_tokenizer.py)."""
    T = opts["T"]
    inputs = opts.get("inputs") or [opts["input"]]
    vocab = vocab or Vocab(load_tokenizer(opts["tokenizer"]), opts.get("preset"))
    fields = opts.get("fields", DEFAULT_FIELDS)
    found = sources.expand(inputs, opts.get("split"), opts.get("config"))
    sink = sink if sink is not None else rows.MemorySink()
    builder = rows.RowBuilder(T, opts["pack"], opts.get("overflow", "truncate") == "truncate", vocab.pad_id,
                              sink, report=report)
    tokenize.WORK.update(vocab=vocab, format=opts.get("format", "auto"), fields=fields,
                         roles=opts.get("roles"))
    straddling, tokens = 0, 0
    batches = sources.batches(found, set(fields.values()), opts.get("batch_rows", 1024))
    for batch, (ids, weights, offsets, merged) in parallel.ordered_map(tokenize.work, batches,
                                                                        opts.get("workers", 1)):
        builder.add_batch(ids, weights, offsets, batch.place)
        straddling += merged
        tokens += len(ids)
        if progress:
            progress.update(builder.stats["examples"], batch.progress)
    n = builder.finish()
    stats = builder.stats
    stats["tokens"] = tokens
    where = ", ".join(inputs)
    if stats["examples"] == 0:
        raise UserError(f"{where}: no examples (the file is empty)")
    if n == 0 and opts.get("overflow", "truncate") == "truncate":
        raise UserError(f"{where}: no rows left: in all {stats['dropped']} examples the prompt alone "
                        f"takes max-length+1 = {T + 1} tokens; use a larger --max-length")
    if n == 0:
        raise UserError(f"{where}: no rows left: all {stats['dropped']} examples are longer "
                        f"than max-length+1 = {T + 1} tokens; use --overflow truncate or a larger "
                        "--max-length")
    return n, stats, straddling, vocab


def main(argv):
    sink = None
    try:
        opts = parse_args(argv)
        if opts["workers"] > 1:  # one tokenizer thread per worker process
            os.environ["TOKENIZERS_PARALLELISM"] = "false"
        vocab = Vocab(load_tokenizer(opts["tokenizer"]), opts["preset"]).check_renderer()
        identity = ("hf", tokenizer_hash(opts["tokenizer"]))
        notes = []  # which files of a directory were taken
        sources.expand(opts["inputs"], opts["split"], opts["config"], notes)  # before the output exists
        sink = rows.H5Sink(opts["output"], opts["T"], opts["pack"])
        report = rows.DropReport(opts["output"])
        progress = Progress(opts["progress_every"])
        n, stats, straddling, vocab = prepare(opts, vocab, sink, progress, report)
        sink.finish(vocab.size, identity)
        report.finish()
        progress.done(stats["examples"], stats["tokens"])
    except UserError as e:
        if sink is not None:
            report.abort()
            sink.abort()
        sys.stderr.write(f"error: {e}\n")
        return 2
    except BaseException:
        if sink is not None:
            report.abort()
            sink.abort()
        raise
    T = opts["T"]
    print(f"sft_prepare_hf: {', '.join(opts['inputs'])} -> {opts['output']}: {stats['examples']} examples, "
          f"{n} rows of T={T}{' (packed)' if opts['pack'] else ''}")
    for note in notes:
        print(f"  input {note}")
    if opts["overflow"] == "truncate":
        print(f"  truncated: {stats['truncated']} (cut to {T + 1} tokens, the prompt kept), dropped: "
              f"{stats['dropped']} (the prompt alone fills {T + 1} tokens), completion tokens: "
              f"{stats['completion_tokens']}")
    else:
        print(f"  dropped (longer than {T + 1} tokens): {stats['dropped']}, completion tokens: "
              f"{stats['completion_tokens']}")
    if stats["dropped"]:
        print(f"  dropped rows (file and row of each): {report.path}")
    print(f"  {vocab.describe(opts['tokenizer'])}, tokenizer_hash {identity[1]}")
    if straddling:
        print(f"  turn-edge tokens merged across a turn boundary, left out of the loss: {straddling}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
