"""rill.utils.data against torch.utils.data on the same data: datasets, samplers,
default_collate, DataLoader (batches, lengths, shuffling, threads, errors, timeouts)."""
import collections
import math
import threading
import time

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import rill
import rill.utils.data as rud

pytestmark = pytest.mark.timeout(20)

Point = collections.namedtuple("Point", "x y")


def as_numpy(tree):
    """A batch with every rill or torch tensor made a NumPy array, structure kept."""
    if isinstance(tree, (rill.Tensor, torch.Tensor)):
        return np.asarray(tree)
    if isinstance(tree, dict):
        return {k: as_numpy(v) for k, v in tree.items()}
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*map(as_numpy, tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(map(as_numpy, tree))
    return tree


def assert_same_batch(ours, theirs):
    """Same structure (container types included), same dtypes, same values."""
    assert type(ours) is type(theirs) or (isinstance(ours, rill.Tensor)
                                          and isinstance(theirs, torch.Tensor)), \
        (type(ours), type(theirs))
    if isinstance(ours, rill.Tensor):
        assert str(ours.dtype) == str(theirs.dtype).replace("torch.", "")
        np.testing.assert_array_equal(np.asarray(ours), theirs.numpy())
    elif isinstance(ours, dict):
        assert ours.keys() == theirs.keys()
        for k in ours:
            assert_same_batch(ours[k], theirs[k])
    elif isinstance(ours, (list, tuple)):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert_same_batch(a, b)
    else:
        assert ours == theirs


def pair_datasets(n=10, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    y = rng.integers(0, 5, n)
    return (rud.TensorDataset(rill.tensor(x), rill.tensor(y)),
            tud.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)))


class Samples:
    """A map-style dataset of nested samples: the same class serves both libraries."""

    def __init__(self, n=7):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"image": np.full((2, 2), i, np.float32), "label": i, "weight": i / 2,
                "flag": i % 2 == 0, "name": f"s{i}", "pair": (np.int32(i), [i, -i]),
                "point": Point(i, float(i))}


# ---- datasets ----------------------------------------------------------------------------------


def test_tensor_dataset_and_concat_index_like_torch():
    ours, theirs = pair_datasets(5)
    assert len(ours) == len(theirs) == 5
    assert_same_batch(list(ours[3]), list(theirs[3]))
    both, tboth = ours + ours, theirs + theirs
    assert isinstance(both, rud.ConcatDataset)
    assert both.cumulative_sizes == tboth.cumulative_sizes == [5, 10]
    for i in (0, 4, 5, 9, -1, -10):
        assert_same_batch(list(both[i]), list(tboth[i]))
    with pytest.raises(rill.IndexingError, match="out of range"):
        both[10]
    with pytest.raises(rill.ShapeError, match="Size mismatch"):
        rud.TensorDataset(rill.zeros(3), rill.zeros(4))
    with pytest.raises(rill.ArgumentError, match="empty"):
        rud.ConcatDataset([])


def test_subset_and_chain():
    data = list(range(10, 20))
    sub, tsub = rud.Subset(data, [3, 1, 4]), tud.Subset(data, [3, 1, 4])
    assert len(sub) == 3 and [sub[i] for i in range(3)] == [tsub[i] for i in range(3)]

    class Count(rud.IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n))

    assert list(Count(2) + Count(3)) == [0, 1, 0, 1, 2]


@pytest.mark.parametrize("lengths", [[3, 7], [0.33, 0.33, 0.34], [0.5, 0.5], [10, 0]])
def test_random_split_sizes_disjoint_and_seeded(lengths):
    n = 11 if lengths == [0.5, 0.5] else 10
    data = list(range(n))
    with pytest.warns(UserWarning) if 0 in lengths and isinstance(lengths[0], float) else \
            _nothing():
        parts = rud.random_split(data, lengths, generator=rill.Generator(1))
    tparts = tud.random_split(data, lengths, generator=torch.Generator().manual_seed(1))
    assert [len(p) for p in parts] == [len(p) for p in tparts]
    seen = [x for p in parts for x in p]
    assert sorted(seen) == data
    again = rud.random_split(data, lengths, generator=rill.Generator(1))
    assert [list(p) for p in again] == [list(p) for p in parts]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_random_split_errors():
    with pytest.raises(rill.ArgumentError, match="does not equal the length"):
        rud.random_split(range(10), [3, 3])
    with pytest.raises(rill.ArgumentError, match="rill.Generator"):
        rud.random_split(range(10), [5, 5], generator=torch.Generator())


# ---- samplers ----------------------------------------------------------------------------------


def test_sequential_and_batch_sampler_match_torch():
    for drop_last in (False, True):
        ours = rud.BatchSampler(rud.SequentialSampler(range(10)), 3, drop_last)
        theirs = tud.BatchSampler(tud.SequentialSampler(range(10)), 3, drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
    with pytest.raises(rill.ArgumentError, match="batch_size"):
        rud.BatchSampler(range(3), 0, False)
    with pytest.raises(rill.ArgumentError, match="drop_last"):
        rud.BatchSampler(range(3), 2, "no")


def test_random_sampler_semantics():
    data = range(6)
    s = rud.RandomSampler(data, generator=rill.Generator(0))
    first, second = list(s), list(s)
    assert sorted(first) == sorted(second) == list(range(6)) and first != second
    assert list(rud.RandomSampler(data, generator=rill.Generator(0))) == first
    # More samples than data without replacement: whole permutations, then a part.
    longer = list(rud.RandomSampler(data, num_samples=15, generator=rill.Generator(0)))
    assert len(longer) == 15 and sorted(longer[:6]) == sorted(longer[6:12]) == list(range(6))
    assert len(set(longer[12:])) == 3
    with_repl = rud.RandomSampler(data, replacement=True, num_samples=50,
                                  generator=rill.Generator(0))
    drawn = list(with_repl)
    assert len(with_repl) == 50 and len(drawn) == 50 and set(drawn) <= set(range(6))
    assert len(set(drawn)) < 50  # repeats
    with pytest.raises(rill.ArgumentError, match="num_samples"):
        rud.RandomSampler(data, num_samples=0)
    with pytest.raises(rill.ArgumentError, match="replacement"):
        rud.RandomSampler(data, replacement=1)
    with pytest.raises(rill.ArgumentError, match="pass rill.Generator"):
        rud.RandomSampler(data, generator=torch.Generator())


def test_subset_random_and_weighted_samplers():
    s = rud.SubsetRandomSampler([10, 20, 30, 40], generator=rill.Generator(2))
    assert sorted(s) == [10, 20, 30, 40] and len(s) == 4
    w = rud.WeightedRandomSampler([0.0, 1.0, 3.0], num_samples=4000,
                                  generator=rill.Generator(0))
    counts = np.bincount(list(w), minlength=3)
    assert counts[0] == 0 and abs(counts[2] / counts[1] - 3) < 0.4
    no_repl = list(rud.WeightedRandomSampler([1, 1, 1, 0], 3, replacement=False,
                                             generator=rill.Generator(0)))
    assert sorted(no_repl) == [0, 1, 2]
    with pytest.raises(rill.ArgumentError, match="without replacement"):
        rud.WeightedRandomSampler([1, 0], 2, replacement=False)
    with pytest.raises(rill.ShapeError, match="1d"):
        rud.WeightedRandomSampler([[1.0, 2.0]], 2)


# ---- default_collate ---------------------------------------------------------------------------


def test_default_collate_matches_torch_on_nested_samples():
    samples = [Samples()[i] for i in range(3)]
    assert_same_batch(rud.default_collate(samples), tud.default_collate(samples))


@pytest.mark.parametrize("samples", [
    [1.5, 2.5], [1, 2], [True, False], [np.float32(1), np.float32(2)], ["a", "b"],
    [b"x", b"y"], [(1, "a"), (2, "b")], [[1, 2], [3, 4]], [np.array(3.0), np.array(4.0)],
    [np.arange(3, dtype=np.int32), np.arange(3, dtype=np.int32)],
    [Point(1, 2.0), Point(3, 4.0)],
])
def test_default_collate_leaves_match_torch(samples):
    assert_same_batch(rud.default_collate(samples), tud.default_collate(samples))


def test_default_collate_stacks_rill_tensors_and_converts():
    batch = rud.default_collate([rill.ones(2, dtype=rill.float64),
                                 rill.zeros(2, dtype=rill.float64)])
    assert batch.shape == (2, 2) and batch.dtype == rill.float64
    sample = {"a": np.arange(2), "b": (np.ones(1), 3), "c": "s"}
    assert_same_batch(rud.default_convert(sample), tud.default_convert(sample))


@pytest.mark.parametrize("samples, match", [
    ([None, None], "found <class 'NoneType'>"),
    ([np.array(["a"]), np.array(["b"])], "found <U1"),
    ([[1, 2], [3]], "equal size"),
    ([np.zeros(2), np.zeros(3)], r"shape \(2,\) in sample 0 but \(3,\)"),
    ([{"a": 1}, {"b": 1}], "equal structures"),
])
def test_default_collate_errors(samples, match):
    with pytest.raises(rill.DataError, match=match):
        rud.default_collate(samples)


# ---- DataLoader --------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size, drop_last", [(1, False), (3, False), (3, True), (10, True),
                                                   (4, False)])
def test_sequential_loader_batches_equal_torch(batch_size, drop_last):
    ours, theirs = pair_datasets(10)
    loader = rud.DataLoader(ours, batch_size=batch_size, drop_last=drop_last)
    tloader = tud.DataLoader(theirs, batch_size=batch_size, drop_last=drop_last)
    assert len(loader) == len(tloader)
    got, want = list(loader), list(tloader)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert_same_batch(a, b)


def test_loader_of_nested_samples_and_no_batching_match_torch():
    for kwargs in (dict(batch_size=3), dict(batch_size=None)):
        got = list(rud.DataLoader(Samples(), **kwargs))
        want = list(tud.DataLoader(Samples(), **kwargs))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert_same_batch(a, b)


def test_custom_collate_fn_and_batch_sampler():
    ours, theirs = pair_datasets(10)
    sampler = [[0, 9], [3], [4, 5, 6]]
    got = list(rud.DataLoader(ours, batch_sampler=sampler, collate_fn=lambda b: len(b)))
    assert got == [2, 1, 3]
    assert len(rud.DataLoader(ours, batch_sampler=sampler)) == 3
    for a, b in zip(rud.DataLoader(ours, batch_sampler=sampler),
                    tud.DataLoader(theirs, batch_sampler=sampler)):
        assert_same_batch(a, b)


def labels(loader):
    return [y.tolist() for _, y in loader]


def test_shuffle_differs_per_epoch_and_repeats_with_seed():
    ds = rud.TensorDataset(rill.arange(20.0), rill.arange(20))
    rill.manual_seed(3)
    loader = rud.DataLoader(ds, batch_size=5, shuffle=True)
    epoch1, epoch2 = labels(loader), labels(loader)
    assert epoch1 != epoch2
    assert sorted(sum(epoch1, [])) == sorted(sum(epoch2, [])) == list(range(20))
    rill.manual_seed(3)
    assert labels(loader) == epoch1 and labels(loader) == epoch2
    g = rill.Generator(7)
    seeded = [labels(rud.DataLoader(ds, batch_size=5, shuffle=True, generator=g))
              for _ in range(2)]
    g.manual_seed(7)
    assert labels(rud.DataLoader(ds, batch_size=5, shuffle=True, generator=g)) == seeded[0]
    assert seeded[0] != seeded[1]
    with pytest.raises(rill.ArgumentError, match="pass rill.Generator"):
        rud.DataLoader(ds, shuffle=True, generator=torch.Generator())


def test_shuffle_order_is_drawn_on_the_calling_thread_with_workers():
    # The order must not depend on when a worker thread reads the sampler: other draws
    # from the default generator right after iter() must not change it.
    ds = rud.TensorDataset(rill.arange(30))
    loader = rud.DataLoader(ds, batch_size=6, shuffle=True, num_workers=2)
    rill.manual_seed(0)
    it = iter(loader)
    rill.randn(100)
    first = [b[0].tolist() for b in it]
    rill.manual_seed(0)
    second = [b[0].tolist() for b in loader]
    assert first == second


def test_workers_give_the_same_batches_as_none():
    for kwargs in (dict(batch_size=3), dict(batch_size=4, drop_last=True),
                   dict(batch_size=None)):
        plain = list(rud.DataLoader(Samples(9), **kwargs))
        for workers, extra in ((2, {}), (3, dict(prefetch_factor=1, persistent_workers=True,
                                                 pin_memory=True))):
            threaded = list(rud.DataLoader(Samples(9), num_workers=workers, **kwargs, **extra))
            assert len(threaded) == len(plain)
            for a, b in zip(threaded, plain):
                np.testing.assert_equal(as_numpy(a), as_numpy(b))


def test_workers_are_threads_and_run_worker_init_fn_once_each():
    seen, names = [], set()

    class Where(rud.Dataset):
        def __len__(self):
            return 12

        def __getitem__(self, i):
            names.add(threading.current_thread().name)
            return i

    loader = rud.DataLoader(Where(), batch_size=2, num_workers=2,
                            worker_init_fn=seen.append)
    assert sum(len(b) for b in loader) == 12
    assert sorted(seen) == [0, 1] or seen in ([0], [1])  # a worker may find no work
    assert names and all(n.startswith("rill.data.map-worker") for n in names)


class Failing(rud.Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 7:
            raise KeyError("no sample seven")
        return i


def test_worker_errors_name_the_sample():
    with pytest.raises(rill.DataError, match=r"KeyError.*loading dataset\[7\].*no sample seven") \
            as info:
        for _ in rud.DataLoader(Failing(), batch_size=3, num_workers=2):
            pass
    assert isinstance(info.value.__cause__, KeyError)
    assert "Worker traceback" in info.value.message
    # Without workers the dataset's own error passes through, with a note naming the index.
    with pytest.raises(KeyError) as plain:
        list(rud.DataLoader(Failing(), batch_size=3))
    assert any("dataset[7]" in note for note in plain.value.__notes__)


def test_batches_before_a_failure_arrive():
    got = []
    with pytest.raises(rill.DataError):
        for b in rud.DataLoader(Failing(), batch_size=3, num_workers=2):
            got.append(b.tolist())
    assert got == [[0, 1, 2], [3, 4, 5]]


def test_timeout_maps_to_data_deadlines():
    release = threading.Event()

    class Slow(rud.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            if i == 2:
                release.wait(5)
            return i

    try:
        with pytest.raises(rill.DataError, match=r"timed out after 0.2 s.*element 2") as info:
            for _ in rud.DataLoader(Slow(), batch_size=1, num_workers=1, timeout=0.2):
                pass
        assert "running map function load on element 2" in info.value.message
    finally:
        release.set()


def test_iterable_dataset_batches_like_torch():
    class Stream(rud.IterableDataset):
        def __iter__(self):
            return iter(range(10))

        def __len__(self):
            return 10

    class TStream(tud.IterableDataset):
        def __iter__(self):
            return iter(range(10))

        def __len__(self):
            return 10

    for kwargs in (dict(batch_size=4), dict(batch_size=4, drop_last=True),
                   dict(batch_size=None)):
        want = list(tud.DataLoader(TStream(), **kwargs))
        for workers in (0, 2):
            loader = rud.DataLoader(Stream(), num_workers=workers, **kwargs)
            got = list(loader)
            assert len(loader) == len(tud.DataLoader(TStream(), **kwargs))
            assert len(got) == len(want)
            for a, b in zip(got, want):
                assert_same_batch(a, b)
    with pytest.raises(rill.ArgumentError, match="shuffle"):
        rud.DataLoader(Stream(), shuffle=True)


def test_loader_argument_errors():
    ds, _ = pair_datasets(4)
    cases = [
        (dict(sampler=[0, 1], shuffle=True), "mutually exclusive with shuffle"),
        (dict(batch_sampler=[[0]], batch_size=2), "batch_sampler option is mutually"),
        (dict(batch_size=None, drop_last=True), "drop_last"),
        (dict(num_workers=-1), "num_workers"),
        (dict(timeout=-1), "timeout"),
        (dict(prefetch_factor=2), "prefetch_factor"),
        (dict(persistent_workers=True), "persistent_workers"),
        (dict(batch_size=0), "batch_size"),
    ]
    for kwargs, match in cases:
        with pytest.raises(rill.ArgumentError, match=match):
            rud.DataLoader(ds, **kwargs)
    loader = rud.DataLoader(ds)
    with pytest.raises(rill.ArgumentError, match="should not be set"):
        loader.batch_size = 2


def test_breaking_early_stops_the_worker_threads():
    def workers_alive():
        return [t for t in threading.enumerate() if t.name.startswith("rill.data.map-worker")]

    loader = rud.DataLoader(Samples(50), batch_size=2, num_workers=2)
    for _ in loader:
        break
    deadline = time.monotonic() + 3
    while workers_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not workers_alive()


def test_import_spellings():
    import rill.utils.data as module
    from rill.utils.data import DataLoader
    assert module.DataLoader is DataLoader is rill.utils.data.DataLoader


def test_prefetch_factor_bounds_how_far_workers_run_ahead():
    def loaded_ahead(prefetch_factor):
        calls = []

        class Counted(rud.Dataset):
            def __len__(self):
                return 40

            def __getitem__(self, i):
                calls.append(i)
                return i

        it = iter(rud.DataLoader(Counted(), batch_size=1, num_workers=2,
                                 prefetch_factor=prefetch_factor))
        next(it)
        time.sleep(0.2)  # the workers fill what the window allows, then wait
        ahead = len(calls)
        it.close()
        return ahead

    small, large = loaded_ahead(1), loaded_ahead(6)
    assert small <= 1 + 2 + 2  # the batch taken, the window, one being handed over per worker
    assert large >= 12


def test_data_map_in_flight_needs_workers():
    ds = rill.data.Dataset.from_arrays(np.arange(6))
    assert [int(x) for x in ds.map(lambda x: x + 1, num_workers=2, in_flight=1)] == \
        list(range(1, 7))
    with pytest.raises(rill.ArgumentError, match="in_flight .*num_workers > 0"):
        ds.map(lambda x: x, in_flight=2)
    with pytest.raises(rill.ArgumentError, match="in_flight must be an int >= 1"):
        ds.map(lambda x: x, num_workers=1, in_flight=0)


def test_loader_timeout_is_refused_like_the_queues():
    """torch's DataLoader compares timeout < 0, so NaN slips through there; here it is
    refused as rill.data refuses it, with None, a string and a bool."""
    ds, _ = pair_datasets(4)
    for bad in (float("nan"), -0.5, -math.inf, None, "3", True):
        with pytest.raises(rill.ArgumentError, match=r"timeout option should be seconds >= 0"):
            rud.DataLoader(ds, timeout=bad)
    for good in (0, 0.5, np.float64(2.0), math.inf):
        assert len(list(rud.DataLoader(ds, batch_size=2, timeout=good))) == 2
