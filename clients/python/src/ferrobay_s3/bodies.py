"""Response bodies of GetObject that survive a gateway dying mid-stream.

:class:`ResumableBody` streams one GET; when the connection breaks, it asks another
gateway for the rest (``Range`` from the next byte, ``If-Match`` the ETag it started
with). :class:`RangedBody` reads a large object as parallel ranged GETs, a bounded
window of parts ahead of the reader, each pinned to the first answer's ETag, and hands
the bytes out in order. Both are ``io.RawIOBase`` streams (``read``, ``readinto``,
``iter_chunks``, usable with ``shutil.copyfileobj`` or ``io.BufferedReader``).
"""

from __future__ import annotations

import collections
import io
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple

import botocore.exceptions

from .errors import ObjectChangedError, ShortReadError
from .retry import Verdict, classify, http_status

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

#: Arguments of GetObject that every request of one read repeats (the others, such as
#: conditions and Range, belong to the first request only).
REPEATED_GET_ARGS = (
    "VersionId",
    "ResponseCacheControl",
    "ResponseContentDisposition",
    "ResponseContentEncoding",
    "ResponseContentLanguage",
    "ResponseContentType",
    "ResponseExpires",
    "ExpectedBucketOwner",
    "RequestPayer",
)

DEFAULT_CHUNK_BYTES = 1 << 20


def changed_or_raise(e: BaseException, bucket: str, key: str, etag: str) -> BaseException:
    """A pinned read refused with 412 (ETag no longer matches) or 404 (object gone)
    means the object changed; other errors stay as they are."""
    if isinstance(e, botocore.exceptions.ClientError) and http_status(e) in (404, 412):
        return ObjectChangedError(bucket, key, etag, e)
    return e


class _Body(io.RawIOBase):
    """Shared stream plumbing: ``read(amt)`` is implemented by subclasses via
    :meth:`_read_some`."""

    def readable(self) -> bool:
        return True

    def _read_some(self, amt: int) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, amt: Optional[int] = None) -> bytes:
        if amt is None or amt < 0:
            return self.readall()
        if amt == 0:
            return b""
        return self._read_some(amt)

    def readall(self) -> bytes:
        parts: List[bytes] = []
        while True:
            b = self._read_some(DEFAULT_CHUNK_BYTES * 8)
            if not b:
                return b"".join(parts)
            parts.append(b)

    def readinto(self, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        data = self._read_some(len(view))
        view[: len(data)] = data
        return len(data)

    def iter_chunks(self, chunk_size: int = DEFAULT_CHUNK_BYTES) -> Iterator[bytes]:
        while True:
            b = self.read(chunk_size)
            if not b:
                return
            yield b

    def __iter__(self) -> Iterator[bytes]:
        return self.iter_chunks()


class ResumableBody(_Body):
    """Bytes ``[start, end)`` of one object version, streamed from one GET response and
    resumed on another gateway when the stream breaks."""

    def __init__(
        self,
        client: "Client",
        bucket: str,
        key: str,
        stream: Any,
        endpoint: str,
        start: int,
        end: int,
        etag: str,
        repeated_args: Dict[str, Any],
    ) -> None:
        super().__init__()
        self._client = client
        self._bucket = bucket
        self._key = key
        self._stream = stream
        self._endpoint = endpoint
        self._pos = start
        self._end = end
        self._etag = etag
        self._args = repeated_args
        #: How many times the stream was resumed on another request (for tests/metrics).
        self.resumes = 0

    @property
    def remaining_bytes(self) -> int:
        return self._end - self._pos

    def _read_some(self, amt: int) -> bytes:
        failures = 0
        while self._pos < self._end:
            try:
                if self._stream is None:
                    self._reopen()
                assert self._stream is not None
                data = self._stream.read(min(amt, self._end - self._pos))
                if not data:
                    raise ShortReadError(
                        f"s3://{self._bucket}/{self._key}: stream ended at byte {self._pos} "
                        f"of {self._end}"
                    )
                if len(data) > self._end - self._pos:
                    raise ShortReadError(f"s3://{self._bucket}/{self._key}: more bytes than asked")
            except Exception as e:
                verdict = classify(e)
                if verdict is Verdict.DEFINITIVE:
                    raise
                failures += 1
                self._client._report_failure(self._endpoint, e)
                self._drop_stream()
                if failures >= self._client._retry.max_attempts:
                    raise
                self.resumes += 1
                continue
            self._pos += len(data)
            if self._pos == self._end:
                self._drop_stream()
            return data
        return b""

    def _reopen(self) -> None:
        rng = f"bytes={self._pos}-{self._end - 1}"

        def op(c: Any) -> Any:
            return c.get_object(
                Bucket=self._bucket, Key=self._key, Range=rng, IfMatch=self._etag, **self._args
            )

        try:
            resp, endpoint = self._client._call_at(
                "GetObject", self._bucket, self._key, True, op
            )
        except Exception as e:
            raise changed_or_raise(e, self._bucket, self._key, self._etag) from e
        self._stream = resp["Body"]
        self._endpoint = endpoint

    def _drop_stream(self) -> None:
        s, self._stream = self._stream, None
        if s is not None:
            try:
                s.close()
            except Exception:
                pass

    def close(self) -> None:
        self._drop_stream()
        super().close()


class RangedBody(_Body):
    """A large object read as parallel ranged GETs.

    The first part is the stream of the first response (``first``, bytes ``[0,
    first_end)``); the rest is cut into ``chunk_bytes`` ranges fetched on ``executor``,
    at most ``window`` of them ahead of the reader. Each range request carries
    ``If-Match: etag``, so a concurrent overwrite or delete ends the read with
    :class:`ObjectChangedError` instead of mixing two versions.
    """

    def __init__(
        self,
        client: "Client",
        bucket: str,
        key: str,
        first: ResumableBody,
        first_end: int,
        total: int,
        etag: str,
        chunk_bytes: int,
        window: int,
        executor: ThreadPoolExecutor,
        repeated_args: Dict[str, Any],
    ) -> None:
        super().__init__()
        self._client = client
        self._bucket = bucket
        self._key = key
        self._first: Optional[ResumableBody] = first
        self._etag = etag
        self._total = total
        self._args = repeated_args
        self._executor = executor
        self._window = window
        self._ranges: List[Tuple[int, int]] = [
            (a, min(a + chunk_bytes, total)) for a in range(first_end, total, chunk_bytes)
        ]
        self._next_range = 0
        self._pending: Deque["Future[bytes]"] = collections.deque()
        self._buf = memoryview(b"")
        self._lock = threading.Lock()
        self._fill()

    def _fill(self) -> None:
        with self._lock:
            while len(self._pending) < self._window and self._next_range < len(self._ranges):
                i = self._next_range
                a, b = self._ranges[i]
                self._pending.append(self._executor.submit(self._fetch, i, a, b))
                self._next_range += 1

    def _fetch(self, i: int, a: int, b: int) -> bytes:
        def op(c: Any) -> bytes:
            r = c.get_object(
                Bucket=self._bucket,
                Key=self._key,
                Range=f"bytes={a}-{b - 1}",
                IfMatch=self._etag,
                **self._args,
            )
            data = r["Body"].read()
            if len(data) != b - a:
                raise ShortReadError(
                    f"s3://{self._bucket}/{self._key}: range {a}-{b - 1} returned "
                    f"{len(data)} bytes"
                )
            return data

        try:
            return self._client._call(
                "GetObject", self._bucket, f"{self._key}\0range{i}", True, op
            )
        except Exception as e:
            raise changed_or_raise(e, self._bucket, self._key, self._etag) from e

    def _read_some(self, amt: int) -> bytes:
        if self._first is not None:
            data = self._first.read(amt)
            if data:
                return data
            self._first.close()
            self._first = None
        while not self._buf:
            with self._lock:
                fut = self._pending.popleft() if self._pending else None
            if fut is None:
                return b""
            self._buf = memoryview(fut.result())
            self._fill()
        out = bytes(self._buf[:amt])
        self._buf = self._buf[len(out):]
        return out

    def close(self) -> None:
        with self._lock:
            for f in self._pending:
                f.cancel()
            self._pending.clear()
            self._next_range = len(self._ranges)
        if self._first is not None:
            self._first.close()
            self._first = None
        self._buf = memoryview(b"")
        super().close()


def parse_content_range(value: str) -> Optional[Tuple[int, int, int]]:
    """``bytes A-B/TOTAL`` → (A, B + 1, TOTAL); None when it is not that."""
    try:
        unit, rest = value.split(" ", 1)
        span, total = rest.split("/", 1)
        a, b = span.split("-", 1)
        if unit != "bytes":
            return None
        return int(a), int(b) + 1, int(total)
    except ValueError:
        return None


PartSupplier = Callable[[], bytes]
