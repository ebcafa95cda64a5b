"""FeatureStore: one host feature table, gathered by row ids on a chosen backend.

Device contract:
- ``backend="cpu"``, ``device="cpu"``: rows gathered on the CPU into a reused buffer; result on the CPU.
- ``backend="cpu"``, CUDA device: rows gathered on the CPU into a reused *pinned* staging buffer,
  then copied host-to-device asynchronously on ``stream`` (the classic baseline).
- ``backend="zerocopy"``: the host table is pinned in place and GPU threads read its rows
  directly over PCIe; result on the CUDA device.
- ``backend="gpu"``: the table is copied to device memory once; result on the CUDA device.

Ids may be int32 or int64, on the CPU or on the store's device, as a torch tensor or NumPy array.

Streams (CUDA devices; the protocol is in docs/architecture.md): ``gather(ids, stream=s)`` runs on
``s``. Device-resident ids are read only after the caller's current stream has produced them
(``s`` waits for it), and the id check runs on ``s``. A result allocated by the store (``out=None``)
is ready on ``s`` and recorded on the caller's stream, so the caller may free it after making its
stream wait for ``s``. ``close()`` waits for the gathers still in flight before it unpins the table.
"""

from __future__ import annotations

import logging
import threading
import weakref
from pathlib import Path

import numpy as np
import torch

from .backends import Backend, GatherOptions, make_backend
from .cache import HotRowCache, budget_for_rows, check_cache_args, policy_name
from .cache.hot_rows import rank_cache_rows as _rank_cache_rows
from .compression import Codec
from .compression.table import params_nbytes
from .devices import resolve_backend, resolve_device, resolve_store_device
from .host_files import file_ref
from .id_check import DeviceIdCheck, check_ids
from .legacy_keywords import parts_from_keywords
from .mapped_file import MappedFile
from .options import Compression, DeviceCache, StorageTier
from .sharing import StoreSpec, TableState, make_spec, open_spec
from .storage.open_storage import PreparedStorage, prepare_storage
from .storage.tiers import ReadAhead, StorageBackend
from .table_input import ArrayLike, as_table, check_out_dtype, check_out_tensor, codes_view, compressed_table, num_rows

log = logging.getLogger(__name__)

_CLOSED = "this FeatureStore is closed; create a new one to gather again"
BACKENDS = ("auto", "zerocopy", "cpu", "gpu")


class FeatureStore:
    """Gathers rows of a 2-D host table for batches of node ids.

    The store keeps ``data`` alive. The parts (:mod:`dgl_zerocopy.store.options`) are each checked when made, before anything is pinned.
    ``dtype`` is what ``gather`` returns, ``stored_dtype`` and ``nbytes`` what host memory holds.

    A file is never written: a table that maps one shared (``np.load(path, mmap_mode="r")``, ``"r+"``, a ``.npy`` path, a compressed
    folder) is pinned read-only where the GPU supports it; elsewhere its bytes are re-mapped copy-on-write (with a warning: pinning then
    keeps a private copy of its pages in RAM). A table that is page-locked already (``tensor.pin_memory()``) is read as it is: never
    registered nor unregistered by the store.

    Devices and pinning: a store made by the constructor is *bound* at once: its backend is made on ``device`` there (the zero-copy
    backend pins the table in the constructor). A store that arrives in another process by pickling (e.g. an argument of
    ``torch.multiprocessing.spawn``) arrives *unbound*: it knows its table, backend and options, and binds on first use (``gather``,
    ``device``) or by :meth:`bind`. A store made on a CUDA device binds to the receiver's current CUDA device at that moment (so call
    ``torch.cuda.set_device(rank)`` first, or ``bind(rank)``); a CPU store stays on the CPU. Each process pins its own mapping of the
    table once, for its own GPU, and ``close()`` (or garbage collection) unpins it; closing an unbound store pins nothing.

    Sharing with other processes: pickling sends :meth:`spec` (opened by :meth:`from_spec`), which names the table's memory and never
    copies it: a tensor in shared memory (``feat.share_memory_()``, called before any store pins ``feat``) or a file map (a ``.npy``
    path, ``np.load(path, mmap_mode=...)``; a copy-on-write map's writes stay in their process). Any other table raises ``TypeError`` at
    once, saying how to share it. The sender's store stays usable.
    """

    def __init__(
        self,
        data: ArrayLike,
        backend: str = "auto",
        device: str | torch.device | None = None,
        *,
        kernel: GatherOptions | None = None,
        compression: Compression | str | None = None,
        cache: DeviceCache | None = None,
        storage: StorageTier | None = None,
        **deprecated,
    ) -> None:
        """Build a store over ``data`` and bind it to ``device``.

        Args:
            data: the 2-D table: a CPU ``torch.Tensor``, a ``numpy.ndarray``, a ``.npy`` path (memory mapped, never read whole),
                a folder written by :func:`dgl_zerocopy.compress` or a ``CompressedTable``. A non-contiguous table is copied,
                with a warning (pinning needs one range).
            backend: ``"auto"`` (zero-copy where it runs, else ``"cpu"``), ``"zerocopy"``, ``"cpu"`` or ``"gpu"``.
            device: where results go (default: the current CUDA device, else ``cpu``).
            kernel: the zero-copy kernel's :class:`GatherOptions` (default ``GatherOptions()``; other backends ignore it).
            compression: a :class:`Compression` or codec name (``"fp16"``, ``"bf16"``, ``"int8"``): host memory holds codes,
                which ``gather`` decodes (default: the table as given).
            cache: a :class:`DeviceCache`: hot rows in device memory, ranked once here (default: none).
            storage: a :class:`StorageTier`: rows left in their file behind a host buffer (default: the table in memory;
                ``data`` must then be a path; docs/storage.md).
            **deprecated: the former keywords (``cache_bytes=``, ``variant=``, ...), each mapped onto its part with a
                ``DeprecationWarning``.

        Raises:
            ValueError, TypeError: a bad backend, device or part, naming the value and the fix; nothing is pinned then.
        """
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, but got {backend!r}")
        kernel, compression, cache, storage = parts_from_keywords(deprecated, kernel, compression, cache, storage)
        if storage is not None:  # rows stay in the file (docs/storage.md)
            prepared = prepare_storage(data, backend, device, compression, storage, cache)
            table = torch.empty(prepared.table.shape, dtype=prepared.table.dtype, device="meta")
            folder, codec = prepared.table.folder, prepared.table.codec
            self._init_unbound(table, None, None, prepared.backend, prepared.device.type, kernel, codec, prepared.out_dtype, prepared.table.method, folder, storage=prepared)  # fmt: skip
            self.bind(prepared.device)
            return
        rows = num_rows(data)
        if rows is not None:  # checked before the table is compressed, pinned or ranked
            check_cache_args(cache.bytes, cache.policy, rows, cache.graph, cache.sampler, cache.seeds)
        compressed = compressed_table(data, compression.codec)
        out_dtype = compression.out_dtype
        if compressed is not None:
            out_dtype = check_out_dtype(out_dtype, compressed.codec.name)
            data = compressed.array if compressed.array is not None else compressed.codes
        table, read_only_array = as_table(data)
        if compressed is None:
            out_dtype = check_out_dtype(out_dtype, None, table.dtype)
        else:
            table = codes_view(table, compressed.codec)
        backend = resolve_backend(backend, device)
        device = resolve_store_device(device, backend)
        cache_rows = _rank_cache_rows(table, backend, cache.bytes, cache.policy, cache.graph, cache.sampler, cache.seeds, cache.presample_options)
        file = file_ref(read_only_array if read_only_array is not None else data, table)
        codec, method, path = (compressed.codec, compressed.method, compressed.path) if compressed is not None else (None, None, None)
        cache_policy = policy_name(cache.policy) if cache_rows is not None else None
        self._init_unbound(table, read_only_array, file, backend, device.type, kernel, codec, out_dtype, method, path, cache_rows, cache_policy)
        self.bind(device)

    @classmethod
    def from_spec(cls, spec: StoreSpec) -> FeatureStore:
        """The store ``spec`` describes (see :meth:`spec`), over the same shared memory or file, *unbound*:
        it binds on first use or by :meth:`bind`, pinning its own mapping for this process's device.

        Raises:
            TypeError: ``spec`` is not a :class:`~dgl_zerocopy.store.sharing.StoreSpec`.
        """
        if not isinstance(spec, StoreSpec):
            raise TypeError(f"from_spec takes a StoreSpec (store.spec()), but got {type(spec).__name__}")
        store = cls.__new__(cls)
        store._init_unbound(*open_spec(spec))
        return store

    def spec(self) -> StoreSpec:
        """What another process needs to open this store again (:meth:`from_spec`): a picklable
        :class:`~dgl_zerocopy.store.sharing.StoreSpec` naming the table's shared memory or file, never a copy of it.

        Raises:
            RuntimeError: the store is closed.
            TypeError: the table is in private memory (sending it would copy it); the message says how to share it.
        """
        if self.closed:
            raise RuntimeError("this FeatureStore is closed; create a new one to send to another process")
        device_type = self._device.type if self._device is not None else self._device_type
        state = TableState(self._table, self._file, self._storage, self._codec, self._method, self._path, self._out_dtype)
        return make_spec(state, self.backend, device_type, self.options, self._cache_rows, self._cache_policy)

    def _init_unbound(
        self,
        table: torch.Tensor,
        read_only_array: np.ndarray | None,
        file: tuple | None,
        backend: str,
        device_type: str,
        options: GatherOptions,
        codec: Codec | None = None,
        out_dtype: torch.dtype | None = None,
        method: str | None = None,
        path: Path | None = None,
        cache_rows: torch.Tensor | None = None,
        cache_policy: str | None = None,
        storage: PreparedStorage | None = None,
    ) -> None:
        """The state of a store whose backend is not made yet (:meth:`bind` makes it)."""
        self._storage = storage  # a table left in its file: StorageBackend's file, plan and options
        self._cache_rows = cache_rows  # the rows to cache, ranked (int64 CPU), or None: no cache
        self._cache_policy = cache_policy
        self._cache: HotRowCache | None = None  # made by bind() on the bound device
        self._table = table  # the codes of a compressed table
        self._codec = codec  # None: uncompressed
        self._out_dtype = out_dtype if out_dtype is not None else table.dtype
        self._method = method  # int8's range rule (what the store was compressed with; informational)
        self._path = path  # the folder a compressed table was loaded from (sent by name when pickled)
        self._read_only_array = read_only_array  # a file map to pin read-only or re-map copy-on-write; dropped once bound
        self._file = file  # (filename, offset, dtype, shape, mode) when the table maps a file: what pickling sends
        self._mapped: MappedFile | None = None  # that file, checked before each gather (bind makes it; not for gpu's own copy)
        self.backend = backend
        self.options = options
        self._device_type = device_type  # where bind() goes by default: "cuda" means the current CUDA device
        self._device: torch.device | None = None
        self._backend: Backend | None = None
        self._lock = threading.Lock()  # one bind, even when a prefetch thread and the main thread race to it
        self._made: list = []  # filled by bind() (the backend, the mapped file's check), emptied by the finalizer
        self._id_check = DeviceIdCheck(table.shape[0])  # device ids' range checks, reported later
        # Unpin even if the user never calls close(): at garbage collection or interpreter exit.
        self._finalizer = weakref.finalize(self, _close_all, self._made)

    def bind(self, device: str | int | torch.device | None = None) -> FeatureStore:
        """Make the backend on ``device`` (the zero-copy backend pins the table) unless done; returns self.

        Args:
            device: None: the device already bound, else the current CUDA device for a store made on CUDA, else ``cpu``.
                Binding again to the same device does nothing.

        Raises:
            ValueError: another device than the one bound (a store gathers on one device: make or send one store per device).
            RuntimeError: the store is closed.
        """
        with self._lock:
            if self.closed:
                raise RuntimeError(_CLOSED)
            if self._device is not None:
                if device is not None and resolve_device(device) != self._device:
                    raise ValueError(
                        f"this FeatureStore is bound to {self._device}, so it cannot bind to {resolve_device(device)}; make (or send) one store per device"
                    )
                return self
            device = resolve_store_device(device if device is not None else self._device_type, self.backend)
            if self._storage is not None:
                storage = self._storage
                backend = StorageBackend(storage.table, device, self.backend, self.options, storage.plan, self._out_dtype)
                self._made.append(backend)
                self._backend, self._device, self._cache = backend, device, backend.cache
                return self
            table, read_only = self._table, False
            if self.backend == "zerocopy" and self._read_only_array is not None:
                from .pin_target import pinnable_table
                from .pinning import read_only_register_supported

                table, read_only = pinnable_table(table, self._read_only_array, read_only_register_supported(device.index))
                if self._codec is not None:
                    table = codes_view(table, self._codec)  # a re-mapped file holds bf16 codes as int16
            cache = None
            if self._cache_rows is not None:
                cache = HotRowCache(table, self._cache_rows, device, policy=self._cache_policy)
            backend = make_backend(
                self.backend, table, device, read_only=read_only, options=self.options, codec=self._codec, out_dtype=self._out_dtype, cache=cache
            )
            self._made.append(backend)
            if self._file is not None and self.backend != "gpu":
                self._mapped = MappedFile(self._file, self._table.data_ptr())
                self._made.append(self._mapped)
            self._table, self._backend, self._device, self._read_only_array = table, backend, device, None
            self._cache = cache
        return self

    def __reduce__(self):
        """Pickle as :meth:`spec`, by reference to the table's memory, never a copy of it."""
        return type(self).from_spec, (self.spec(),)

    # -- properties ------------------------------------------------------------------------
    @property
    def table(self) -> torch.Tensor:
        """The host tensor rows are gathered from (read it, never write it): a compressed table's codes;
        a ``"meta"`` tensor of the right shape and dtype for rows left in their file."""
        return self._table

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self._table.shape)  # type: ignore[return-value]

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the rows ``gather`` returns (a compressed table's ``out_dtype``)."""
        return self._out_dtype

    @property
    def stored_dtype(self) -> torch.dtype:
        """The dtype held in host memory: the table's, or a compressed table's codes."""
        return self._table.dtype

    @property
    def compression(self) -> str | None:
        """The codec name (``"fp16"``, ``"bf16"``, ``"int8"``), or None for an uncompressed table."""
        return self._codec.name if self._codec is not None else None

    @property
    def codec(self) -> Codec | None:
        """How the stored codes decode (:class:`~dgl_zerocopy.store.compression.Codec`), or None."""
        return self._codec

    @property
    def nbytes(self) -> int:
        """Host bytes held: the table, or the codes plus the int8 scales and offsets; a table left in
        its file (``storage=``): the host buffer's rows."""
        if self._storage is not None:
            return self._storage.plan.capacity * self._storage.table.row_bytes
        return self._table.numel() * self._table.element_size() + (params_nbytes(self._codec) if self._codec is not None else 0)

    @property
    def device(self) -> torch.device:
        """The device results are on; an unbound store binds first (see :meth:`bind`)."""
        if self._device is None:
            self.bind()
        return self._device  # type: ignore[return-value]

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    # -- cache -----------------------------------------------------------------------------
    @property
    def cache_nbytes(self) -> int:
        """Device memory the hot-row cache takes (rows and slot map; 0 without a cache). An
        unbound store reports what binding will take."""
        if self._cache is not None:
            return self._cache.nbytes
        if self._cache_rows is None:
            return 0
        return budget_for_rows(self._cache_rows.numel(), self._table.shape[1] * self._table.element_size(), self._table.shape[0])

    @property
    def cache(self) -> HotRowCache | None:
        """The bound store's :class:`~dgl_zerocopy.store.cache.HotRowCache` (None: no cache, or unbound)."""
        return self._cache

    @property
    def cache_policy(self) -> str | None:
        """The policy that chose the cached rows, or None without a cache."""
        return self._cache_policy

    def cache_stats(self) -> dict[str, float | int]:
        """``{"hits", "misses", "hit_rate"}``: rows served from the device cache and from host
        memory since the last :meth:`reset_cache_stats` (all zero without a cache). On CUDA this
        waits for the gathers already enqueued, whose hits are counted on the device."""
        if self._cache is None:
            return {"hits": 0, "misses": 0, "hit_rate": 0.0}
        return self._cache.stats_dict()

    def reset_cache_stats(self) -> None:
        """Count hits and misses from zero again (e.g. at the start of an epoch)."""
        if self._cache is not None:
            self._cache.reset_stats()

    # -- storage (storage=StorageTier(...); docs/storage.md) ------------------------------
    @property
    def on_storage(self) -> bool:
        """True when the rows stay in their file (``storage=``): :meth:`read_ahead` and
        :meth:`storage_stats` apply."""
        return self._storage is not None

    def _storage_backend(self) -> StorageBackend:
        if self._storage is None:
            raise TypeError(
                "this FeatureStore holds its whole table in memory: reading ahead and storage_stats() need FeatureStore(path, storage=StorageTier(N)), a host buffer of N bytes"
            )
        if self._backend is None:
            self.bind()
        return self._backend  # type: ignore[return-value]

    def read_ahead(self, ids) -> ReadAhead:
        """Start reading rows ``ids`` of a later batch into the host buffer in the background (docs/storage.md).

        Args:
            ids: row ids as :meth:`gather` takes them, checked as it checks them (device ids are copied to the host).

        Returns:
            A :class:`~dgl_zerocopy.store.storage.tiers.ReadAhead`, at once: its rows stay reserved until
            ``gather(ids, read_ahead=handle)`` or ``handle.release()``.

        Raises:
            TypeError, ValueError, IndexError: bad ids, as :meth:`gather` raises them; TypeError: a table held in memory.
        """
        storage = self._storage_backend()
        return storage.read_ahead(check_ids(ids, self._table.shape[0], self.device, self._id_check, on_host=True))

    def storage_stats(self) -> dict[str, int | float]:
        """Counters since :meth:`reset_storage_stats` (:mod:`dgl_zerocopy.store.storage.stats`): storage bytes and reads, rows per tier."""
        return self._storage_backend().stats.as_dict()

    def reset_storage_stats(self) -> None:
        self._storage_backend().stats.reset()

    def __len__(self) -> int:
        return self._table.shape[0]

    def __repr__(self) -> str:
        device = str(self._device) if self._device is not None else f"{self._device_type} (unbound)"
        codes = f", compression={self.compression!r} (stored {self.stored_dtype})" if self._codec is not None else ""
        cache = f", cache={self._cache_rows.numel()} rows ({self._cache_policy})" if self._cache_rows is not None else ""
        return f"FeatureStore(shape={self.shape}, dtype={self.dtype}{codes}{cache}, backend={self.backend!r}, device={device!r})"

    # -- gather ----------------------------------------------------------------------------
    def gather(self, ids, out: torch.Tensor | None = None, stream=None, unchecked: bool = False, read_ahead: ReadAhead | None = None) -> torch.Tensor:
        """Rows ``data[ids]``; a compressed table's rows decoded (``store.codec.decode(codes[ids], ids, store.dtype)``).

        The ids are checked once, here (:func:`dgl_zerocopy.store.id_check.check_ids`); the backend trusts them.

        Args:
            ids: 1-D int32/int64 row ids (``torch.Tensor`` or ``numpy.ndarray``) on the CPU or on :attr:`device`, each in
                ``[0, rows)`` (no negative wrap-around). Device ids are read once the caller's current stream has produced them.
            out: a contiguous ``(len(ids), dim)`` tensor of :attr:`dtype` on :attr:`device` to gather into; the caller makes sure
                nothing still reads it when ``stream`` writes it (e.g. an event). Default None: the store allocates the result
                (on the CPU backend a view of a reused buffer, valid until the next ``gather``: pass ``out`` to own it).
            stream: the ``torch.cuda.Stream`` to run on (CUDA devices); default the current stream.
            unchecked: True skips the range check (the caller vouches: an out-of-range id is then undefined behaviour);
                type, dtype, shape and device are still checked.
            read_ahead: the handle :meth:`read_ahead` returned for these ids; released after the gather.

        Returns:
            A ``(len(ids), dim)`` tensor of :attr:`dtype` on :attr:`device` (``out`` when given), ready on ``stream``: a caller
            on another stream waits for it before reading.

        Raises:
            TypeError: ids that are not a tensor or array, or not int32/int64; an ``out`` that is not a tensor.
            ValueError: ids not 1-D or on another device; an ``out`` of another shape, dtype or device.
            IndexError: an id outside ``[0, rows)``, naming it, its position and the range: at once for CPU ids (and with the
                ``cpu`` backend). Ids on a CUDA device are checked on the device, the host never waiting for it, and the error
                is raised later: by a gather that finds the check done, by :meth:`raise_deferred_errors` (at the end of an
                epoch) or by :meth:`close`; meanwhile such an id reads the nearest valid row, never outside the table.
            RuntimeError: the store is closed.
        """
        try:
            return self._gather(ids, out, stream, unchecked)
        finally:
            if read_ahead is not None:
                read_ahead.release()

    def _gather(self, ids, out: torch.Tensor | None, stream, unchecked: bool) -> torch.Tensor:
        if self.closed:
            raise RuntimeError(_CLOSED)
        if self._backend is None:
            self.bind()
        if self._mapped is not None:
            self._mapped.check()  # a mapped file cut short would kill the process (SIGBUS) at the first read past its end
        self._id_check.poll()  # an earlier batch's device-side check that has failed, if done; never waits
        if self.device.type != "cuda":
            return self._backend.gather(self._check_ids(ids, out, unchecked), out, None)
        caller = torch.cuda.current_stream(self.device)
        stream = stream if stream is not None else caller
        crossing = stream != caller
        with torch.cuda.stream(stream):
            if crossing and isinstance(ids, torch.Tensor) and ids.device == self.device:
                stream.wait_stream(caller)  # the ids may still be being written on the caller's stream
                ids.record_stream(stream)
            ids = self._check_ids(ids, out, unchecked)  # on `stream`, after the ids exist
            if crossing and out is not None:
                out.record_stream(stream)
            result = self._backend.gather(ids, out, stream)
        if out is None and crossing:
            result.record_stream(caller)  # allocated on `stream`, freed by the caller
        return result

    def _check_ids(self, ids, out: torch.Tensor | None, unchecked: bool) -> torch.Tensor:
        """The gather's one check of ``ids`` (:func:`.id_check.check_ids`, on the current stream: the
        gather's), then of ``out``. The ``cpu`` backend copies device ids to the host anyway: they are checked there."""
        ids = check_ids(ids, self._table.shape[0], self.device, self._id_check, in_range=not unchecked, on_host=self.backend == "cpu")
        if out is not None:
            check_out_tensor(out, (ids.shape[0], self._table.shape[1]), self.dtype, self.device)
        return ids

    def raise_deferred_errors(self) -> None:
        """Wait for the range checks of the device ids gathered so far. Gathers of CPU ids raise at once and leave nothing
        here. Call it where the host waits anyway (the end of an epoch); :meth:`close` calls it too.

        Raises:
            IndexError: the first out-of-range id of the earliest bad batch, naming it, its position and that gather.
        """
        self._id_check.wait()

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for the gathers in flight, then release device memory and unpin the host table. Idempotent;
        an unbound store has nothing to release.

        Raises:
            IndexError: an out-of-range device id not reported yet (see :meth:`raise_deferred_errors`), after the release.
        """
        self._close(report=True)

    def _close(self, report: bool) -> None:
        with self._lock:  # not while bind() is making a backend the finalizer would miss
            self._finalizer()
        try:
            self._id_check.wait()  # the gathers have run: nothing left to wait for
        except IndexError as error:
            if report:
                raise
            log.warning("closing a FeatureStore while an exception propagates; a bad id found earlier: %s", error)

    def __enter__(self) -> FeatureStore:
        return self

    def __exit__(self, *exc) -> None:
        self._close(report=exc[0] is None)  # an exception already on its way is not replaced


def _close_all(backends: list) -> None:
    while backends:
        backends.pop().close()
