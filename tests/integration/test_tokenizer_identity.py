"""Tokenizer identity at training start (SPEC §4 root attributes tokenizer / tokenizer_hash): a data
file says which tokenizer made it, and sft_train refuses (exit 2, one `error:` line naming both sides)
byte-tokenised data for a model whose vocab_size is not the byte tokenizer's 264, and data whose
tokenizer_hash is none of the hashes of the tokenizer files in the Hugging Face model directory it
trains. Files without the attributes train as before, with a warning. A missing
load_parameters_path is reported as such before anything about the data (issue 26, finding 2)."""
import json
import os
import subprocess

import h5py
import pytest

from harness import BUILD, TINY_MODEL, make_data, run_train, write_config

SFT_PREPARE = os.path.join(BUILD, "sft_prepare")
T = 16


def fnv1a64(*blobs):
    """SPEC §4: FNV-1a 64 over the bytes of the files in order, 16 lowercase hex digits."""
    h = 0xcbf29ce484222325
    for blob in blobs:
        for b in blob:
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def with_identity(path, name, digest):
    with h5py.File(path, "a") as f:
        f.attrs["tokenizer"] = name
        f.attrs["tokenizer_hash"] = digest
    return path


def train(d, name, data, **keys):
    base = dict(train_files=data, max_target_length=T, global_batch_size=2, steps=1, hardware="cpu",
                base_output_directory=f"{d}/out_{name}", run_name="r")
    base.update(keys)
    return run_train(write_config(f"{d}/{name}.yml", **base), check=False)


@pytest.fixture(scope="module")
def d(workdir):
    return workdir


@pytest.fixture(scope="module")
def byte_data(d):
    with open(f"{d}/chat.jsonl", "w") as f:
        for i in range(4):
            f.write(json.dumps({"prompt": f"q{i}", "completion": f"a{i}"}) + "\n")
    p = subprocess.run([SFT_PREPARE, "--input", f"{d}/chat.jsonl", "--output", f"{d}/byte.h5",
                        "--max-length", str(T)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return f"{d}/byte.h5"


@pytest.fixture(scope="module")
def hf_dir(d):
    """A tiny random GPT-2 saved by transformers (vocab 64), with tokenizer files beside it."""
    transformers = pytest.importorskip("transformers")
    import torch
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=T)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(f"{d}/hf", safe_serialization=True)
    files = {"tokenizer.json": b'{"model": {"type": "BPE"}, "tiny": 1}\n',
             "vocab.json": b'{"a": 0, "b": 1}\n', "merges.txt": b"#version: 0.2\na b\n"}
    for name, blob in files.items():
        with open(f"{d}/hf/{name}", "wb") as f:
            f.write(blob)
    return f"{d}/hf", files


def test_sft_prepare_records_the_byte_tokenizer(byte_data):
    with h5py.File(byte_data) as f:
        assert f.attrs["tokenizer"] == "byte"
        assert f.attrs["tokenizer_hash"] == fnv1a64(b"sft-dp byte tokenizer v1")
        assert int(f.attrs["vocab_size"]) == 264


def test_byte_data_into_a_bpe_sized_model_is_exit_2_naming_both(d, byte_data):
    model = dict(TINY_MODEL, vocab_size=50259)
    p = train(d, "byte_bpe", byte_data, **model)
    assert p.returncode == 2, p.stdout + p.stderr
    err = p.stderr.strip()
    assert err.count("\n") == 0 and "error:" in err, err
    assert "byte.h5" in err and "byte tokenizer" in err and "50259" in err and "264" in err, err
    assert not os.path.exists(f"{d}/out_byte_bpe"), "nothing is written"


def test_byte_data_into_a_byte_model_trains(d, byte_data):
    p = train(d, "byte_ok", byte_data, **dict(TINY_MODEL, vocab_size=264))
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"tokenizer: {byte_data}: byte {fnv1a64(b'sft-dp byte tokenizer v1')}" in p.stdout


def test_data_from_another_tokenizer_than_the_model_directory_is_exit_2(d, hf_dir):
    model_dir, files = hf_dir
    data = with_identity(make_data(f"{d}/other.h5", 4, T=T, vocab=64), "hf", fnv1a64(b"another tokenizer"))
    p = train(d, "other", data, load_parameters_path=model_dir)
    assert p.returncode == 2, p.stdout + p.stderr
    err = p.stderr
    assert "other.h5" in err and fnv1a64(b"another tokenizer") in err, err
    assert model_dir in err and fnv1a64(files["tokenizer.json"]) in err, err
    assert not os.path.exists(f"{d}/out_other")


@pytest.mark.parametrize("hashed", [("tokenizer.json",), ("vocab.json", "merges.txt")])
def test_data_from_the_model_directory_tokenizer_trains(d, hf_dir, hashed):
    model_dir, files = hf_dir
    digest = fnv1a64(*(files[n] for n in hashed))
    name = "same_" + hashed[0].split(".")[0]
    data = with_identity(make_data(f"{d}/{name}.h5", 4, T=T, vocab=64), "hf", digest)
    p = train(d, name, data, load_parameters_path=model_dir)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{digest} = {model_dir}/{' + '.join(hashed)}" in p.stdout


def test_file_without_attributes_trains_with_a_warning(d):
    data = make_data(f"{d}/plain.h5", 4, T=T, vocab=64)
    p = train(d, "plain", data, **TINY_MODEL)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "warning:" in p.stdout and "plain.h5 does not say which tokenizer made it" in p.stdout


def test_half_an_identity_is_exit_2_naming_the_file(d):
    data = make_data(f"{d}/half.h5", 4, T=T, vocab=64)
    with h5py.File(data, "a") as f:
        f.attrs["tokenizer"] = "hf"
    p = train(d, "half", data, **TINY_MODEL)
    assert p.returncode == 2 and "half.h5" in p.stderr and "tokenizer_hash" in p.stderr, p.stderr


def test_missing_load_parameters_path_is_reported_before_the_data(d):
    data = make_data(f"{d}/big_vocab.h5", 4, T=T, vocab=50259)  # larger than the preset's vocab
    p = train(d, "missing", data, load_parameters_path="/no/such/dir")
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip().endswith("error: load_parameters_path: /no/such/dir: not found"), p.stderr
    assert "vocab_size" not in p.stderr
