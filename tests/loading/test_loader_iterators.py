"""Several iterators of one loader, and close(): both front ends.

Every ``iter(loader)`` is an epoch of its own, with its own worker thread and ring (torch's semantics):
``zip(loader, loader)``, nested loops and one loop per thread each give a whole epoch, batch for batch the
batches of ``prefetch=0`` run one epoch after the other, with features that stay right while the other
iterator runs. ``close()`` ends every live iterator and the persistent worker processes, which are gone when
it returns. The thread cases run in a child process: a consumer left waiting for a worker that another
iterator stopped would block the process for ever.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import requires_cuda

REPO = Path(__file__).resolve().parents[2]
N, BATCH = 1100, 100  # 11 batches
THREADS = ("dgl-zerocopy-prefetch", "dgl-zerocopy-pyg-prefetch")


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name in THREADS]


def _children(besides: frozenset[int] = frozenset()) -> list:
    """This process's children but those of ``besides`` (pids): what earlier tests left running is not ours."""
    import psutil

    return [p for p in psutil.Process().children(recursive=True) if p.pid not in besides]


def _wait_gone(processes: list, within: float = 30.0) -> list:
    """The processes of ``processes`` still running (not zombies) once they have ended or ``within``
    seconds have passed. Polled, not reaped: torch's multiprocessing reaps its own children."""
    import psutil

    def running(p) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + within
    while True:
        alive = [p for p in processes if running(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


#: Two threads, each one epoch of ``loader``: ``b`` starts once ``a`` has a batch and both are alive at their
#: second batch; ``checked_batches()`` (defined by the test's code) yields (features right, seed ids) per batch.
TWO_THREADS = """
first_batch, both = threading.Event(), threading.Barrier(2, timeout=60)
results = {}
def run(name):
    if name == "b":
        first_batch.wait(60)  # b's epoch starts while a's runs
    seen = []
    for i, (right, seeds) in enumerate(checked_batches()):
        first_batch.set()
        if i == 1:
            both.wait()  # both iterators are alive here
        assert right, name
        seen.append(seeds)
    results[name] = torch.sort(torch.cat(seen)).values
threads = [threading.Thread(target=run, args=(n,)) for n in "ab"]
[t.start() for t in threads]
[t.join() for t in threads]
assert sorted(results) == ["a", "b"], results
assert all(torch.equal(v, torch.arange(N)) for v in results.values()), "each thread a whole epoch"
print("ok", len(loader))
"""


def _run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True, encoding="utf-8", timeout=timeout)


# -- the DGL route -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dgl_setup():
    dgl = pytest.importorskip("dgl")
    gen = torch.Generator().manual_seed(0)
    graph = dgl.graph((torch.randint(0, N, (6000,), generator=gen), torch.randint(0, N, (6000,), generator=gen)), num_nodes=N)
    return graph, torch.randn(N, 8, generator=gen), torch.arange(N) % 7


def _dgl_loader(setup, prefetch: int, seeds: int = N, **kw):
    import dgl

    from dgl_zerocopy.loading.loader import DataLoader

    graph, feat, label = setup
    sampler = dgl.dataloading.MultiLayerFullNeighborSampler(2)  # deterministic: batches comparable across runs
    return DataLoader(
        graph,
        torch.arange(seeds),
        sampler,
        features={"feat": feat},
        labels={"label": label},
        device="cpu",
        batch_size=BATCH,
        shuffle=True,
        seed=0,
        prefetch=prefetch,
        **kw,
    )


def _dgl_batch(setup, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted input nodes, output nodes) of a batch, after checking its features and labels."""
    _, feat, label = setup
    input_nodes, output_nodes, blocks = batch
    assert torch.equal(blocks[0].srcdata["feat"], feat[input_nodes]), "features of other rows: a buffer was shared"
    assert torch.equal(blocks[-1].dstdata["label"], label[output_nodes])
    return torch.sort(input_nodes).values, output_nodes.clone()


def _dgl_serial_epochs(setup, count: int, seeds: int = N, **kw) -> list[list]:
    """``count`` epochs of a prefetch=0 loader, one after the other (epoch e: seed 0's order e)."""
    loader = _dgl_loader(setup, 0, seeds, **kw)
    return [[_dgl_batch(setup, b) for b in loader] for _ in range(count)]


def _same(got: list, want: list) -> None:
    assert len(got) == len(want)
    for i, ((gi, go), (wi, wo)) in enumerate(zip(got, want)):
        assert torch.equal(go, wo) and torch.equal(gi, wi), f"batch {i} differs from prefetch=0's"


@pytest.mark.parametrize("prefetch", [0, 2])
def test_dgl_zip_gives_two_whole_epochs(dgl_setup, prefetch):
    loader = _dgl_loader(dgl_setup, prefetch)
    first, second = [], []
    for a, b in zip(loader, loader):
        first.append(_dgl_batch(dgl_setup, a))
        second.append(_dgl_batch(dgl_setup, b))  # a's features checked after b was made: its own buffers
    want = _dgl_serial_epochs(dgl_setup, 2)
    _same(first, want[0])
    _same(second, want[1])


@pytest.mark.parametrize("prefetch", [0, 2])
def test_dgl_nested_loops_give_every_inner_epoch(dgl_setup, prefetch):
    loader = _dgl_loader(dgl_setup, prefetch, seeds=5 * BATCH)
    outer, inner = [], []
    for a in loader:
        inner.append([_dgl_batch(dgl_setup, b) for b in loader])
        outer.append(_dgl_batch(dgl_setup, a))  # checked after the inner epoch ran: still its own rows
    assert len(outer) == len(loader) == 5 and sum(len(e) for e in inner) == 25
    want = _dgl_serial_epochs(dgl_setup, 1 + len(loader), seeds=5 * BATCH)
    _same(outer, want[0])
    for e, epoch in enumerate(inner):
        _same(epoch, want[1 + e])


@pytest.mark.slow
def test_dgl_two_threads_each_get_a_whole_epoch():
    result = _run_child(
        textwrap.dedent(
            f"""
        import threading, torch, dgl
        from dgl_zerocopy.loading.loader import DataLoader
        gen = torch.Generator().manual_seed(0)
        g = dgl.graph((torch.randint(0, {N}, (6000,), generator=gen), torch.randint(0, {N}, (6000,), generator=gen)), num_nodes={N})
        feat = torch.randn({N}, 8, generator=gen)
        loader = DataLoader(g, torch.arange({N}), dgl.dataloading.MultiLayerFullNeighborSampler(2), features={{"feat": feat}},
                            device="cpu", batch_size={BATCH}, prefetch=2, seed=0, shuffle=True)
        N = {N}
        def checked_batches():
            for input_nodes, output_nodes, blocks in loader:
                yield torch.equal(blocks[0].srcdata["feat"], feat[input_nodes]), output_nodes
        """
        )
        + TWO_THREADS
    )
    assert result.returncode == 0 and "ok 11" in result.stdout, result.stdout + result.stderr


def test_dgl_zip_over_persistent_workers_and_close_ends_them(dgl_setup):
    pytest.importorskip("psutil")
    earlier = frozenset(p.pid for p in _children())
    loader = _dgl_loader(dgl_setup, 2, num_workers=2, persistent_workers=True)
    try:
        first, second = [], []
        for a, b in zip(loader, loader):  # the second iterator gets processes of its own for its epoch
            first.append(_dgl_batch(dgl_setup, a))
            second.append(_dgl_batch(dgl_setup, b))
        want = _dgl_serial_epochs(dgl_setup, 2, num_workers=2)  # the processes' order of batches, DGL's
        _same(first, want[0])
        _same(second, want[1])
        running = _children(earlier)
        assert running, "persistent processes outlive the epoch"
        loader.close()
        assert not _wait_gone(running), "close() ends the persistent processes"
    finally:
        loader.close()


def _close_ends_each(loader, threads, iterators) -> None:
    """``loader.close()`` ends each live iterator: its worker thread ends (no wait for ever), ``next`` stops."""
    loader.close()
    for t in threads:
        t.join()
    for it in iterators:
        with pytest.raises(StopIteration):
            next(it)


def test_dgl_close_ends_every_live_iterator(dgl_setup):
    loader = _dgl_loader(dgl_setup, 2)
    a, b = iter(loader), iter(loader)
    next(a), next(b)
    threads = [a.thread, b.thread]
    _close_ends_each(loader, threads, (a, b))
    assert sum(1 for _ in loader) == len(loader), "the loader iterates again after close()"


def test_dgl_two_live_iterators_keep_the_stream_protocol_each_on_its_own_ring(dgl_setup, monkeypatch):
    """On the CPU model of CUDA streams (tests/stream_model.py): each iterator's worker fills its own
    ring on its own side stream, reuses a slot only after its release, and every tensor handed over
    outside a slot is record_stream-ed on the consumer's stream."""
    import dgl
    from stream_model import CudaModel, ModelStream

    from dgl_zerocopy import FeatureStore
    from dgl_zerocopy.loading.loader import DataLoader

    model = CudaModel().install(monkeypatch)
    graph, feat, label = dgl_setup
    store = FeatureStore(feat, backend="cpu", device="cpu")
    sampler = dgl.dataloading.NeighborSampler([4, 2])
    loader = DataLoader(graph, torch.arange(N), sampler, features={"feat": store}, labels={"label": label}, device="cpu", batch_size=BATCH, seed=0)
    rings = [loader._rings.take(), loader._rings.take()]  # two rings made now, each with the side stream a GPU gives
    for i, ring in enumerate(rings):
        ring.side = ModelStream(f"side{i}", model)
        loader._rings.give_back(ring)
    a, b = iter(loader), iter(loader)
    taken = 0
    for it, ring in itertools.cycle([(a, rings[0]), (b, rings[1])]):  # zip's order, checked at each hand-over
        try:
            input_nodes, output_nodes, blocks = next(it)
        except StopIteration:
            break
        model.take(ring, [blocks[0].srcdata["feat"]], [input_nodes, output_nodes, *blocks, blocks[-1].dstdata["label"]])
        assert torch.equal(blocks[0].srcdata["feat"], feat[input_nodes])
        taken += 1
    b.close()
    assert taken == 2 * len(loader) and model.violations == []
    waits = {stream for stream, event in model.waits if any(event is slot.released for ring in rings for slot in ring.slots)}
    assert waits == {"side0", "side1"}, "each worker waits on its own ring's slots, on its own stream"


@pytest.mark.gpu
@requires_cuda
def test_dgl_zip_on_a_gpu_keeps_each_iterators_features(dgl_setup):
    import dgl

    from dgl_zerocopy.loading.dgl_options import dgl_has_cuda
    from dgl_zerocopy.loading.loader import DataLoader

    graph, feat, _ = dgl_setup
    feat = feat.clone()  # a copy of its own: no other test's store has pinned this memory
    loader = DataLoader(
        graph,
        torch.arange(N),
        dgl.dataloading.MultiLayerFullNeighborSampler(2),
        features={"feat": feat},
        device="cuda",
        batch_size=BATCH,
        prefetch=2,
        seed=0,
        blocks="dgl" if dgl_has_cuda() else "device",
    )
    count = 0
    for a, b in zip(loader, loader):
        torch.cuda._sleep(50_000_000)  # the step still runs while both workers fill their rings
        for input_nodes, _, blocks in (a, b):
            assert torch.equal(blocks[0].srcdata["feat"].cpu(), feat[input_nodes.cpu()])
        count += 1
    assert count == len(loader)
    loader.close()


# -- the PyG route -------------------------------------------------------------------------------------


def _pyg_data():
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(0)
    edge_index = torch.stack([torch.randint(0, N, (6000,), generator=gen), torch.randint(0, N, (6000,), generator=gen)])
    return Data(x=torch.randn(N, 8, generator=gen), edge_index=edge_index, y=torch.arange(N) % 7)


def _pyg_loader(kind: str, data, prefetch: int, seeds: int = N, **kw):
    from dgl_zerocopy.pyg import LinkNeighborLoader, NeighborLoader

    # Every in-edge (-1): the batches do not depend on the sampler's draws, which threads interleave.
    if kind == "node":
        return NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=torch.arange(seeds), batch_size=BATCH, prefetch=prefetch, **kw)
    return LinkNeighborLoader(data, num_neighbors=[-1], edge_label_index=data.edge_index[:, :seeds], batch_size=BATCH, prefetch=prefetch, **kw)


def _pyg_batch(data, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(n_id, global edges) of a batch, after checking its features."""
    assert torch.equal(batch.x, data.x[batch.n_id]), "features of other rows"
    return batch.n_id.clone(), batch.n_id[batch.edge_index]


def _same_pyg(got: list, want: list) -> None:
    assert len(got) == len(want)
    for i, ((gn, ge), (wn, we)) in enumerate(zip(got, want)):
        assert torch.equal(gn, wn) and torch.equal(ge, we), f"batch {i} differs from prefetch=0's"


@pytest.mark.parametrize("kind", ["node", "link"])
def test_pyg_zip_gives_two_whole_epochs(kind):
    data = _pyg_data()
    want, serial = [[], []], _pyg_loader(kind, data, 0)
    for a, b in zip(serial, serial):
        want[0].append(_pyg_batch(data, a))
        want[1].append(_pyg_batch(data, b))
    loader = _pyg_loader(kind, data, 2)
    got = [[], []]
    for a, b in zip(loader, loader):
        got[0].append(_pyg_batch(data, a))
        got[1].append(_pyg_batch(data, b))
    assert len(got[0]) == len(loader) == 11
    _same_pyg(got[0], want[0])
    _same_pyg(got[1], want[1])


def test_pyg_nested_loops_give_every_inner_epoch():
    data = _pyg_data()
    want = [_pyg_batch(data, b) for b in _pyg_loader("node", data, 0, seeds=5 * BATCH)]
    loader = _pyg_loader("node", data, 2, seeds=5 * BATCH)
    outer, inner = [], []
    for a in loader:
        inner.append([_pyg_batch(data, b) for b in loader])
        outer.append(_pyg_batch(data, a))
    assert len(outer) == len(loader) == 5 and sum(len(e) for e in inner) == 25
    _same_pyg(outer, want)
    for epoch in inner:
        _same_pyg(epoch, want)


@pytest.mark.slow
def test_pyg_two_threads_each_get_a_whole_epoch():
    pytest.importorskip("torch_geometric")
    result = _run_child(
        textwrap.dedent(
            f"""
        import threading, torch
        from torch_geometric.data import Data
        from dgl_zerocopy.pyg import NeighborLoader
        gen = torch.Generator().manual_seed(0)
        data = Data(x=torch.randn({N}, 8, generator=gen), edge_index=torch.randint(0, {N}, (2, 6000), generator=gen))
        loader = NeighborLoader(data, num_neighbors=[3, 2], batch_size={BATCH}, prefetch=2)
        N = {N}
        def checked_batches():
            for batch in loader:
                yield torch.equal(batch.x, data.x[batch.n_id]), batch.n_id[: batch.batch_size]
        """
        )
        + TWO_THREADS
    )
    assert result.returncode == 0 and "ok 11" in result.stdout, result.stdout + result.stderr


def test_pyg_close_ends_persistent_workers():
    pytest.importorskip("psutil")
    data = _pyg_data()
    earlier = frozenset(p.pid for p in _children())
    loader = _pyg_loader("node", data, 0, num_workers=2, persistent_workers=True)
    try:
        assert sum(1 for _ in loader) == len(loader)
        running = _children(earlier)
        assert len(running) >= 2, "persistent processes outlive the epoch"
        loader.close()
        assert not _wait_gone(running), "close() ends the persistent processes"
    finally:
        loader.close()


def test_pyg_close_ends_every_live_iterator():
    data = _pyg_data()
    loader = _pyg_loader("node", data, 2)
    before = set(_prefetch_threads())
    a, b = iter(loader), iter(loader)
    next(a), next(b)
    threads = [t for t in _prefetch_threads() if t.name == THREADS[1] and t not in before and t.is_alive()]
    assert len(threads) == 2, "one worker per iterator"
    _close_ends_each(loader, threads, (a, b))


@pytest.mark.gpu
@requires_cuda
def test_pyg_zip_on_a_gpu_keeps_each_iterators_features():
    from dgl_zerocopy.pyg import NeighborLoader

    data = _pyg_data()
    loader = NeighborLoader(data, num_neighbors=[4, 2], batch_size=BATCH, device="cuda", prefetch=2)
    count = 0
    for a, b in zip(loader, loader):
        torch.cuda._sleep(50_000_000)  # the step still runs while both workers fill their rings
        for batch in (a, b):
            assert torch.equal(batch.x.cpu(), data.x[batch.n_id.cpu()])
        count += 1
    assert count == len(loader)
    loader.close()


# -- the worker itself ---------------------------------------------------------------------------------


def test_a_consumer_waiting_in_next_wakes_when_another_thread_closes_the_worker():
    result = _run_child(
        """
        import threading
        from dgl_zerocopy.loading.prefetch import Prefetcher
        gate = threading.Event()
        p = Prefetcher(range(3), lambda x: gate.wait(60) and x, depth=1)
        outcome = []
        def consume():
            try:
                next(p)
            except StopIteration:
                outcome.append("stopped")
        t = threading.Thread(target=consume)
        t.start()
        threading.Timer(0.2, p.close).start()  # while the consumer waits for the first item
        t.join()
        gate.set()
        print(outcome)
        """,
        timeout=60,
    )
    assert result.returncode == 0 and "['stopped']" in result.stdout, result.stdout + result.stderr
