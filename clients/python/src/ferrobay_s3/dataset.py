"""An iterable over the objects under a prefix, for training loops.

It lists the prefix once (the key list is kept; :meth:`ObjectDataset.refresh` lists
again), orders the keys (shuffled per epoch with a seed every worker shares, or in key
order), takes this worker's share, and yields ``transform(key, data)`` for each object,
reading ``prefetch`` objects ahead on a bounded thread pool while keeping the order.

It is compatible with PyTorch's ``IterableDataset`` protocol without importing torch:
the share is chosen by ``worker_info`` (default: ``torch.utils.data.get_worker_info()``
if torch is already imported, else a single worker) and ``rank``/``world_size`` (for
several processes or machines). Wrap it for a ``DataLoader`` with :meth:`as_torch` or::

    class S3Dataset(torch.utils.data.IterableDataset):
        def __init__(self, ds): self.ds = ds
        def __iter__(self): return iter(self.ds)
"""

from __future__ import annotations

import collections
import random
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from typing import (
    TYPE_CHECKING, Any, Callable, Deque, Generic, Iterator, List, Optional, Tuple, TypeVar,
)

from .retry import error_code

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

T = TypeVar("T")
#: Returns (worker index, number of workers) of the calling process.
WorkerInfo = Callable[[], Tuple[int, int]]


def torch_worker_info() -> Tuple[int, int]:
    """(id, num_workers) of the current ``DataLoader`` worker if torch is imported and
    this is a worker process; (0, 1) otherwise. Never imports torch itself."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 0, 1
    info = torch.utils.data.get_worker_info()
    if info is None:
        return 0, 1
    return int(info.id), int(info.num_workers)


def _key_and_data(key: str, data: bytes) -> Tuple[str, bytes]:
    return key, data


class ObjectDataset(Generic[T]):
    """Objects of ``bucket`` under ``prefix`` as an iterable of ``transform(key, data)``
    (default: ``(key, data)`` tuples).

    - ``shuffle``, ``seed``: shuffle the key order with ``random.Random(seed + epoch)``;
      every worker computes the same order, so shares never overlap.
      :meth:`set_epoch` changes the epoch (as ``DistributedSampler.set_epoch``).
    - ``rank``, ``world_size``: this process's share among processes (distributed
      training); combined with the DataLoader worker share from ``worker_info``.
    - ``prefetch``: objects read ahead (threads of this iterator; memory is about
      ``prefetch`` objects).
    - ``skip_missing``: skip objects deleted since the listing (else raise NoSuchKey).
    - ``keys``: iterate these keys instead of listing ``prefix``.
    - Keys ending in ``/`` (directory markers) are left out.
    """

    def __init__(
        self,
        client: "Client",
        bucket: str,
        prefix: str = "",
        *,
        shuffle: bool = False,
        seed: int = 0,
        transform: Optional[Callable[[str, bytes], T]] = None,
        rank: int = 0,
        world_size: int = 1,
        worker_info: WorkerInfo = torch_worker_info,
        prefetch: int = 8,
        skip_missing: bool = False,
        keys: Optional[List[str]] = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.shuffle = shuffle
        self.seed = seed
        self.transform: Callable[[str, bytes], Any] = transform or _key_and_data
        self.rank = rank
        self.world_size = world_size
        self.worker_info = worker_info
        self.prefetch = prefetch
        self.skip_missing = skip_missing
        self.epoch = 0
        self._keys: Optional[List[str]] = list(keys) if keys is not None else None
        self._fixed_keys = keys is not None

    def set_epoch(self, epoch: int) -> None:
        """Selects the shuffle order of ``epoch`` (call before each epoch, in every
        process, with the same number)."""
        self.epoch = epoch

    def refresh(self) -> None:
        """Forgets the key list; the next iteration lists the prefix again."""
        if not self._fixed_keys:
            self._keys = None

    def keys(self) -> List[str]:
        """Every key of the dataset, in key order (listed on first use)."""
        if self._keys is None:
            self._keys = [
                o["Key"]
                for o in self.client.list_objects(Bucket=self.bucket, Prefix=self.prefix)
                if not o["Key"].endswith("/")
            ]
        return self._keys

    def shard_keys(self) -> List[str]:
        """The keys this process and worker read in this epoch, in order."""
        order = list(self.keys())
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        worker, workers = self.worker_info()
        shards = self.world_size * workers
        me = self.rank * workers + worker
        return order[me::shards]

    def __iter__(self) -> Iterator[T]:
        keys = self.shard_keys()
        executor = ThreadPoolExecutor(
            max_workers=min(self.prefetch, max(1, len(keys))),
            thread_name_prefix="ferrobay-s3-dataset",
        )
        pending: Deque[Tuple[str, "Future[Optional[bytes]]"]] = collections.deque()
        it = iter(keys)
        try:
            for key in it:
                pending.append((key, executor.submit(self._read, key)))
                if len(pending) >= self.prefetch:
                    break
            while pending:
                key, fut = pending.popleft()
                nxt = next(it, None)
                if nxt is not None:
                    pending.append((nxt, executor.submit(self._read, nxt)))
                data = fut.result()
                if data is not None:
                    yield self.transform(key, data)
        finally:
            for _, f in pending:
                f.cancel()
            executor.shutdown(wait=True)

    def _read(self, key: str) -> Optional[bytes]:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
        except Exception as e:
            if self.skip_missing and error_code(e) in ("NoSuchKey", "404"):
                return None
            raise
        try:
            return body.read()
        finally:
            body.close()

    def as_torch(self) -> Any:
        """This dataset as a ``torch.utils.data.IterableDataset`` (imports torch now)."""
        import torch.utils.data

        ds = self

        class _TorchObjectDataset(torch.utils.data.IterableDataset):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.dataset = ds

            def __iter__(self) -> Iterator[Any]:
                return iter(self.dataset)

        return _TorchObjectDataset()
