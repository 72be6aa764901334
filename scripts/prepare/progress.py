"""The progress line on stderr: rows done, rows/s and an ETA from the fraction of input consumed.
Redrawn in place on a terminal; elsewhere a line every `every` seconds (0: after every batch)."""
import sys
import time


def clock(seconds):
    s = int(max(0, seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Progress:
    def __init__(self, every=None, stream=None):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every if every is not None else (0.5 if self.tty else 10.0)
        self.start = self.last = time.monotonic()
        self.drawn = False

    def update(self, rows, fraction):
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        elapsed = now - self.start
        eta = elapsed * (1 - fraction) / fraction if fraction > 0 else float("nan")
        line = (f"sft_prepare_hf: {rows} rows, {100 * fraction:.1f}% of the input, "
                f"{rows / max(elapsed, 1e-9):.0f} rows/s, ETA {clock(eta) if eta == eta else '?'}")
        self.stream.write(("\r" + line + "\033[K") if self.tty else line + "\n")
        self.stream.flush()
        self.drawn = True

    def done(self, rows, tokens):
        elapsed = max(time.monotonic() - self.start, 1e-9)
        if self.tty and self.drawn:
            self.stream.write("\r\033[K")
        self.stream.write(f"sft_prepare_hf: {rows} rows in {elapsed:.1f} s: {rows / elapsed:.0f} rows/s, "
                          f"{tokens / elapsed:.0f} tokens/s\n")
        self.stream.flush()
