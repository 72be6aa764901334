"""Examples → SPEC §4 rows (src/data/prepare.cpp RowBuilder's rules), streamed into the HDF5 file a
chunk of rows at a time. An example of L tokens takes L-1 positions: inputs tokens[0..L-2], targets
tokens[1..L-1], loss_weights the targets' weights. Longer than T+1: cut to its first T+1 tokens
(truncate, TRL's way: the completion loses its end, the prompt is kept), or dropped when the prompt
alone leaves no trained token in them; with drop, every such example is dropped. Each dropped row is
one JSON line of the report <output>.dropped.jsonl. Packed: appended to the current row while it
fits, segment ids 1, 2, ... and positions restarting at 0 per example (padding: 0, 0). The files are
written as <path>.partial-<pid> and renamed into place when complete (src/data/data_writer.cpp), so
a failure leaves nothing."""
import json
import os
import shutil

import numpy as np

from prepare.errors import UserError

COLUMNS = ("inputs", "targets", "loss_weights", "segment_ids", "positions")


class RowBuilder:
    def __init__(self, T, pack, truncate, pad_id, sink, chunk_rows=4096, report=None):
        self.T, self.pack, self.truncate, self.pad_id, self.sink = T, pack, truncate, pad_id, sink
        self.report = report  # a DropReport, or None (dropped rows only counted)
        self.chunk = chunk_rows
        self.stats = {"examples": 0, "dropped": 0, "truncated": 0, "completion_tokens": 0}
        self.rows = 0           # rows started so far
        self.row_open = False
        self.fill = self.segment = 0
        self._reset()

    def _reset(self):
        n, T = self.chunk, self.T
        self.buf = {"inputs": np.full((n, T), self.pad_id, dtype="<i4"),
                    "targets": np.full((n, T), self.pad_id, dtype="<i4"),
                    "loss_weights": np.zeros((n, T), dtype="<f4")}
        if self.pack:
            self.buf["segment_ids"] = np.zeros((n, T), dtype="<i4")
            self.buf["positions"] = np.zeros((n, T), dtype="<i4")
        self.used = 0  # rows of buf in use; the last one is open while row_open

    def _start_row(self):
        if self.used == self.chunk:
            self.sink.append(self.buf)
            self._reset()
        self.used += 1
        self.rows += 1
        self.row_open, self.fill, self.segment = True, 0, 0

    def _drop(self, place, k, length, prompt, reason):
        self.stats["dropped"] += 1
        if self.report is not None and place is not None:
            self.report.add(place(k), length, prompt, reason)

    def add_batch(self, ids, weights, offsets, place=None):
        """Examples k = ids[offsets[k]:offsets[k+1]] (with their weights), in order; place(k) names
        example k's row in its file (prepare.sources.Batch.place) for the dropped-rows report."""
        T = self.T
        stats = self.stats
        for k in range(len(offsets) - 1):
            a, b = int(offsets[k]), int(offsets[k + 1])
            stats["examples"] += 1
            length = b - a
            if length > T + 1:
                trained = np.flatnonzero(weights[a + 1:b])
                prompt = int(trained[0]) + 1 if len(trained) else length  # tokens before the first trained one
                if not self.truncate:
                    self._drop(place, k, length, prompt, f"longer than max-length+1 = {T + 1} tokens")
                    continue
                if prompt > T:
                    self._drop(place, k, length, prompt, f"the prompt alone is {prompt} tokens: no "
                               f"completion token fits in max-length+1 = {T + 1}")
                    continue
                stats["truncated"] += 1
                length = T + 1
            span = length - 1
            if not self.row_open or not self.pack or self.fill + span > T:
                self._start_row()
            self.segment += 1
            r, at = self.used - 1, self.fill
            buf = self.buf
            buf["inputs"][r, at:at + span] = ids[a:a + span]
            buf["targets"][r, at:at + span] = ids[a + 1:a + length]
            w = weights[a + 1:a + length]
            buf["loss_weights"][r, at:at + span] = w
            stats["completion_tokens"] += int(np.count_nonzero(w))
            if self.pack:
                buf["segment_ids"][r, at:at + span] = self.segment
                buf["positions"][r, at:at + span] = np.arange(span, dtype="<i4")
            self.fill += span

    def finish(self):
        if self.used:
            self.sink.append({name: a[:self.used] for name, a in self.buf.items()})
        self.used = 0
        return self.rows


class DropReport:
    """The dropped rows, one JSON line each ({"file", "line"} or {"file", "row", "index"}, "tokens",
    "prompt_tokens", "reason"), written beside the output as <output>.dropped.jsonl and renamed into
    place with it; none dropped: no report (an earlier run's is removed)."""

    def __init__(self, output):
        self.path = output + ".dropped.jsonl"
        self.temp = f"{self.path}.partial-{os.getpid()}"
        self.f = None
        self.count = 0

    def add(self, place, tokens, prompt_tokens, reason):
        if self.f is None:
            self.f = open(self.temp, "w", encoding="utf-8")
        self.f.write(json.dumps(dict(place, tokens=tokens, prompt_tokens=prompt_tokens, reason=reason),
                                ensure_ascii=False) + "\n")
        self.count += 1

    def finish(self):
        if self.f is not None:
            self.f.close()
            os.rename(self.temp, self.path)
        elif os.path.exists(self.path):
            os.remove(self.path)

    def abort(self):
        if self.f is not None:
            self.f.close()
        if os.path.exists(self.temp):
            os.remove(self.temp)


class H5Sink:
    """Rows appended to resizable datasets of a temporary file; finish() renames it into place."""

    def __init__(self, path, T, pack):
        import h5py
        parent = os.path.dirname(path)
        self.created = None  # the outermost directory made here, removed again by abort()
        if parent and not os.path.isdir(parent):
            top = parent
            while os.path.dirname(top) and not os.path.exists(os.path.dirname(top)):
                top = os.path.dirname(top)
            try:
                os.makedirs(parent, exist_ok=True)
            except OSError as e:
                raise UserError(f"{path}: cannot create directory {parent}: {e.strerror}")
            self.created = top
        self.path, self.temp = path, f"{path}.partial-{os.getpid()}"
        try:
            self.f = h5py.File(self.temp, "w")
        except OSError:
            raise UserError(f"{path}: cannot create (is the directory writable?)")
        names = COLUMNS if pack else COLUMNS[:3]
        for name in names:
            dtype = "<f4" if name == "loss_weights" else "<i4"
            self.f.create_dataset(name, shape=(0, T), maxshape=(None, T), dtype=dtype,
                                  chunks=(max(1, min(1024, (1 << 20) // (4 * T))), T))
        self.names = names

    def append(self, columns):
        n = len(columns["inputs"])
        for name in self.names:
            d = self.f[name]
            d.resize(d.shape[0] + n, axis=0)
            d[-n:] = columns[name]

    def finish(self, vocab_size, identity):
        import h5py
        self.f.attrs.create("vocab_size", np.int64(vocab_size), dtype="<i8")
        self.f.attrs.create("tokenizer", identity[0], dtype=h5py.string_dtype())
        self.f.attrs.create("tokenizer_hash", identity[1], dtype=h5py.string_dtype())
        self.f.close()
        os.rename(self.temp, self.path)

    def abort(self):
        try:
            self.f.close()
        finally:
            if os.path.exists(self.temp):
                os.remove(self.temp)
            if self.created:
                shutil.rmtree(self.created, ignore_errors=True)


class MemorySink:
    """Rows kept in memory (bench/bench_tokenizer.py times preparation without the write)."""

    def __init__(self):
        self.parts = []

    def append(self, columns):
        self.parts.append({k: v.copy() for k, v in columns.items()})

    def columns(self):
        return {k: np.concatenate([p[k] for p in self.parts]) for k in self.parts[0]} if self.parts else {}

    def finish(self, vocab_size, identity):
        pass

    def abort(self):
        self.parts = []
