"""rill.data: datasets, their transformations, the background threads, and Queue.

Every test that could block has a timeout (the module's mark); timing tests sleep rather
than compute, so that they measure overlap, not CPU speed, and assert with a wide margin.
"""
import collections
import gc
import threading
import time

import numpy as np
import pytest

import rill
from rill.data import Dataset, Queue, QueueClosed

pytestmark = pytest.mark.timeout(10)

Pair = collections.namedtuple("Pair", "a b")


@pytest.fixture
def baseline():
    """threading.active_count() once threads left by earlier tests' pipelines have ended."""
    deadline = time.monotonic() + 2
    while (any(t.name.startswith("rill.data.") for t in threading.enumerate())
           and time.monotonic() < deadline):
        time.sleep(0.005)
    return threading.active_count()


def wait_for_thread_count(count, timeout=2.0):
    """threading.active_count() once it is down to `count`, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while threading.active_count() > count and time.monotonic() < deadline:
        time.sleep(0.005)
    return threading.active_count()


def in_thread(fn):
    """Run fn() on a thread; returns (thread, outcome) where outcome fills in when it ends."""
    outcome = {}

    def run():
        try:
            outcome["value"] = fn()
        except BaseException as e:  # noqa: B902 - the test inspects whatever it was
            outcome["error"] = e
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


# ---- constructors ----------------------------------------------------------------------------


def test_from_tensors_is_one_element_holding_the_whole_structure():
    ds = Dataset.from_tensors({"x": rill.ones(2, 3), "y": (np.arange(2), 5)})
    (element,) = list(ds)
    assert len(ds) == 1
    assert isinstance(element["x"], rill.Tensor) and element["x"].shape == (2, 3)
    assert isinstance(element["y"][0], rill.Tensor) and element["y"][0].tolist() == [0, 1]
    assert isinstance(element["y"][1], rill.Tensor) and element["y"][1].item() == 5

    x, y = next(iter(Dataset.from_tensors(rill.zeros(4), 2.5)))  # several: a tuple
    assert x.shape == (4,) and y.dtype == rill.float32 and y.item() == 2.5


def test_from_tensor_slices_slices_every_leaf_along_the_first_axis():
    images = rill.tensor(np.arange(24, dtype=np.float32).reshape(4, 3, 2))
    labels = np.array([7, 8, 9, 10])
    ds = Dataset.from_tensor_slices({"image": images, "meta": (labels, rill.arange(4) * 2)})
    assert len(ds) == 4
    elements = list(ds)
    assert len(elements) == 4
    for i, e in enumerate(elements):
        assert set(e) == {"image", "meta"}
        assert isinstance(e["image"], rill.Tensor) and e["image"].shape == (3, 2)
        np.testing.assert_array_equal(e["image"].numpy(), images.numpy()[i])
        assert isinstance(e["meta"][0], rill.Tensor) and e["meta"][0].item() == labels[i]
        assert e["meta"][1].item() == 2 * i

    x, y = next(iter(Dataset.from_tensor_slices(np.ones((2, 5)), np.zeros(2))))
    assert x.shape == (5,) and y.shape == ()


def test_from_tensor_slices_rejects_disagreeing_first_axes():
    with pytest.raises(rill.ArgumentError) as info:
        Dataset.from_tensor_slices((rill.ones(3, 2), np.zeros(4)))
    assert info.value.op == "data.from_tensor_slices"
    assert "[3, 4]" in str(info.value) and "(3, 2)" in str(info.value)

    with pytest.raises(rill.ArgumentError, match="0-d"):
        Dataset.from_tensor_slices([1, 2, 3])  # a list is structure: three 0-d leaves


def test_from_arrays_gives_read_only_numpy_rows():
    x = np.arange(6).reshape(3, 2)
    y = np.array([0.5, 1.5, 2.5])
    ds = Dataset.from_arrays(x, y)
    assert len(ds) == 3
    rows = list(ds)
    assert [(a.tolist(), float(b)) for a, b in rows] == [([0, 1], 0.5), ([2, 3], 1.5),
                                                        ([4, 5], 2.5)]
    assert isinstance(rows[0][0], np.ndarray) and not rows[0][0].flags.writeable
    assert x.flags.writeable  # the caller's array is left as it was

    assert [int(v) for v in Dataset.from_arrays([4, 5, 6])] == [4, 5, 6]  # one array: rows

    with pytest.raises(rill.ArgumentError, match=r"\[3, 2\]") as info:
        Dataset.from_arrays(x, np.zeros(2))
    assert info.value.op == "data.from_arrays"


def test_from_generator_calls_the_function_again_for_every_pass():
    calls = []

    def numbers():
        calls.append(1)
        yield from range(3)

    ds = Dataset.from_generator(numbers)
    assert calls == []  # building the pipeline runs nothing
    assert list(ds) == [0, 1, 2]
    assert list(ds) == [0, 1, 2]
    assert len(calls) == 2
    assert list(ds.repeat(3)) == [0, 1, 2] * 3
    assert len(calls) == 5


def test_from_generator_errors():
    with pytest.raises(rill.ArgumentError, match="not a call of it"):
        Dataset.from_generator(i for i in range(3))
    with pytest.raises(rill.DataError, match="returned a int, which is not iterable"):
        list(Dataset.from_generator(lambda: 3))
    with pytest.raises(TypeError, match="unknown"):
        len(Dataset.from_generator(lambda: iter([1])))


# ---- transformations -------------------------------------------------------------------------


def test_map_unpacks_tuples_and_keeps_structures():
    ds = Dataset.from_arrays(np.array([1, 2, 3]), np.array([10, 20, 30]))
    assert [int(v) for v in ds.map(lambda a, b: a + b)] == [11, 22, 33]
    nested = ds.map(lambda a, b: {"sum": a + b, "pair": Pair(a, b)})
    assert len(nested) == 3
    first = next(iter(nested))
    assert int(first["sum"]) == 11 and isinstance(first["pair"], Pair)
    assert int(first["pair"].b) == 10


def test_map_without_workers_lets_exceptions_through_unchanged():
    def broken(x):
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        list(Dataset.from_arrays([1, 2]).map(broken))


def test_batch_stacks_elements_with_and_without_the_remainder():
    ds = Dataset.from_arrays(np.arange(10))
    batches = list(ds.batch(4))
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert all(isinstance(b, rill.Tensor) and b.dtype == rill.int64 for b in batches)
    assert len(ds.batch(4)) == 3

    dropped = ds.batch(4, drop_remainder=True)
    assert [b.tolist() for b in dropped] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(dropped) == 2
    assert len(ds.batch(5, drop_remainder=True)) == 2 == len(list(ds.batch(5, True)))


def test_batch_is_leaf_wise_on_nested_structures():
    def make():
        for i in range(5):
            yield {"image": np.full((2, 2), i, dtype=np.float32),
                   "label": (i, float(i) / 2),
                   "pair": Pair(rill.tensor([i, i]), np.float64(i))}

    batches = list(Dataset.from_generator(make).batch(3))
    assert len(batches) == 2
    b = batches[0]
    assert b["image"].shape == (3, 2, 2) and b["image"].dtype == rill.float32
    assert b["image"].numpy()[:, 0, 0].tolist() == [0, 1, 2]
    labels, halves = b["label"]
    assert labels.dtype == rill.int64 and labels.tolist() == [0, 1, 2]
    assert halves.dtype == rill.float32 and halves.tolist() == [0.0, 0.5, 1.0]  # weak floats
    assert isinstance(b["pair"], Pair)
    assert b["pair"].a.shape == (3, 2) and b["pair"].a.tolist()[2] == [2, 2]
    assert b["pair"].b.dtype == rill.float64  # NumPy keeps its dtype
    assert batches[1]["image"].shape == (2, 2, 2)


def test_batch_reports_mismatched_shapes_and_structures():
    ragged = Dataset.from_generator(lambda: iter([(np.zeros(2), 1), (np.zeros(3), 2)]))
    with pytest.raises(rill.DataError) as info:
        list(ragged.batch(2))
    text = str(info.value)
    assert info.value.op == "data.batch"
    assert "element[0]" in text and "(2,)" in text and "(3,)" in text

    mixed = Dataset.from_generator(lambda: iter([{"a": 1}, {"b": 2}]))
    with pytest.raises(rill.DataError, match="structure"):
        list(mixed.batch(2))


def test_shuffle_is_a_reproducible_permutation_that_changes_every_pass():
    data = Dataset.from_arrays(np.arange(50))

    def passes(ds, n):
        it = ds.repeat(n)
        flat = [int(x) for x in it]
        return [flat[i * 50:(i + 1) * 50] for i in range(n)]

    first = passes(data.shuffle(50, seed=3), 3)
    assert all(sorted(p) == list(range(50)) for p in first)
    assert first[0] != list(range(50))
    assert first[0] != first[1] != first[2]  # reshuffled each pass
    assert passes(data.shuffle(50, seed=3), 3) == first  # ... in the same way every run
    assert passes(data.shuffle(50, seed=4), 1)[0] != first[0]

    rill.manual_seed(11)
    unseeded = passes(data.shuffle(50), 2)
    rill.manual_seed(11)
    assert passes(data.shuffle(50), 2) == unseeded


def test_a_small_shuffle_buffer_only_draws_from_what_it_has_seen():
    out = [int(x) for x in Dataset.from_arrays(np.arange(100)).shuffle(4, seed=0)]
    assert sorted(out) == list(range(100)) and out != list(range(100))
    # The i-th output was among the first i + 4 inputs.
    assert all(x < i + 4 for i, x in enumerate(out))


def test_repeat_take_skip_and_their_lengths():
    ds = Dataset.from_arrays(np.arange(4))
    assert [int(x) for x in ds.repeat(2)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert len(ds.repeat(2)) == 8 and len(ds.repeat(0)) == 0 and list(ds.repeat(0)) == []
    assert [int(x) for x in ds.take(3)] == [0, 1, 2] and len(ds.take(3)) == 3
    assert len(ds.take(10)) == 4 == len(list(ds.take(10)))
    assert [int(x) for x in ds.skip(3)] == [3] and len(ds.skip(3)) == 1
    assert len(ds.skip(9)) == 0 == len(list(ds.skip(9)))

    forever = ds.repeat()
    with pytest.raises(TypeError, match="infinite"):
        len(forever)
    assert [int(x) for x in forever.skip(2).take(7)] == [2, 3, 0, 1, 2, 3, 0]
    assert len(forever.skip(2).take(7)) == 7

    empty = Dataset.from_generator(lambda: iter([]))
    assert list(empty.repeat()) == []  # an endless repeat of nothing ends
    assert len(ds.take(0).repeat()) == 0


def test_transformations_check_their_arguments():
    ds = Dataset.from_arrays([1, 2])
    bad = [lambda: ds.batch(0), lambda: ds.shuffle(0), lambda: ds.shuffle(2, seed=-1),
           lambda: ds.take(-1), lambda: ds.skip(1.5), lambda: ds.repeat(-2),
           lambda: ds.prefetch(0), lambda: ds.map(len, num_workers=-1), lambda: ds.map(3)]
    for make in bad:
        with pytest.raises(rill.ArgumentError):
            make()


def test_every_iter_is_a_fresh_independent_pass():
    ds = Dataset.from_arrays(np.arange(3)).map(lambda x: int(x) * 10, num_workers=2)
    a, b = iter(ds), iter(ds)
    assert next(a) == 0 and next(a) == 10
    assert next(b) == 0
    assert list(a) == [20] and list(b) == [10, 20]
    assert bool(Dataset.from_generator(lambda: iter([])))  # no len() needed to be truthy
    assert "batch(2)" in repr(ds.batch(2)) and "len=2" in repr(ds.batch(2))


# ---- background threads ----------------------------------------------------------------------


def test_parallel_map_keeps_order_and_runs_concurrently():
    def slow(x):
        time.sleep(0.03 if x % 2 else 0.06)  # so that they finish out of order
        return int(x) * 2

    ds = Dataset.from_arrays(np.arange(8))
    start = time.perf_counter()
    assert list(ds.map(slow, num_workers=4)) == [2 * i for i in range(8)]
    parallel = time.perf_counter() - start
    sequential = 4 * 0.06 + 4 * 0.03  # about 0.12 s on 4 workers
    assert parallel < 0.6 * sequential, f"{parallel:.3f} s for {sequential:.3f} s of work"


def test_prefetch_overlaps_producer_and_consumer():
    def produce():
        for i in range(6):
            time.sleep(0.04)
            yield i

    def consume(ds):
        start = time.perf_counter()
        seen = []
        for x in ds:
            time.sleep(0.04)
            seen.append(x)
        return seen, time.perf_counter() - start

    seen, serial = consume(Dataset.from_generator(produce))
    assert seen == list(range(6)) and serial >= 0.48
    seen, overlapped = consume(Dataset.from_generator(produce).prefetch(2))
    assert seen == list(range(6))
    assert overlapped < 0.8 * serial, f"prefetched {overlapped:.3f} s, serial {serial:.3f} s"


def test_worker_exception_reaches_the_loop_with_its_traceback():
    def parse(x):
        if x == 3:
            raise ValueError(f"cannot parse record {x}")
        return int(x)

    got = []
    ds = Dataset.from_arrays(np.arange(6)).map(parse, num_workers=3)
    with pytest.raises(rill.DataError) as info:
        for x in ds:
            got.append(x)
    assert got == [0, 1, 2]  # everything before the failure, in order
    e = info.value
    text = str(e)
    assert e.op == "data.map"
    assert type(e.__cause__) is ValueError and str(e.__cause__) == "cannot parse record 3"
    assert "raised in a data worker" in text and "parse" in text
    assert 'raise ValueError(f"cannot parse record {x}")' in text  # the worker's own line
    assert e.location.startswith("test_data.py:")


def test_generator_exception_behind_prefetch_and_parallel_map_is_wrapped_once():
    def records():
        yield 1
        raise OSError("disk gone")

    ds = Dataset.from_generator(records).map(lambda x: x, num_workers=2).prefetch(2)
    with pytest.raises(rill.DataError) as info:
        list(ds)
    text = str(info.value)
    assert type(info.value.__cause__) is OSError
    assert text.count("raised in a data worker") == 1
    assert "disk gone" in text and 'raise OSError("disk gone")' in text
    assert info.value.location.startswith("test_data.py:")  # the loop, not a thread


def test_stopping_early_leaves_no_pipeline_threads(baseline):

    def slow(x):
        time.sleep(0.01)
        return x

    ds = Dataset.from_arrays(np.arange(1000)).map(slow, num_workers=3).prefetch(4)

    for i, _ in enumerate(ds):  # a loop that breaks
        if i == 0:
            assert threading.active_count() >= baseline + 5  # feeder, 3 workers, prefetch
        if i == 5:
            break
    assert wait_for_thread_count(baseline) == baseline

    it = iter(ds)  # an iterator closed by hand
    next(it)
    assert threading.active_count() > baseline
    it.close()
    assert wait_for_thread_count(baseline) == baseline

    it = iter(ds)  # ... and one that is garbage-collected
    next(it)
    assert threading.active_count() > baseline
    del it
    gc.collect()
    assert wait_for_thread_count(baseline) == baseline

    for x in ds.take(3):  # take stops its upstream
        pass
    assert wait_for_thread_count(baseline) == baseline


def test_a_failing_pipeline_leaves_no_threads(baseline):

    def fail(x):
        raise RuntimeError("boom")

    with pytest.raises(rill.DataError):
        list(Dataset.from_arrays(np.arange(100)).map(fail, num_workers=2).prefetch(2))
    assert wait_for_thread_count(baseline) == baseline


def test_pipeline_threads_are_daemons():
    seen = []
    ds = Dataset.from_arrays(np.arange(4)).map(
        lambda x: seen.append(threading.current_thread()) or x, num_workers=2).prefetch(1)
    list(ds)
    assert seen and all(t.daemon and t.name.startswith("rill.data.") for t in seen)


def test_workers_run_in_the_loops_grad_mode():
    modes = []
    ds = Dataset.from_arrays(np.arange(4)).map(
        lambda x: modes.append(rill.is_grad_enabled()) or x, num_workers=2).prefetch(1)
    with rill.no_grad():
        list(ds)
    list(ds)
    assert modes == [False] * 4 + [True] * 4


# ---- Queue ---------------------------------------------------------------------------------


def test_queue_is_fifo_and_counts_its_items():
    q = Queue(3)
    for item in "abc":
        q.put(item)
    assert len(q) == q.size() == 3 and q.capacity == 3
    assert [q.get(), q.get()] == ["a", "b"]
    assert len(q) == 1 and not q.closed
    q.put("d")
    q.close()
    assert q.closed
    assert list(q) == ["c", "d"]  # a closed queue is drained before it ends


def test_queue_timeouts_say_how_long_and_how_full():
    q = Queue(2)
    with pytest.raises(rill.DataError) as info:
        q.get(timeout=0.05)
    assert "timed out after 0.05 s" in str(info.value) and "capacity 2" in str(info.value)
    assert info.value.op == "data.Queue.get" and not isinstance(info.value, QueueClosed)

    q.put(1)
    q.put(2)
    start = time.perf_counter()
    with pytest.raises(rill.DataError) as info:
        q.put(3, timeout=0.05)
    assert time.perf_counter() - start >= 0.05
    assert "timed out after 0.05 s" in str(info.value) and "2 of capacity 2" in str(info.value)
    with pytest.raises(rill.ArgumentError):
        q.get(timeout=-1)
    with pytest.raises(rill.ArgumentError):
        Queue(0)


def test_a_full_queue_blocks_put_until_a_get():
    q = Queue(1)
    q.put("first")
    thread, outcome = in_thread(lambda: q.put("second"))
    time.sleep(0.05)
    assert thread.is_alive()  # still blocked on the full queue
    assert q.get() == "first"
    thread.join(timeout=2)
    assert not thread.is_alive() and "error" not in outcome
    assert q.get(timeout=1) == "second"


def test_close_wakes_blocked_getters_and_putters():
    empty = Queue(1)
    getter, got = in_thread(lambda: empty.get())
    full = Queue(1)
    full.put(0)
    putter, put = in_thread(lambda: full.put(1))
    time.sleep(0.05)
    assert getter.is_alive() and putter.is_alive()

    empty.close()
    full.close()
    getter.join(timeout=2)
    putter.join(timeout=2)
    assert not getter.is_alive() and not putter.is_alive()
    assert isinstance(got["error"], QueueClosed) and isinstance(got["error"], rill.DataError)
    assert isinstance(put["error"], QueueClosed) and "closed" in str(put["error"])
    with pytest.raises(rill.DataError, match="closed"):
        full.put(2)
    assert full.get() == 0  # what was queued before the close is still there
    with pytest.raises(QueueClosed):
        full.get()


def test_queue_hands_items_between_threads_in_order():
    q = Queue(2)

    def produce():
        for i in range(100):
            q.put(i)
        q.close()

    thread, outcome = in_thread(produce)
    assert list(q) == list(range(100))
    thread.join(timeout=2)
    assert "error" not in outcome

