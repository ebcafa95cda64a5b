"""The DataLoader over features left in their file: every
batch's rows exact, the next batches' rows read from storage while earlier ones are gathered
(``read_ahead``), reservations given back when an epoch ends, is left or fails."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dgl_zerocopy import FeatureStore
from dgl_zerocopy.loading.loader import DataLoader
from dgl_zerocopy.store import StorageTier

dgl = pytest.importorskip("dgl")

NODES, DIM = 3000, 32


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    gen = torch.Generator().manual_seed(0)
    graph = dgl.graph((torch.randint(0, NODES, (30000,), generator=gen), torch.randint(0, NODES, (30000,), generator=gen)), num_nodes=NODES)
    path = tmp_path_factory.mktemp("loader-storage") / "feat.npy"
    np.save(path, np.random.default_rng(1).standard_normal((NODES, DIM)).astype(np.float32))
    return graph, path, np.load(path)


def _store(path, rows: int = 1500) -> FeatureStore:
    """A store whose host buffer holds about ``rows`` of the table's 3000 rows (a batch: <= 500)."""
    return FeatureStore(path, backend="cpu", device="cpu", storage=StorageTier(NODES * 4 + rows * (DIM * 4 + 30)))


def _loader(graph, store, **kw) -> DataLoader:
    kw.setdefault("prefetch", 2)
    return DataLoader(
        graph, torch.arange(1500), dgl.dataloading.NeighborSampler([3, 3]), features={"feat": store}, device="cpu", batch_size=50, shuffle=True, seed=0, **kw
    )


def _pins(store) -> int:
    return int(store._backend.buffer.pins.sum())


@pytest.mark.parametrize("prefetch", [0, 2])
def test_batches_are_exact_and_their_rows_were_read_ahead(setup, prefetch):
    graph, path, expect = setup
    with _store(path) as store:
        loader = _loader(graph, store, prefetch=prefetch)
        for _ in range(2):  # the second epoch starts with a buffer the first one filled
            store.reset_storage_stats()
            batches = 0
            for input_nodes, _, blocks in loader:
                assert torch.equal(blocks[0].srcdata["feat"], torch.from_numpy(expect[input_nodes.numpy()]))
                batches += 1
            stats = store.storage_stats()
            assert batches == 30
            assert stats["read_ahead_rows"] > 0 and stats["read_ahead_hits"] > 0, stats
            assert _pins(store) == 0, "every reservation given back at the epoch's end"
        loader.close()


def test_read_ahead_off_reads_at_the_gather(setup):
    graph, path, expect = setup
    with _store(path) as store:
        for input_nodes, _, blocks in _loader(graph, store, read_ahead=False):
            assert torch.equal(blocks[0].srcdata["feat"], torch.from_numpy(expect[input_nodes.numpy()]))
        stats = store.storage_stats()
        assert stats["read_ahead_rows"] == 0 and stats["storage_rows"] > 0


@pytest.mark.parametrize("prefetch", [0, 2])
def test_leaving_an_epoch_gives_back_the_batches_read_ahead(setup, prefetch):
    graph, path, _ = setup
    with _store(path) as store:
        loader = _loader(graph, store, prefetch=prefetch)
        for i, _ in enumerate(loader):
            if i == 2:
                break
        loader.close()  # stops the worker; the batches sampled ahead give their reads back
        assert _pins(store) == 0


def _fail_in_the_second_step(loader) -> None:
    for i, _ in enumerate(loader):
        if i == 1:
            raise RuntimeError("step failed")


def _run_two_epochs_at_once(loader) -> None:
    for _pair in zip(loader, loader):
        pass


@pytest.mark.parametrize(
    "run_epoch, error",
    [
        pytest.param(_fail_in_the_second_step, "step failed", id="an_error_in_the_step"),
        pytest.param(_run_two_epochs_at_once, "serves one epoch at a time", id="two_live_epochs_are_an_error_never_a_short_epoch"),
    ],
)
def test_an_error_mid_epoch_gives_back_the_reads_ahead(setup, run_epoch, error):
    graph, path, expect = setup
    with _store(path) as store:
        loader = _loader(graph, store)
        with pytest.raises(RuntimeError, match=error):
            run_epoch(loader)
        loader.close()
        assert _pins(store) == 0
        # The store goes on serving exact rows.
        for input_nodes, _, blocks in loader:
            assert torch.equal(blocks[0].srcdata["feat"], torch.from_numpy(expect[input_nodes.numpy()]))


def test_batches_sampled_in_worker_processes_are_read_ahead_too(setup):
    graph, path, expect = setup
    with _store(path) as store:
        loader = _loader(graph, store, num_workers=2)
        for input_nodes, _, blocks in loader:
            assert torch.equal(blocks[0].srcdata["feat"], torch.from_numpy(expect[input_nodes.numpy()]))
        loader.close()
        stats = store.storage_stats()
        assert stats["read_ahead_rows"] > 0 and stats["read_ahead_hits"] > 0, stats
        assert _pins(store) == 0


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_new_epoch_ends_an_unfinished_one_whose_reads_ahead_are_given_back(setup, prefetch):
    """``it = iter(loader)`` each epoch, leaving each after a few batches: the old epoch is still referenced
    when the new one starts, and its reservations must not starve the new one of host-buffer slots."""
    graph, path, expect = setup
    with _store(path, rows=700) as store:
        loader = _loader(graph, store, prefetch=prefetch)
        it = iter(loader)
        for _epoch in range(4):
            for _ in range(3):
                input_nodes, _, blocks = next(it)
                assert torch.equal(blocks[0].srcdata["feat"], torch.from_numpy(expect[input_nodes.numpy()]))
            old, it = it, iter(loader)
            assert old.closed and not old.worker_alive, "the unfinished epoch's worker stopped before the new one began"
            if prefetch == 0:
                assert _pins(store) == 0, "its reads ahead given back (the new epoch has read nothing yet)"
            with pytest.raises(RuntimeError, match="ended by a newer iter.*read_ahead=False"):
                next(old)
        loader.close()
        assert _pins(store) == 0


def test_without_read_ahead_two_live_epochs_are_each_whole(setup):
    """read_ahead=False: each iter() is an epoch of its own (with reads ahead two are an error, above)."""
    graph, path, _ = setup
    with _store(path) as store:
        loader = _loader(graph, store, read_ahead=False)
        assert sum(1 for _ in zip(loader, loader)) == len(loader)
        loader.close()
