"""Rows of a DistDGL ``DistTensor`` for a batch of global ids: the local partition's rows through
a :class:`~dgl_zerocopy.FeatureStore`, the other partitions' rows pulled over DGL's RPC.

DistDGL keeps each partition's rows in its server's shared memory and maps the local one into
every trainer of that machine (``DistTensor.local_partition``, a writable ``MAP_SHARED`` mapping).
``DistTensor[ids]`` (``KVClient.pull`` -> ``rpc.fast_pull``) copies the local rows on the CPU and
requests the others from their servers. :class:`DistFeatureSource` splits the ids itself with the
tensor's partition policy (``to_partid``, ``to_local``): local ids are gathered by a FeatureStore
over the local partition (on a GPU: pinned in place and read zero-copy by the GPU; on the CPU: the
fast CPU gather), and only the remote ids go to ``DistTensor.__getitem__``, on a pull thread
while the local rows are gathered, and their rows are scattered into the same output. Counters
say how many rows came from where.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import torch

from ..store.feature_store import FeatureStore, resolve_device

log = logging.getLogger(__name__)


@dataclass
class RowCounts:
    """Rows fetched so far: from the local partition, from other partitions over RPC, and calls."""

    local: int = 0
    remote: int = 0
    fetches: int = 0

    @property
    def remote_fraction(self) -> float:
        total = self.local + self.remote
        return self.remote / total if total else 0.0


class DistFeatureSource:
    """Fetch rows of ``tensor`` (a ``dgl.distributed.DistTensor``, 1-D or 2-D) by global node id.

    ``backend``: the FeatureStore backend for the local partition: ``"auto"`` (``"zerocopy"`` on a
    CUDA device, else ``"cpu"``), ``"cpu"``, ``"zerocopy"`` or ``"gpu"``; ``device``: where rows
    are returned (default: CUDA when available, else CPU). The store views the shared-memory
    mapping in place (it is never copied; the zero-copy backend pins it).

    Contract: :meth:`fetch` returns ``tensor[ids]`` exactly, on ``device``. DGL's RPC client is not
    thread-safe: fetch and sample from one thread at a time (the loader's worker, or the caller).
    A fetch with remote ids pulls them on a thread of its own and joins it before it returns, so no
    RPC of the source is in flight between calls. The thread is a daemon: a pull stuck on a dead
    server never holds up the interpreter's exit.
    """

    def __init__(self, tensor, backend: str = "auto", device: str | torch.device | None = None) -> None:
        from dgl.distributed import DistTensor

        if not isinstance(tensor, DistTensor):
            raise TypeError(f"tensor must be a dgl.distributed.DistTensor (e.g. g.ndata['feat'] of a DistGraph), but got {type(tensor).__name__}")
        if len(tensor.shape) not in (1, 2):
            raise ValueError(f"tensor must be 1-D or 2-D, but {tensor.name!r} has shape {tuple(tensor.shape)}")
        self.device = resolve_device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        if backend == "auto":
            backend = "zerocopy" if self.device.type == "cuda" else "cpu"
        self.tensor = tensor
        self.policy = tensor.part_policy
        self.part_id = int(self.policy.part_id)
        local = tensor.local_partition
        self._vector = local.dim() == 1
        self.store = FeatureStore(local.view(-1, 1) if self._vector else local, backend=backend, device=self.device)
        self.counts = RowCounts()
        self._lock = threading.Lock()
        log.debug("%s: local partition %d, %d of %d rows, backend %s on %s", tensor.name, self.part_id, local.shape[0], tensor.shape[0], backend, self.device)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.tensor.shape)

    @property
    def dtype(self) -> torch.dtype:
        return self.store.dtype

    @property
    def num_local_rows(self) -> int:
        """Rows held by this machine's partition."""
        return self.store.shape[0]

    def fetch(self, ids, out: torch.Tensor | None = None) -> torch.Tensor:
        """``tensor[ids]`` on ``self.device``: shape ``(len(ids),)`` for a 1-D tensor, else ``(len(ids), dim)``.

        ``ids``: 1-D int32/int64 global ids (torch or NumPy; DGL's ``input_nodes``), in
        ``[0, len(tensor))``, else ``IndexError``. ``out``: optional contiguous tensor of the result's
        shape, dtype and device to write into."""
        ids = self._check_ids(ids)
        n = ids.shape[0]
        shape = (n,) if self._vector else (n, self.store.shape[1])
        if out is None:
            out = torch.empty(shape, dtype=self.dtype, device=self.device)
        elif tuple(out.shape) != shape or out.dtype != self.dtype or out.device != self.device or not out.is_contiguous():
            raise ValueError(
                f"out must be a contiguous {self.dtype} tensor of shape {shape} on {self.device}, but got {out.dtype} {tuple(out.shape)} on {out.device}"
            )
        if n == 0:
            return out
        local = self.policy.to_partid(ids) == self.part_id
        remote_pos = (~local).nonzero().squeeze(1)
        n_remote = int(remote_pos.numel())
        rows = out.view(n, -1)
        if n_remote == 0:  # all local (always with one partition): gathered straight into the output
            self.store.gather(self.policy.to_local(ids), out=rows)
        else:
            # The remote rows are pulled on a thread of its own (DGL's RPC releases the GIL while it
            # waits) while this thread gathers the local ones, as DGL's own pull copies its local rows
            # while the request is out: with a core free, the local gather hides behind the wait.
            pull = _Pull(self.tensor, ids[remote_pos])
            try:
                if n_remote < n:
                    self._gather_local(ids, local, rows)
            finally:
                pulled = pull.result()  # also when the local gather failed: no RPC is left in flight
            rows.index_copy_(0, remote_pos.to(self.device), pulled.view(n_remote, -1).to(self.device, non_blocking=True))
        with self._lock:
            self.counts.local += n - n_remote
            self.counts.remote += n_remote
            self.counts.fetches += 1
        return out

    def _gather_local(self, ids: torch.Tensor, local: torch.Tensor, rows: torch.Tensor) -> None:
        """Write the local partition's rows at the positions where ``local`` is true (on the caller's stream)."""
        if self.device.type == "cpu":
            # Every position is gathered, the remote ones from the batch's first local row (the pull
            # overwrites them): one index_select into the output costs a quarter of an index_copy_
            # of the local rows.
            placeholder = ids[int(local.to(torch.uint8).argmax())]
            local_ids = self.policy.to_local(torch.where(local, ids, placeholder))
            self.store.gather(local_ids, out=rows)
        else:
            # On a GPU a placeholder row would cost a PCIe read per remote position: gather the local
            # rows alone and scatter them on the device.
            local_pos = local.nonzero().squeeze(1)
            gathered = self.store.gather(self.policy.to_local(ids[local_pos]))
            rows.index_copy_(0, local_pos.to(self.device), gathered)

    def reset_counts(self) -> RowCounts:
        """The counts so far, and zero them."""
        with self._lock:
            counts, self.counts = self.counts, RowCounts()
        return counts

    def close(self) -> None:
        """Release the store (unpins the local partition on a GPU). Idempotent."""
        self.store.close()

    def __enter__(self) -> DistFeatureSource:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"DistFeatureSource({self.tensor.name!r}, shape={self.shape}, partition {self.part_id} with "
            f"{self.num_local_rows} local rows, backend={self.store.backend!r}, device={str(self.device)!r})"
        )

    def _check_ids(self, ids) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor):
            try:
                ids = torch.as_tensor(ids)
            except (TypeError, ValueError, RuntimeError):
                raise TypeError(f"ids must be a 1-D int32/int64 tensor or array, but got {type(ids).__name__}") from None
        if ids.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"ids must be int32 or int64, but got {ids.dtype}; convert with ids.long()")
        if ids.dim() != 1:
            raise ValueError(f"ids must be 1-D, but got shape {tuple(ids.shape)}")
        ids = ids.to("cpu", torch.int64).contiguous()  # the partition book works on the CPU
        if ids.numel():
            lo, hi = torch.aminmax(ids)
            rows = self.tensor.shape[0]
            if int(lo) < 0 or int(hi) >= rows:
                bad = ((ids < 0) | (ids >= rows)).nonzero()[0, 0]
                raise IndexError(f"id {int(ids[bad])} at position {int(bad)} is out of range for {self.tensor.name!r} of {rows} rows (valid: 0 to {rows - 1})")
        return ids


class _Pull:
    """``tensor[ids]`` (DGL's RPC pull) started on a daemon thread; :meth:`result` joins it and
    returns the rows or raises the pull's error. One thread per pull: it costs tens of
    microseconds against milliseconds of RPC, and no thread outlives its fetch."""

    def __init__(self, tensor, ids: torch.Tensor) -> None:
        self._rows: torch.Tensor | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(tensor, ids), name="dgl-zerocopy-dist-pull", daemon=True)
        self._thread.start()

    def _run(self, tensor, ids: torch.Tensor) -> None:
        try:
            self._rows = tensor[ids]
        except BaseException as error:  # handed to the fetching thread by result()
            self._error = error

    def result(self) -> torch.Tensor:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._rows
