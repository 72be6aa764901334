"""Where rows come from, read in batches so that memory is bounded by a batch, not the input:
JSONL files (one JSON object a line, blank lines skipped), Parquet files (pyarrow), Arrow IPC files
(the stream format datasets.save_to_disk writes, or the file format), datasets.save_to_disk
directories (their data-0000N-of-M.arrow files in state.json's order; a DatasetDict's split),
dataset repositories downloaded from the Hub (prepare.hub picks a split's files) and shell globs of
any of these. A row is named "<file>:<line>" (JSONL) or "<file>: row N" (N counted from 1 in that
file); a Batch also carries the file and those numbers (the dropped-rows report)."""
import glob
import json
import os

from prepare import hub
from prepare.errors import UserError, one_line


class Batch:
    """Rows of one file (path): raw JSONL lines (bytes, raw=True) or dicts (a Parquet/Arrow row),
    each with its name and number (JSONL: its line; Parquet/Arrow: its row, from 1); progress is
    how far into all inputs (in bytes of input) the batch's end lies."""

    def __init__(self, path, numbers, items, raw, progress):
        self.path, self.numbers, self.items, self.raw, self.progress = path, numbers, items, raw, progress
        self.names = [f"{path}:{n}" if raw else f"{path}: row {n}" for n in numbers]

    def place(self, k):
        """Row k's place in its file, for the dropped-rows report."""
        n = self.numbers[k]
        return {"file": self.path, "line": n} if self.raw else {"file": self.path, "row": n, "index": n - 1}

    def rows(self):
        return zip(self.names, self.items)


def _saved_dataset_files(d):
    """The .arrow files of a datasets.save_to_disk directory (with state.json), in its order."""
    state = os.path.join(d, "state.json")
    try:
        with open(state, encoding="utf-8") as f:
            names = [e["filename"] for e in json.load(f)["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{state}: not a datasets state.json ({one_line(e)})")
    files = [os.path.join(d, n) for n in names]
    for p in files:
        if not os.path.isfile(p):
            raise UserError(f"{p}: not found (listed in {state})")
    return files


def _directory_files(d, split, config, notes):
    """A directory's data files: a DatasetDict's split (dataset_dict.json), a saved Dataset
    (state.json), or a Hub dataset repository's split (prepare.hub)."""
    if os.path.isfile(os.path.join(d, "dataset_dict.json")):
        splits = sorted(e for e in os.listdir(d) if os.path.isfile(os.path.join(d, e, "state.json")))
        want = split or "train"
        if want not in splits:
            raise UserError(f"{d}: is a DatasetDict with splits {', '.join(splits) or 'none'} and no "
                            f'"{want}"; choose one with --split NAME')
        notes.append(f"{d}: split {want} of a datasets.save_to_disk DatasetDict")
        return _saved_dataset_files(os.path.join(d, want))
    if os.path.isfile(os.path.join(d, "state.json")):
        if split is not None or config is not None:
            raise UserError(f"{d}: is one saved split (state.json); --split and --config are for "
                            "a DatasetDict or a Hub dataset directory")
        return _saved_dataset_files(d)
    files, how = hub.split_files(d, split, config)
    notes.append(f"{d}: {how}")
    return files


def _kind(path):
    with open(path, "rb") as f:
        head = f.read(8)
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"ARROW1") or head.startswith(b"\xff\xff\xff\xff"):
        return "arrow"
    if head.lstrip().startswith(b"["):
        raise UserError(f"{path}: is a JSON array, not JSON Lines (one object a line); convert it, "
                        "e.g. jq -c '.[]'")
    return "jsonl"


def expand(inputs, split=None, config=None, notes=None):
    """--input values → [(path, kind)] in order: globs sorted, directories as saved datasets or Hub
    dataset repositories (split: --split, default train; config: --config). notes, a list, gets a
    line per directory saying which files were taken."""
    out = []
    notes = [] if notes is None else notes
    if (split is not None or config is not None) and not any(os.path.isdir(spec) for spec in inputs):
        flag = "--split" if split is not None else "--config"
        raise UserError(f"{flag}: chooses among a dataset directory's splits and configs, and no --input is a "
                        f"directory ({', '.join(inputs)}); pass the directory, or the split's files without {flag}")
    for spec in inputs:
        if os.path.isdir(spec):
            paths = _directory_files(spec, split, config, notes)
        elif os.path.exists(spec):
            paths = [spec]
        elif glob.has_magic(spec):
            paths = sorted(p for p in glob.glob(spec) if os.path.isfile(p))
            if not paths:
                raise UserError(f"{spec}: no file matches")
        else:
            raise UserError(f"{spec}: not found")
        for p in paths:
            try:
                out.append((p, _kind(p)))
            except OSError as e:
                raise UserError(f"{p}: cannot be opened for reading: {e.strerror}")
    return out


def _arrow_batches(path):
    import pyarrow as pa
    source = pa.memory_map(path, "r")
    try:
        reader = pa.ipc.open_stream(source)
    except pa.ArrowInvalid:
        source.seek(0)
        reader = pa.ipc.open_file(source)
        return (reader.get_batch(i) for i in range(reader.num_record_batches))
    return iter(reader)


def _columnar_rows(path, kind, columns):
    """(total rows, an iterator of pyarrow RecordBatches) of a Parquet or Arrow file."""
    import pyarrow as pa
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq
            f = pq.ParquetFile(path)
            present = [c for c in f.schema_arrow.names if c in columns]
            return f.metadata.num_rows, f.iter_batches(batch_size=4096, columns=present)
        total = sum(b.num_rows for b in _arrow_batches(path))  # headers only: memory-mapped
        return total, _arrow_batches(path)
    except (pa.ArrowException, OSError) as e:
        raise UserError(f"{path}: cannot be read as {kind}: {one_line(e)}")


def batches(sources, columns, size):
    """Batches of at most `size` rows from every source in order. columns: the column names the
    format may use (others are not read from Parquet)."""
    sizes = [max(os.path.getsize(p), 1) for p, _ in sources]
    total, before = sum(sizes), 0
    for (path, kind), nbytes in zip(sources, sizes):
        if kind == "jsonl":
            yield from _jsonl_batches(path, size, before, nbytes, total)
        else:
            yield from _columnar_batches(path, kind, columns, size, before, nbytes, total)
        before += nbytes


def _jsonl_batches(path, size, before, nbytes, total):
    numbers, items, at = [], [], 0
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            at += len(raw)
            if not raw.strip(b" \t\r\n"):
                continue
            numbers.append(line_no)
            items.append(raw)
            if len(items) == size:
                yield Batch(path, numbers, items, True, (before + at) / total)
                numbers, items = [], []
    if items:
        yield Batch(path, numbers, items, True, (before + nbytes) / total)


def _columnar_batches(path, kind, columns, size, before, nbytes, total):
    import pyarrow as pa
    rows, record_batches = _columnar_rows(path, kind, columns)
    row = 0
    try:
        for rb in record_batches:
            keep = [c for c in rb.schema.names if c in columns]
            rb = rb.select(keep)
            for start in range(0, rb.num_rows, size):
                part = rb.slice(start, size).to_pylist()
                numbers = list(range(row + 1, row + len(part) + 1))
                row += len(part)
                yield Batch(path, numbers, part, False, (before + nbytes * row / max(rows, 1)) / total)
    except pa.ArrowException as e:
        raise UserError(f"{path}: cannot be read as {kind} after row {row}: {one_line(e)}")
