"""A dataset repository downloaded from the Hugging Face Hub (huggingface-cli download, git clone)
→ the data files of one split, found the way datasets' load_dataset(DIR) finds them:
  1. the README.md's YAML `configs:` block, when it has one: the config named by --config (else the
     one marked `default: true`, else the only one, else the one called "default"), its
     `data_files` (a pattern, a list, or a list of {split, path}; no split: train) as globs
     relative to DIR;
  2. else shards `data/<split>-NNNNN-of-NNNNN*.<ext>`;
  3. else split keywords in directory names, then in file names (train/training,
     validation/valid/dev/val, test/testing/eval/evaluation, set off by - . _ space or digits);
  4. else every data file is the train split.
Hidden files and folders, `__*` folders and the Hub's metadata files are skipped; files in a split
are sorted by path. Of a split's files those in a format sources.py reads (.parquet, .jsonl,
.json as JSON Lines, .arrow) are used; a split with only other formats is an error naming them."""
import glob
import os
import re

from prepare.errors import UserError, one_line

READABLE = (".parquet", ".jsonl", ".json", ".arrow")
SPLIT_KEYWORDS = {"train": ("train", "training"), "validation": ("validation", "valid", "dev", "val"),
                  "test": ("test", "testing", "eval", "evaluation")}
SEP = r"[-._ 0-9]"
IGNORED = {"README.md", "config.json", "dataset_info.json", "dataset_infos.json", "dummy_data.zip",
           "dataset_dict.json", "state.json", ".gitattributes"}
SHARD = re.compile(r"^data/([A-Za-z0-9_][\w.-]*?)-[0-9]{5}-of-[0-9]{5}[^/]*\.[^/]+$")


def _visible(rel):
    parts = rel.split("/")
    return not any(p.startswith(".") for p in parts) and not any(p.startswith("__") for p in parts[:-1]) \
        and parts[-1] not in IGNORED


def _all_files(d):
    out = []
    for root, dirs, files in os.walk(d):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and not x.startswith("__"))
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), d).replace(os.sep, "/")
            if _visible(rel):
                out.append(rel)
    return sorted(out)


def _keyword_in(part, keyword, after_required):
    tail = f"{SEP}.*" if after_required else f"({SEP}.*)?"
    return re.fullmatch(f"(.*{SEP})?{re.escape(keyword)}{tail}", part) is not None


def default_splits(files):
    """{split: [relative paths]} by rules 2-4 above."""
    shards = {}
    for rel in files:
        m = SHARD.match(rel)
        if m:
            shards.setdefault(m[1], []).append(rel)
    if shards:
        return shards
    for in_dir in (True, False):
        found = {}
        for split, keywords in SPLIT_KEYWORDS.items():
            for rel in files:
                parts = rel.split("/")
                names = parts[:-1] if in_dir else parts[-1:]
                if any(_keyword_in(p, k, not in_dir) for p in names for k in keywords):
                    found.setdefault(split, []).append(rel)
        if found:
            return found
    return {"train": list(files)} if files else {}


def readme_configs(d):
    """The `configs:` list of DIR/README.md's YAML front matter, or None."""
    path = os.path.join(d, "README.md")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    m = re.match(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|\Z)", text, re.S)
    if not m:
        return None
    import yaml  # PyYAML: a dependency of transformers and huggingface_hub
    try:
        meta = yaml.safe_load(m[1])
    except yaml.YAMLError as e:
        raise UserError(f"{path}: its YAML header cannot be read: {one_line(e)}")
    configs = meta.get("configs") if isinstance(meta, dict) else None
    if configs is None:
        return None
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise UserError(f"{path}: configs: expected a list of {{config_name, data_files}}")
    return configs


def _pick_config(configs, name, path):
    names = [str(c.get("config_name", "default")) for c in configs]
    if name is not None:
        if name not in names:
            raise UserError(f'--config: {path} has no config "{name}" (it has {", ".join(names)})')
        return configs[names.index(name)]
    marked = [c for c in configs if c.get("default") is True]
    if len(configs) == 1 or len(marked) == 1:
        return configs[0] if len(configs) == 1 else marked[0]
    if "default" in names:
        return configs[names.index("default")]
    raise UserError(f"{path}: has several configs ({', '.join(names)}) and none is the default; "
                    "choose one with --config NAME")


def config_splits(d, config, path):
    """{split: [relative paths]} of one README config's data_files (or data_dir)."""
    files = config.get("data_files")
    if files is None:
        sub = config.get("data_dir")
        if not isinstance(sub, str):
            raise UserError(f"{path}: config {config.get('config_name', 'default')}: has no data_files")
        inner = default_splits(_all_files(os.path.join(d, sub)))
        return {s: [f"{sub}/{r}" for r in rels] for s, rels in inner.items()}
    if isinstance(files, (str, list)) and not (isinstance(files, list) and files and isinstance(files[0], dict)):
        patterns = {"train": [files] if isinstance(files, str) else files}
    elif isinstance(files, list):
        patterns = {}
        for entry in files:
            if not (isinstance(entry, dict) and "split" in entry and isinstance(entry.get("path"), (str, list))):
                raise UserError(f"{path}: data_files: expected {{split, path}} entries, found {entry!r}")
            patterns[str(entry["split"])] = [entry["path"]] if isinstance(entry["path"], str) else entry["path"]
    else:
        raise UserError(f"{path}: data_files: expected a pattern, a list or {{split, path}} entries")
    out = {}
    for split, pats in patterns.items():
        rels = []
        for pat in pats:
            for p in sorted(glob.glob(os.path.join(d, str(pat)), recursive=True)):
                rel = os.path.relpath(p, d).replace(os.sep, "/")
                if os.path.isfile(p) and (_visible(rel) or rel == str(pat)) and rel not in rels:
                    rels.append(rel)
        out[split] = rels
    return out


def split_files(d, split, config_name):
    """(paths of the chosen split's readable files, a note on how they were found). split None:
    train."""
    readme = os.path.join(d, "README.md")
    configs = readme_configs(d)
    if configs:
        config = _pick_config(configs, config_name, readme)
        splits = config_splits(d, config, readme)
        how = f"README.md config {config.get('config_name', 'default')}"
    else:
        if config_name is not None:
            raise UserError(f"--config: {d} has no README.md with a configs: block")
        splits = default_splits(_all_files(d))
        how = "file layout"
    order = [s for s in SPLIT_KEYWORDS if s in splits] + sorted(set(splits) - set(SPLIT_KEYWORDS))
    splits = {k: splits[k] for k in order}  # train, validation, test, then the others (as datasets)
    want = split or "train"
    if want not in splits:
        if not splits:
            raise UserError(f"{d}: a directory without data files (.parquet, .jsonl, .arrow), state.json or "
                            "dataset_dict.json; give files or a quoted glob instead, e.g. --input "
                            f"'{os.path.join(d, 'data', 'train-*.parquet')}'")
        raise UserError(f"{d}: has no split \"{want}\" (by its {how}: {', '.join(splits)}); "
                        f"choose one with --split NAME")
    rels = splits[want]
    readable = [r for r in rels if r.lower().endswith(READABLE)]
    if not readable:
        kinds = sorted({os.path.splitext(r)[1] or r for r in rels}) or ["no files"]
        raise UserError(f"{d}: split {want} (by its {how}) has {', '.join(kinds)} files; this script reads "
                        ".parquet, .jsonl and .arrow (convert them, or give files with --input)")
    return [os.path.join(d, r) for r in readable], f"split {want} by its {how}, {len(readable)} files"
