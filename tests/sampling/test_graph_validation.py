"""Graph data is checked where it enters a sampler, before any kernel reads it: PyG's ``Data``/``HeteroData``
(their ``edge_index`` against the node counts), ``GraphStore`` puts, :class:`HopSampler`'s relations,
:class:`SamplingGraph` (the CSC the CUDA kernels and their emulator read), the seeds, and ``num_neighbors``.

Each refusal is one clear error naming the tensor, the first bad position and value, and the fix. The cases that
crashed the process before (a segfault, a corrupted heap) run in a child process, which must exit with 1 and
the error, not a signal. The check is one pass per graph: a second sampler over the same unchanged tensors
passes over nothing again, and nothing is checked per batch but the seeds and fanouts.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from dgl_zerocopy.data import graph_check
from dgl_zerocopy.sampling.cpu_hops import HopSampler, Relation
from dgl_zerocopy.sampling.graph import SamplingGraph
from dgl_zerocopy.sampling.neighbor import GpuNeighborSampler

pytest.importorskip("torch_geometric")

from torch_geometric.data import Data  # noqa: E402

from dgl_zerocopy.pyg import GraphStore, NeighborLoader  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_verdicts():
    graph_check.forget_checks()
    yield
    graph_check.forget_checks()


def user_data(bad: int | None = None, row: int = 0) -> Data:
    """The user's reproduction: 100 nodes, 300 random edges, every 7th id of ``row`` set to ``bad``."""
    generator = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 100, (2, 300), generator=generator)
    if bad is not None:
        edge_index[row, ::7] = bad
    return Data(x=torch.randn(100, 4, generator=generator), edge_index=edge_index, num_nodes=100)


def run_child(code: str) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter (a crash there cannot take the test run with it)."""
    prelude = "import warnings; warnings.filterwarnings('ignore')\nimport torch\nfrom torch_geometric.data import Data, HeteroData\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


def assert_refused(child: subprocess.CompletedProcess, *words: str) -> None:
    assert child.returncode == 1, f"exit code {child.returncode} (a negative one is a signal), stderr:\n{child.stderr[-3000:]}"
    last = child.stderr.strip().splitlines()[-1]
    for word in words:
        assert word in last, last


# -- the user's reproductions ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_edge_index_with_a_huge_source_id_is_refused_instead_of_crashing():
    child = run_child(
        """
        from dgl_zerocopy.pyg import NeighborLoader
        ei = torch.randint(0, 100, (2, 300)); ei[0, ::7] = 10**9
        d = Data(x=torch.randn(100, 4), edge_index=ei, num_nodes=100)
        next(iter(NeighborLoader(d, num_neighbors=[5, 5], batch_size=10)))
        """
    )
    assert_refused(child, "IndexError", "edge_index[0] (sources): id 1000000000 at position 0", "for 100 nodes", "num_nodes=100")


@pytest.mark.slow
def test_an_edge_index_with_a_destination_out_of_range_is_refused_instead_of_corrupting_the_heap():
    # PyG's own CSC conversion writes a count at each destination's id: this one broke the heap before.
    child = run_child(
        """
        from dgl_zerocopy.pyg import NeighborLoader
        ei = torch.randint(0, 100, (2, 300)); ei[1, 3::7] = 150
        d = Data(x=torch.randn(100, 4), edge_index=ei, num_nodes=100)
        next(iter(NeighborLoader(d, num_neighbors=[5, 5], batch_size=10)))
        """
    )
    assert_refused(child, "IndexError", "edge_index[1] (destinations): id 150 at position 3")


def test_a_source_id_just_past_the_nodes_is_refused_not_returned_in_a_batch():
    # Before: the batch came back with edge_index entries in the millions, for 55 nodes.
    with pytest.raises(IndexError, match=r"edge_index\[0\] \(sources\): id 150 at position 0 is out of range for 100 nodes") as caught:
        next(iter(NeighborLoader(user_data(150), num_neighbors=[5, 5], batch_size=10)))
    assert "drop or renumber those edges" in str(caught.value)


def test_a_negative_id_is_refused_not_wrapped_round_into_another_edge():
    data = Data(x=torch.randn(4, 2), edge_index=torch.tensor([[-1, 0, 3], [1, 2, 1]]), num_nodes=4)
    with pytest.raises(IndexError, match=r"edge_index\[0\] \(sources\): id -1 at position 0"):
        next(iter(NeighborLoader(data, num_neighbors=[2], batch_size=2)))


@pytest.mark.slow
def test_a_hetero_edge_index_is_checked_against_its_own_node_types():
    child = run_child(
        """
        from dgl_zerocopy.pyg import NeighborLoader
        d = HeteroData()
        d["paper"].x, d["author"].x = torch.randn(50, 4), torch.randn(20, 4)
        d["author", "writes", "paper"].edge_index = torch.stack([torch.randint(0, 20, (200,)), torch.randint(0, 50, (200,))])
        d["author", "writes", "paper"].edge_index[0, 5] = 20  # a paper id's range, not an author's
        next(iter(NeighborLoader(d, num_neighbors=[3, 3], batch_size=8, input_nodes="paper")))
        """
    )
    assert_refused(child, "IndexError", "data[('author', 'writes', 'paper')].edge_index[0] (sources): id 20 at position 5", "20 'author'")


# -- num_neighbors -------------------------------------------------------------------------------------------------


def test_a_fanout_of_2_to_the_31_is_refused_by_name_instead_of_a_memory_error():
    with pytest.raises(ValueError) as caught:
        next(iter(NeighborLoader(user_data(), num_neighbors=[2**31, 5], batch_size=10)))
    assert "num_neighbors[0]" in str(caught.value) and "2147483648" in str(caught.value) and "-1 for every in-edge" in str(caught.value)


@pytest.mark.parametrize("bad", [-2, 1.5, "3"], ids=["below-minus-one", "float", "string"])
def test_a_fanout_below_minus_one_or_not_an_int_is_refused_by_the_pyg_loader(bad):
    # Before: -2 was taken for -1 (every in-edge) without a word.
    with pytest.raises(ValueError, match=rf"num_neighbors\[1\] must be an int .* but got {bad!r}"):
        NeighborLoader(user_data(), num_neighbors=[5, bad], batch_size=10)


def test_hetero_num_neighbors_name_the_edge_type():
    from dgl_zerocopy.sampling.fanout import MAX_FANOUT, check_num_neighbors

    with pytest.raises(ValueError, match=r"num_neighbors\[\('a', 'to', 'b'\)\]\[0\] .* but got 2147483648"):
        check_num_neighbors({("a", "to", "b"): [2**31]})
    check_num_neighbors({("a", "to", "b"): [MAX_FANOUT, -1, 0]})


def test_the_gpu_and_snapshot_samplers_refuse_a_fanout_past_2_to_the_31():
    with pytest.raises(ValueError, match=r"fanouts\[1\] must be an int .* but got 2147483648"):
        GpuNeighborSampler([5, 2**31], device="reference")
    pytest.importorskip("dgl")
    from dgl_zerocopy.sampling import SnapshotSampler

    with pytest.raises(ValueError, match=r"fanouts\[0\] must be an int >= 0, but got 2147483648"):
        SnapshotSampler([2**31])


def test_the_hop_sampler_refuses_a_bad_fanout_per_call():
    sampler = HopSampler({"r": Relation(np.array([0, 1, 2]), np.array([1, 0]), "n", "n")}, {"n": 2})
    with pytest.raises(ValueError, match=r"fanouts\['r'\]\[1\] .* but got -3"):
        sampler.sample({"n": np.array([0])}, {"r": [1, -3]})


def test_the_largest_fanout_samples_like_minus_one_without_a_huge_scratch():
    # The compiled picks sized their scratch by the fanout (16 GB and more here); NumPy's path never did.
    pytest.importorskip("numba")
    generator = torch.Generator().manual_seed(1)
    dst = torch.randint(0, 40, (400,), generator=generator).sort().values
    indptr = np.concatenate([[0], np.cumsum(np.bincount(dst.numpy(), minlength=40))])
    relation = Relation(indptr, torch.randint(0, 40, (400,), generator=generator).numpy(), "n", "n")
    sampler = HopSampler({"r": relation}, {"n": 40}, compiled=True)
    seeds = {"n": np.arange(10)}
    every = sampler.sample(seeds, {"r": [-1, -1]}, rng=np.random.default_rng(0))
    largest = sampler.sample(seeds, {"r": [2**31 - 1, 2**31 - 1]}, rng=np.random.default_rng(0))
    assert np.array_equal(every.nodes["n"], largest.nodes["n"]) and np.array_equal(every.pos["r"], largest.pos["r"])


# -- seeds -----------------------------------------------------------------------------------------------------


def test_seeds_outside_the_graph_are_refused_before_sampling():
    # A guard of what the hop sampler did already: the seeds are checked (cheaply) at every batch.
    with pytest.raises(IndexError, match="seed 150 .* outside \\[0, 100\\)"):
        next(iter(NeighborLoader(user_data(), num_neighbors=[2], batch_size=4, input_nodes=torch.tensor([3, 150]))))


# -- HopSampler and SamplingGraph: the lowest entries --------------------------------------------------------------


@pytest.mark.parametrize(
    "indptr, indices, error, words",
    [
        ([0, 1, 3, 3], [2, 9, 0], IndexError, "relation 'cites' ('paper' -> 'field')'s indices: id 9 at position 1 is out of range for 4 nodes"),
        ([0, 2, 1, 3], [2, 1, 0], ValueError, "relation 'cites' ('paper' -> 'field')'s indptr decreases at position 2 (2 then 1)"),
        ([0, 1, 3, 4], [2, 1, 0], ValueError, "indptr ends at 4, but indices holds 3"),
    ],
    ids=["id-out-of-range", "decreasing-indptr", "wrong-end"],
)
def test_a_hop_sampler_refuses_a_bad_relation_when_built(indptr, indices, error, words):
    relation = Relation(np.array(indptr), np.array(indices), "paper", "field")
    with pytest.raises(error) as caught:
        HopSampler({"cites": relation}, {"paper": 4, "field": 3})
    assert words in str(caught.value)
    assert "num_nodes['paper']" in str(caught.value)  # the fix names the source type's count


def test_a_sampling_graph_refuses_a_bad_csc_when_placed():
    with pytest.raises(IndexError, match="SamplingGraph's indices: id 5 at position 2 is out of range for 3 nodes"):
        SamplingGraph(torch.tensor([0, 1, 3, 3]), torch.tensor([2, 0, 5]))
    with pytest.raises(ValueError, match="indptr starts at 1, not 0"):
        SamplingGraph(torch.tensor([1, 1, 3, 3]), torch.tensor([2, 0, 1]))
    SamplingGraph(torch.tensor([0, 1, 3, 3]), torch.tensor([2, 0, 5]), checked=True).close()  # the caller's word taken


@pytest.mark.slow
def test_the_gpu_sampling_path_on_its_emulator_sees_the_same_refusal_as_the_cpu_sampler():
    pytest.importorskip("dgl_zerocopy.cuda.sampling.emulator")
    child = run_child(
        """
        import numpy as np
        from dgl_zerocopy.sampling import GpuNeighborSampler, SamplingGraph
        from dgl_zerocopy.sampling.cpu_hops import HopSampler, Relation
        indptr, indices = torch.tensor([0, 2, 3, 5, 6]), torch.tensor([1, 2, 0, 3, 7, 1])
        try:
            HopSampler({"_": Relation(indptr.numpy(), indices.numpy(), "n", "n")}, {"n": 4})
        except IndexError as error:
            print("cpu:", str(error).split(": ", 1)[1])
        with GpuNeighborSampler([2, 2], device="emulator") as sampler:
            sampler.sample_blocks(SamplingGraph(indptr, indices), torch.tensor([0, 2]))
        """
    )
    assert_refused(child, "IndexError", "id 7 at position 4 is out of range for 4 nodes")
    cpu = child.stdout.split("cpu: ", 1)[1].split(";")[0].strip()
    assert cpu == "id 7 at position 4 is out of range for 4 nodes (ids must lie in [0, 4))"
    assert cpu in child.stderr


# -- GraphStore puts ---------------------------------------------------------------------------------------------


def test_a_graph_store_refuses_a_coo_id_outside_its_size():
    store = GraphStore()
    with pytest.raises(IndexError, match=r"COO edge_index put for edge type None: col \(destinations\): id 12 at position 1 .* for 10 nodes"):
        store.put_edge_index((torch.tensor([0, 1, 2]), torch.tensor([3, 12, 4])), edge_type=None, layout="coo", size=(10, 10))
    assert store.get_all_edge_attrs() == []  # nothing kept


def test_a_graph_store_refuses_bad_compressed_layouts():
    store = GraphStore()
    edge_type = ("a", "to", "b")
    with pytest.raises(ValueError, match=r"CSC edge_index put for edge type \('a', 'to', 'b'\)'s indptr decreases at position 2"):
        store.put_edge_index((torch.tensor([0, 1, 2]), torch.tensor([0, 2, 1, 3])), edge_type=edge_type, layout="csc", size=(5, 3))
    with pytest.raises(IndexError, match="CSR edge_index put .*'s indices: id 3 at position 0 is out of range for 3 nodes"):
        store.put_edge_index((torch.tensor([0, 1, 2]), torch.tensor([3, 0])), edge_type=edge_type, layout="csr", size=(2, 3))
    with pytest.raises(IndexError, match=r"row \(sources\): id -4 at position 0"):
        store.put_edge_index((torch.tensor([-4]), torch.tensor([0])), edge_type=edge_type, layout="coo")
    store.put_edge_index((torch.tensor([0, 4]), torch.tensor([0, 1])), edge_type=edge_type, layout="coo")  # no size: ids >= 0 only


@pytest.mark.slow
def test_a_remote_graph_without_sizes_is_checked_against_the_feature_store_node_counts():
    # Without a size a put can only refuse negative ids; the sampler checks PyG's CSC against the node counts.
    child = run_child(
        """
        from dgl_zerocopy.pyg import FeatureStore, GraphStore, NeighborLoader
        features, graph = FeatureStore(), GraphStore()
        features.put_tensor(torch.randn(50, 4), group_name="paper", attr_name="x", index=None)
        features.put_tensor(torch.randn(20, 4), group_name="author", attr_name="x", index=None)
        src, dst = torch.randint(0, 20, (200,)), torch.arange(200) % 50
        src[17] = 25  # past the 20 authors
        graph.put_edge_index((src, dst), edge_type=("author", "writes", "paper"), layout="coo")
        next(iter(NeighborLoader((features, graph), num_neighbors=[3], batch_size=8, input_nodes=("paper", torch.arange(50)))))
        """
    )
    assert_refused(child, "IndexError", "the CSC of edge type ('author', 'writes', 'paper') (built by PyG)'s indices: id 25", "for 20 nodes")


# -- one pass per graph, none per batch ---------------------------------------------------------------------------


@pytest.fixture
def passes(monkeypatch):
    """The number of range passes made so far (one per array checked)."""
    calls = []
    real = graph_check._check_range
    monkeypatch.setattr(graph_check, "_check_range", lambda *args: (calls.append(args[2]), real(*args))[1])
    return calls


def test_a_second_loader_over_the_same_data_does_not_check_it_again_nor_any_batch(passes):
    data = user_data()
    first = iter(NeighborLoader(data, num_neighbors=[5, 5], batch_size=10))
    next(first)
    assert passes == ["edge_index[0] (sources)", "edge_index[1] (destinations)"]
    for _ in range(3):
        next(first)
    second = NeighborLoader(data, num_neighbors=[5, 5], batch_size=10)
    for _, _ in zip(range(3), second):
        pass
    assert len(passes) == 2  # nothing per batch, nothing for the second loader
    data.edge_index[0, 0] = 1  # written in place: its version moves on, so it is checked again
    next(iter(NeighborLoader(data, num_neighbors=[5, 5], batch_size=10)))
    assert len(passes) == 4


def test_a_second_sampler_over_the_same_arrays_does_not_check_them_again(passes):
    indptr, indices = torch.tensor([0, 2, 3, 3]), torch.tensor([1, 2, 0])
    with SamplingGraph(indptr, indices), SamplingGraph(indptr, indices):
        pass
    assert passes == ["SamplingGraph's indices"]
    ptr, idx = indptr.numpy().copy(), indices.numpy().copy()
    ptr.setflags(write=False)
    idx.setflags(write=False)  # read-only, as a mapped file: remembered while it lives
    relation = Relation(ptr, idx, "n", "n")
    sampler = HopSampler({"r": relation}, {"n": 3})
    HopSampler({"r": relation}, {"n": 3})
    for _ in range(3):
        sampler.sample({"n": np.array([0, 1])}, {"r": [2, 2]})
    assert passes == ["SamplingGraph's indices", "relation 'r' ('n' -> 'n')'s indices"]
