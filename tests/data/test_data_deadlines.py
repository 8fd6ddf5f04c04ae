"""rill.data deadlines: a hanging generator or map function ends in a DataError naming the
stage, never a silent hang; Queue timeouts are validated (issue 14, finding 8).

Hanging user code waits on an Event that the test sets when it is done, so that no thread
outlives its test.
"""
import math
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import rill
from rill.data import Dataset, Queue

pytestmark = pytest.mark.timeout(20)

SMALL = 0.5  # the deadline the tests set, in seconds
LATE = 3.0   # an error later than this after its deadline would be a (partial) hang


@pytest.fixture
def release():
    """An Event that hanging user code waits on; set at the end of the test."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture(autouse=True)
def no_default_timeout():
    previous = rill.data.set_default_timeout(None)
    yield
    rill.data.set_default_timeout(previous)


def hanging_generator(release, after=2):
    def stuck():
        yield from range(after)
        release.wait()
        yield after
    return stuck


def timed_error(fn, deadline=SMALL):
    """Run fn(), which must raise DataError within [deadline, deadline + LATE]."""
    start = time.monotonic()
    with pytest.raises(rill.DataError) as info:
        fn()
    took = time.monotonic() - start
    assert deadline * 0.9 <= took <= deadline + LATE, took
    return info.value


# ---- iteration -------------------------------------------------------------------------------


def test_iter_timeout_on_a_hanging_generator(release):
    ds = Dataset.from_generator(hanging_generator(release))
    got = []

    def run():
        for x in ds.iter(timeout=SMALL):
            got.append(x)
    error = timed_error(run)
    assert got == [0, 1]
    text = str(error)
    assert "from_generator(stuck)" in text and "0.5 s" in text and "element 2" in text, text
    assert "generator stuck" in text, text  # what the stuck thread is doing


def test_iter_timeout_names_a_hanging_synchronous_map(release):
    def slow(x):
        if x == 3:
            release.wait()
        return x
    ds = Dataset.from_arrays(np.arange(6)).map(slow).batch(2)
    error = timed_error(lambda: list(ds.iter(timeout=SMALL)))
    assert "map function slow" in str(error) and "batch(2)" in str(error), str(error)


def test_iter_with_a_timeout_gives_the_same_elements():
    ds = Dataset.from_arrays(np.arange(10)).map(lambda x: 2 * x).batch(3)
    assert [b.tolist() for b in ds.iter(timeout=5)] == [b.tolist() for b in ds]
    assert [b.tolist() for b in ds.iter(timeout=None)] == [b.tolist() for b in ds]


def test_the_deadline_is_per_element_not_per_pass():
    def slow():
        for i in range(5):
            time.sleep(SMALL / 4)
            yield i
    assert list(Dataset.from_generator(slow).iter(timeout=SMALL)) == [0, 1, 2, 3, 4]


def test_exceptions_still_reach_the_loop_with_a_timeout():
    def bad(x):
        raise KeyError("nope")
    with pytest.raises(rill.DataError, match="KeyError"):
        list(Dataset.from_arrays([1, 2]).map(bad).iter(timeout=5))


# ---- map and prefetch ------------------------------------------------------------------------


@pytest.mark.parametrize("num_workers", [0, 1, 3])
def test_map_timeout_names_the_function_and_the_element(release, num_workers):
    def stuck_on_two(x):
        if x == 2:
            release.wait()
        return x
    ds = Dataset.from_arrays(np.arange(5)).map(stuck_on_two, num_workers=num_workers,
                                               timeout=SMALL)
    got = []

    def run():
        for x in ds:
            got.append(int(x))
    error = timed_error(run)
    assert got == [0, 1]
    assert error.op == "data.map"
    assert "map function stuck_on_two" in str(error) and "element 2" in str(error), str(error)


def test_map_timeout_when_its_input_hangs(release):
    ds = Dataset.from_generator(hanging_generator(release)).map(lambda x: x, num_workers=2,
                                                                timeout=SMALL)
    error = timed_error(lambda: list(ds))
    assert error.op == "data.map" and "generator stuck" in str(error), str(error)


def test_prefetch_timeout_names_its_upstream(release):
    ds = Dataset.from_generator(hanging_generator(release)).prefetch(2, timeout=SMALL)
    error = timed_error(lambda: list(ds))
    assert error.op == "data.prefetch"
    assert "prefetch(2" in str(error) and "generator stuck" in str(error), str(error)


def test_an_inner_timeout_reaches_the_loop_through_outer_stages(release):
    def stuck(x):
        if x == 1:
            release.wait()
        return x
    ds = Dataset.from_arrays(np.arange(4)).map(stuck, num_workers=2, timeout=SMALL) \
        .batch(2).prefetch(2)
    error = timed_error(lambda: list(ds))
    assert "map function stuck" in str(error), str(error)


@pytest.mark.parametrize("bad", [float("nan"), -1, 0, "1", True, [1]])
def test_stage_timeouts_are_validated(bad):
    ds = Dataset.from_arrays([1, 2])
    for make in (lambda: ds.map(abs, timeout=bad), lambda: ds.prefetch(1, timeout=bad),
                 lambda: ds.iter(timeout=bad)):
        with pytest.raises(rill.ArgumentError, match="timeout"):
            make()


def test_an_infinite_timeout_is_no_timeout():
    ds = Dataset.from_arrays([1, 2]).map(abs, num_workers=1, timeout=math.inf).prefetch(
        1, timeout=math.inf)
    assert [int(x) for x in ds.iter(timeout=math.inf)] == [1, 2]


# ---- the default -----------------------------------------------------------------------------


def test_set_default_timeout_applies_to_plain_for_loops(release):
    assert rill.data.set_default_timeout(SMALL) is None
    ds = Dataset.from_generator(hanging_generator(release))
    error = timed_error(lambda: [x for x in ds])
    assert "set_default_timeout" in str(error) and "generator stuck" in str(error), str(error)
    assert rill.data.set_default_timeout(None) == SMALL


def test_set_default_timeout_applies_to_map_and_prefetch(release):
    rill.data.set_default_timeout(SMALL)

    def stuck(x):
        release.wait()
    timed_error(lambda: list(Dataset.from_arrays([1]).map(stuck, num_workers=2)))
    timed_error(lambda: list(Dataset.from_generator(hanging_generator(release)).prefetch(1)))


def test_a_default_set_after_building_applies_to_the_next_pass(release):
    ds = Dataset.from_generator(hanging_generator(release)).prefetch(1)
    rill.data.set_default_timeout(SMALL)
    timed_error(lambda: list(ds))


def test_an_explicit_none_overrides_the_default():
    rill.data.set_default_timeout(0.05)

    def slow():
        time.sleep(0.3)
        yield 1
    assert list(Dataset.from_generator(slow).prefetch(1, timeout=None).iter(timeout=None)) == [1]


@pytest.mark.parametrize("bad", [float("nan"), -1, 0, "1", True])
def test_set_default_timeout_validates(bad):
    with pytest.raises(rill.ArgumentError, match="set_default_timeout"):
        rill.data.set_default_timeout(bad)


def test_set_default_timeout_inf_means_none():
    rill.data.set_default_timeout(math.inf)
    assert rill.data.set_default_timeout(None) is None


# ---- after a timeout -------------------------------------------------------------------------


def test_a_timeout_leaves_no_spinning_thread_and_threads_end_once_released(release):
    before = {t for t in threading.enumerate()}
    ds = Dataset.from_generator(hanging_generator(release)).map(lambda x: x, num_workers=2) \
        .prefetch(2, timeout=SMALL)
    timed_error(lambda: list(ds))
    cpu = time.process_time()
    time.sleep(0.5)
    assert time.process_time() - cpu < 0.2  # blocked threads wait, they do not poll
    release.set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and set(threading.enumerate()) - before:
        time.sleep(0.01)
    assert not [t.name for t in set(threading.enumerate()) - before]


def test_a_process_with_a_stuck_pipeline_still_exits():
    script = textwrap.dedent("""
        import threading, rill
        from rill.data import Dataset
        def stuck():
            yield 1
            threading.Event().wait()
        try:
            list(Dataset.from_generator(stuck).map(abs, num_workers=2).prefetch(2, timeout=0.3))
        except rill.DataError:
            print("timed out")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "timed out" in done.stdout, done.stderr


# ---- Queue -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), -1, -0.5, float("-inf"), "1", True, [1], 1j])
def test_queue_refuses_bad_timeouts_naming_the_method(bad):
    q = Queue(1)
    with pytest.raises(rill.ArgumentError) as info:
        q.get(timeout=bad)
    assert info.value.op == "data.Queue.get" and "timeout" in str(info.value)
    q.put(1)
    with pytest.raises(rill.ArgumentError) as info:
        q.put(2, timeout=bad)
    assert info.value.op == "data.Queue.put" and "timeout" in str(info.value)


@pytest.mark.parametrize("forever", [math.inf, 1e300, np.float64("inf"), 2**80])
def test_queue_infinite_or_huge_timeouts_wait_like_none(forever):
    q = Queue(1)
    got = []
    getter = threading.Thread(target=lambda: got.append(q.get(timeout=forever)), daemon=True)
    getter.start()
    time.sleep(0.05)
    q.put("x", timeout=forever)
    getter.join(5)
    assert got == ["x"]
    q.put("y")
    putter = threading.Thread(target=lambda: q.put("z", timeout=forever), daemon=True)
    putter.start()
    time.sleep(0.05)
    assert putter.is_alive()  # waiting on the full queue, not failed
    assert q.get() == "y"
    putter.join(5)
    assert q.get(timeout=1) == "z"


def test_queue_numpy_and_int_timeouts_work():
    q = Queue(1)
    for timeout in (np.float32(0.01), np.int64(0), 0):
        with pytest.raises(rill.DataError, match="timed out"):
            q.get(timeout=timeout)
