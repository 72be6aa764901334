"""config.json as the installed transformers writes and reads it, for tests/integration/test_hf_config_json.py,
which runs this file under both the pinned (.pyref: 4.44) and the newest (.pynew: >= 5, torch-free) venvs.
Only the config classes are used: no torch, no weights.

  python hf_config_writer.py JOBS_JSON   runs each job of the list, in one process (one import):
    ["write", FAMILY, OUT_DIR, KWARGS]   FamilyConfig(**KWARGS).save_pretrained(OUT_DIR)
    ["full", FAMILY, OUT_DIR, KWARGS]    OUT_DIR/config.json = every key of its to_dict()
    ["read", DIR]                        prints {"version", "model_type", "rope"} of AutoConfig.from_pretrained(DIR)
                                         as one JSON line
"rope" is what that transformers computes RoPE from: >= 5 its rope_parameters; < 5 its rope_scaling (or
{"rope_type": "default"}) with rope_theta."""
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import transformers  # noqa: E402

CLASSES = {"gpt2": "GPT2Config", "llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config",
           "qwen3": "Qwen3Config"}


def config_class(family):
    cls = getattr(transformers, CLASSES[family], None)
    if cls is None:
        sys.exit(f"transformers {transformers.__version__} has no {CLASSES[family]}")
    return cls


def run(job):
    mode = job[0]
    if mode in ("write", "full"):
        family, out, kwargs = job[1], job[2], job[3]
        config = config_class(family)(**kwargs)
        os.makedirs(out, exist_ok=True)
        if mode == "write":
            config.save_pretrained(out)
        else:
            with open(os.path.join(out, "config.json"), "w") as f:
                json.dump(config.to_dict(), f, indent=2, default=str)
        return
    config = transformers.AutoConfig.from_pretrained(job[1])
    rope = getattr(config, "rope_parameters", None)
    if rope is None or int(transformers.__version__.split(".")[0]) < 5:
        rope = dict(getattr(config, "rope_scaling", None) or {"rope_type": "default"})
        rope["rope_theta"] = getattr(config, "rope_theta", None)
    print(json.dumps({"version": transformers.__version__, "model_type": config.model_type, "rope": rope}))


if __name__ == "__main__":
    for job in json.loads(sys.argv[1]):
        run(job)
