"""The README's Hugging Face path, unchanged, without torch, on whatever transformers/tokenizers run
this file: under .pynew (integration_test_hf_path_qwen3_newest) the newest releases, under .pyref the
4.44/0.19 pins (issue 35). A Qwen3 directory is made as a user has one: its tokenizer written by the
installed libraries (a Qwen3-style byte-level BPE, Qwen3's chat template; tokenizers >= 0.20 write the
merges in the format 0.19 cannot read), its config.json and model.safetensors (head_dim 16 != C/NH,
written with numpy); the chat data is a dataset repository as the Hub ships it (data/train-… and
data/test-… Parquet shards). Then the README's commands: sft_prepare_hf.py --tokenizer DIR --input
REPO --split train|test, sft_train load_parameters_path=DIR, sft_export --tokenizer DIR, generate.py
--model EXPORT --chat. Checked: every step exits 0; the prepared rows are apply_chat_template's ids;
the export's tokenizer is the model's (AutoTokenizer loads it, same chat ids); generate.py prints
the decoded greedy reply of sft_generate on the same ids."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from harness import BUILD, SOURCE, read_metrics, run_train, write_config
from hf_tok import QWEN3_CHATS, QWEN3_WRITER, chat_ids

transformers = pytest.importorskip("transformers")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SCRIPTS = os.path.join(SOURCE, "scripts")
SFT_EXPORT = os.path.join(BUILD, "sft_export")
L, C, NH, KVH, HS, F, T = 2, 32, 4, 2, 16, 48, 96


def tool(script, *args):
    p = subprocess.run([sys.executable, os.path.join(SCRIPTS, script), *args], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, SFTDP_BUILD_DIR=BUILD))
    assert p.returncode == 0, f"{script} {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def write_qwen3_weights(d, vocab, eos):
    """config.json and model.safetensors under Qwen3ForCausalLM's names, random (fixed seed)."""
    rng = np.random.default_rng(3)

    def w(*shape, scale=0.15, one=False):
        return ((1.0 if one else 0.0) + scale * rng.standard_normal(shape)).astype(np.float32)
    sd = {"model.embed_tokens.weight": w(vocab, C), "model.norm.weight": w(C, scale=0.1, one=True),
          "lm_head.weight": w(vocab, C)}
    for layer in range(L):
        a = f"model.layers.{layer}."
        sd.update({a + "input_layernorm.weight": w(C, scale=0.1, one=True),
                   a + "post_attention_layernorm.weight": w(C, scale=0.1, one=True),
                   a + "self_attn.q_proj.weight": w(NH * HS, C), a + "self_attn.k_proj.weight": w(KVH * HS, C),
                   a + "self_attn.v_proj.weight": w(KVH * HS, C), a + "self_attn.o_proj.weight": w(C, NH * HS),
                   a + "self_attn.q_norm.weight": w(HS, scale=0.3, one=True),
                   a + "self_attn.k_norm.weight": w(HS, scale=0.3, one=True),
                   a + "mlp.gate_proj.weight": w(F, C), a + "mlp.up_proj.weight": w(F, C),
                   a + "mlp.down_proj.weight": w(C, F)})
    safetensors_numpy.save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    config = dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], hidden_size=C, num_hidden_layers=L,
                  num_attention_heads=NH, num_key_value_heads=KVH, head_dim=HS, intermediate_size=F,
                  vocab_size=vocab, max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
                  tie_word_embeddings=False, attention_bias=False, hidden_act="silu", torch_dtype="float32",
                  eos_token_id=eos)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write_hub_repo(repo, chats):
    """A dataset repository as huggingface-cli download leaves it: data/<split>-00000-of-00001.parquet."""
    os.makedirs(os.path.join(repo, "data"))
    for split, rows in (("train", chats * 8), ("test", chats)):
        table = pa.Table.from_pylist([{"messages": c} for c in rows])
        pq.write_table(table, os.path.join(repo, "data", f"{split}-00000-of-00001.parquet"))


@pytest.fixture(scope="module")
def path(workdir):
    d = workdir
    model = os.path.join(d, "qwen3")
    p = subprocess.run([sys.executable, "-c", QWEN3_WRITER, model, SCRIPTS, json.dumps(QWEN3_CHATS)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    ref = json.loads(p.stdout.strip().splitlines()[-1])
    tok = transformers.AutoTokenizer.from_pretrained(model)
    vocab = (ref["vocab"] + 63) // 64 * 64  # padded, as real checkpoints' embeddings are
    write_qwen3_weights(model, vocab, tok.convert_tokens_to_ids("<|im_end|>"))
    write_hub_repo(os.path.join(d, "repo"), QWEN3_CHATS)
    return d, model, ref


def test_the_readme_path_runs_on_the_installed_libraries(path, note):
    d, model, ref = path
    # 1. data: the model's tokenizer and chat template, the Hub repository's splits
    for split in ("train", "test"):
        tool("sft_prepare_hf.py", "--tokenizer", model, "--input", f"{d}/repo", "--split", split,
             "--output", f"{d}/{split}.h5", "--max-length", str(T))
    with h5py.File(f"{d}/test.h5") as f:
        inputs, targets = f["inputs"][()], f["targets"][()]
    for r, ids in enumerate(ref["ids"]):
        n = len(ids)
        assert list(inputs[r, :n - 1]) + [int(targets[r, n - 2])] == ids, f"row {r} is apply_chat_template's ids"
    # 2. train from the directory
    cfg = write_config(f"{d}/my.yml", run_name="qwen3", base_output_directory=f"{d}/out", global_batch_size=4,
                       steps=4, learning_rate=3e-3, warmup_steps_fraction=0.0, hardware="cpu", eval_interval=4,
                       checkpoint_period=4)
    run_train(cfg, [f"load_parameters_path={model}", f"train_files={d}/train.h5", f"eval_files={d}/test.h5",
                    f"max_target_length={T}"])
    train, evals = read_metrics(f"{d}/out/qwen3")
    assert len(train) == 4 and evals and np.isfinite(evals[-1]["eval_loss"])
    # 3. export with the tokenizer beside it
    export = f"{d}/my-model"
    p = subprocess.run([SFT_EXPORT, f"{d}/out/qwen3/checkpoints/step_4", export, "--tokenizer", model],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    with open(f"{export}/config.json") as f:
        assert json.load(f)["head_dim"] == HS
    exported = transformers.AutoTokenizer.from_pretrained(export)
    assert chat_ids(exported, QWEN3_CHATS[0]) == ref["ids"][0], "the export carries the model's tokenizer"
    # 4. talk to it: generate.py's reply is sft_generate's greedy tokens on the chat's ids, decoded
    messages = [{"role": "user", "content": "What is two plus two?"}]
    prompt = chat_ids(exported, messages, add_generation_prompt=True)
    stop = exported.convert_tokens_to_ids("<|im_end|>")
    g = subprocess.run([os.path.join(BUILD, "sft_generate"), "--model", export, "--prompt-ids",
                        " ".join(map(str, prompt)), "--max-new-tokens", "8", "--stop-id", str(stop),
                        "--hardware", "cpu"], capture_output=True, text=True, timeout=120)
    assert g.returncode == 0, g.stderr
    new = [int(x) for x in g.stdout.split()]
    new = new[:-1] if new and new[-1] == stop else new
    reply = tool("generate.py", "--model", export, "--chat", messages[0]["content"], "--max-new-tokens", "8",
                 "--hardware", "cpu").stdout
    assert reply == exported.decode(new, skip_special_tokens=True) + "\n", (reply, new)
    note(f"hf_path_qwen3: README path (Hub repo -> prepare -> train -> export -> generate.py) on transformers "
         f"{ref['transformers']}, tokenizers {ref['tokenizers']}, no torch needed")
