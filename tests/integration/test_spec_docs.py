"""docs/SPEC.md and configs/reference.yml stay current with the key table in src/config/keys.cpp:
every key has a row in the SPEC §3 key table and an entry in reference.yml with the same default,
neither documents a key that does not exist, and the sections the code cites ("SPEC §N" or
"docs/SPEC.md §N") exist. Reads source files only: no build needed."""
import os
import re

import pytest

from harness import SOURCE

KEY_ROW = re.compile(r"^\| `(\w+)` \| (\w+) \| ([^|]+) \|", re.M)


def read(rel):
    with open(os.path.join(SOURCE, rel), encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def keys():
    """{key: group} from the table in src/config/keys.cpp, in its order."""
    found = re.findall(r'\{"(\w+)", "(\w+)", &Config::\w+', read("src/config/keys.cpp"))
    assert len(found) >= 30, f"could not read the key table of src/config/keys.cpp ({len(found)} keys)"
    return dict(found)


@pytest.fixture(scope="module")
def spec():
    return read("docs/SPEC.md")


@pytest.fixture(scope="module")
def spec_table(spec):
    """{key: (group, default)} from the §3 key table of docs/SPEC.md."""
    section3 = spec.split("## 3. ", 1)[1].split("\n## 4. ", 1)[0]
    return {k: (g, d.strip().strip("`")) for k, g, d in KEY_ROW.findall(section3)}


@pytest.fixture(scope="module")
def reference():
    """{key: default} from configs/reference.yml: each key line follows a comment with 'Default: X'."""
    out, default = {}, None
    for line in read("configs/reference.yml").splitlines():
        m = re.search(r"Default: (.*)$", line)
        if line.startswith("#"):
            default = m.group(1).split()[0] if m else default  # "600.0 (why)" -> "600.0"
            continue
        m = re.match(r"^(\w+):", line)
        if m:
            out[m.group(1)] = default
            default = None
    return out


def test_every_key_is_in_the_spec_table(keys, spec_table):
    missing = [k for k in keys if k not in spec_table]
    assert not missing, (f"keys of src/config/keys.cpp without a row in the docs/SPEC.md §3 key table "
                         f"(| `key` | group | default | meaning |): {missing}")


def test_spec_table_names_only_real_keys_in_their_group(keys, spec_table):
    unknown = [k for k in spec_table if k not in keys]
    assert not unknown, f"docs/SPEC.md §3 documents keys that src/config/keys.cpp does not have: {unknown}"
    wrong_group = {k: (g, keys[k]) for k, (g, _) in spec_table.items() if k in keys and g != keys[k]}
    assert not wrong_group, f"docs/SPEC.md group vs keys.cpp section: {wrong_group}"


def test_every_key_is_in_reference_yml(keys, reference):
    missing = [k for k in keys if k not in reference]
    assert not missing, f"keys of src/config/keys.cpp missing from configs/reference.yml: {missing}"
    unknown = [k for k in reference if k not in keys]
    assert not unknown, f"configs/reference.yml sets keys that src/config/keys.cpp does not have: {unknown}"
    undocumented = [k for k in keys if reference.get(k) is None and k in reference]
    assert not undocumented, f"configs/reference.yml keys without a 'Default: X' comment: {undocumented}"


def test_spec_and_reference_defaults_agree(keys, spec_table, reference):
    differ = {k: (spec_table[k][1], reference[k]) for k in keys
              if k in spec_table and reference.get(k) is not None and spec_table[k][1] != reference[k]}
    assert not differ, f"default in docs/SPEC.md vs configs/reference.yml: {differ}"


def test_cited_sections_exist(spec):
    cited = set()
    for top in ("src", "include", "kernels", "cudasim", "tests", "scripts", "bench"):
        for root, _, files in os.walk(os.path.join(SOURCE, top)):
            for name in files:
                if name.endswith((".cpp", ".h", ".cu", ".cuh", ".py", ".sh", ".md")):
                    with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
                        cited |= set(re.findall(r"SPEC(?:\.md)? §(\d+)", f.read()))
    assert cited, "no 'SPEC §N' citation found in the sources"
    missing = sorted(n for n in cited if not re.search(rf"(?m)^## {n}\. ", spec))
    assert not missing, f"the code cites SPEC sections that docs/SPEC.md does not have: {missing}"


def test_readme_links_the_spec():
    assert "(docs/SPEC.md)" in read("README.md"), "README.md links docs/SPEC.md"


def test_config_json_table_matches_the_source(spec):
    """SPEC §5 "config.json, key by key" has a row for every key of src/hf/config_json.cpp's tables, with its
    use (read, irrelevant, refused unless default, noted), and no other."""
    src = read("src/hf/config_json.cpp")
    uses = {"R": "read", "I": "irrelevant", "D": "refused unless", "N": "noted"}
    code = set()
    for body in re.findall(r"const ConfigJsonKey k\w+\[\] = \{(.*?)\n\};", src, re.S):
        code |= {(k, uses[u]) for k, u in re.findall(r'\{"([^"]+)", ([RIDN]),', body)}
    assert len(code) >= 90, f"could not read the tables of src/hf/config_json.cpp ({len(code)} rows)"
    section = spec.split("| key | model types | use |", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| [^|]+ \| ([^|]+) \|", section, re.M)
    documented = {(k, next(u for u in uses.values() if use.strip().startswith(u))) for k, use in rows}
    assert code - documented == set(), f"config.json keys of the source missing from SPEC §5: {code - documented}"
    assert documented - code == set(), f"SPEC §5 config.json rows the source does not have: {documented - code}"
