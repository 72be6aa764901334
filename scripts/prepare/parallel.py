"""map(fn, items) in order over worker processes with a bounded number of items in flight (so a
large input is never read ahead whole, as multiprocessing's imap would), or in this process for one
worker. fn and its state reach the workers by fork: set them before calling."""
import collections
import multiprocessing


def ordered_map(fn, items, workers, depth=None):
    """Yields (item, fn(item)) in the order of items; an exception in fn is raised here, for the
    first failing item in order."""
    if workers <= 1:
        for item in items:
            yield item, fn(item)
        return
    depth = depth or 2 * workers
    pool = multiprocessing.get_context("fork").Pool(workers)
    pending = collections.deque()
    try:
        for item in items:
            pending.append((item, pool.apply_async(fn, (item,))))
            if len(pending) >= depth:
                done, result = pending.popleft()
                yield done, result.get()
        while pending:
            done, result = pending.popleft()
            yield done, result.get()
        pool.close()
    finally:
        pool.terminate()
        pool.join()
