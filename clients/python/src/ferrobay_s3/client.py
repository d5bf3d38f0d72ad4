"""The client: boto3's S3 calls, spread over every gateway endpoint by rendezvous hashing,
retried on another endpoint when one fails, with parallel transfers for large objects."""

from __future__ import annotations

import binascii
import hashlib
import http.client
import io
import logging
import os
import shutil
import ssl
import threading
import time
import urllib.parse
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import (
    TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, TypeVar, Union,
)

import boto3.session
import botocore.config
import botocore.exceptions

from .bodies import (
    REPEATED_GET_ARGS, PartSupplier, RangedBody, ResumableBody, parse_content_range,
)
from .config import MAX_PARTS, HealthConfig, RetryConfig, TransferConfig
from .endpoints import PathArg, make_source, normalize
from .errors import EndpointsExhaustedError, NoEndpointsError
from .health import EndpointPool, EndpointStatus, HealthChecker, _one_line
from .retry import Backoff, Verdict, classify, error_code, http_status, may_retry

if TYPE_CHECKING:  # pragma: no cover
    from .dataset import ObjectDataset

log = logging.getLogger("ferrobay_s3")

T = TypeVar("T")
Resolver = Callable[[BaseException], Any]

#: The ``Checksum*`` fields of UploadPart answers that CompleteMultipartUpload repeats.
CHECKSUM_FIELDS = (
    "ChecksumCRC32", "ChecksumCRC32C", "ChecksumCRC64NVME", "ChecksumSHA1", "ChecksumSHA256",
)
#: PutObject arguments that CreateMultipartUpload takes as they are.
MULTIPART_CREATE_ARGS = frozenset({
    "ACL", "CacheControl", "ContentDisposition", "ContentEncoding", "ContentLanguage",
    "ContentType", "Expires", "GrantFullControl", "GrantRead", "GrantReadACP", "GrantWriteACP",
    "Metadata", "ServerSideEncryption", "StorageClass", "WebsiteRedirectLocation",
    "SSECustomerAlgorithm", "SSECustomerKey", "SSECustomerKeyMD5", "SSEKMSKeyId",
    "SSEKMSEncryptionContext", "BucketKeyEnabled", "RequestPayer", "Tagging",
    "ObjectLockMode", "ObjectLockRetainUntilDate", "ObjectLockLegalHoldStatus",
    "ExpectedBucketOwner", "ChecksumAlgorithm",
})
#: PutObject arguments that belong to CompleteMultipartUpload.
MULTIPART_COMPLETE_ARGS = frozenset({"IfNoneMatch", "IfMatch"})
#: PutObject arguments each UploadPart repeats.
MULTIPART_PART_ARGS = frozenset({
    "SSECustomerAlgorithm", "SSECustomerKey", "SSECustomerKeyMD5", "RequestPayer",
    "ExpectedBucketOwner", "ChecksumAlgorithm",
})
#: Arguments that carry a value of the whole body: such a PUT is never split into parts.
WHOLE_BODY_ARGS = frozenset({"ContentMD5", "ContentLength"} | set(CHECKSUM_FIELDS))
#: Conditions that make a write or delete non-idempotent (a repeat may be refused).
CONDITION_ARGS = frozenset({"IfMatch", "IfNoneMatch"})
#: S3's largest single PUT.
MAX_SINGLE_PUT_BYTES = 5 << 30
#: GetObject arguments that make the client send one plain GET (no parallel ranges).
SINGLE_GET_ARGS = frozenset({"Range", "PartNumber", "ChecksumMode"})

Body = Union[bytes, bytearray, memoryview, str, io.IOBase, Any]


class Client:
    """An S3 client over several Ferrobay gateways.

    Give the gateways as ``endpoints=["http://10.0.0.21:9000", ...]``, as
    ``endpoints_file=`` (a JSON file or a list of them, such as the files ``ferrobay s3
    run --endpoints-file`` writes) or as ``cluster_api="http://host:port"`` (reads ``GET
    /v1/s3/endpoints``; see the README for the document). File and URL sources are read
    again every ``health.refresh_interval_s``.

    Every object request goes to the healthy endpoint with the highest rendezvous score
    for its ``(bucket, key)``; bucket requests hash the bucket, listings the bucket and
    prefix, parts of a large transfer the key and part number (so one large object is
    moved through every gateway at once). A request that fails with a connection error
    or a 5xx answer ejects the endpoint and, if it is idempotent, is sent to the next
    endpoint in its order; S3 errors (4xx) are raised at once, as boto3 raises them
    (``botocore.exceptions.ClientError``). boto3's own retries are off (they would retry
    the same endpoint).

    Methods take boto3's argument names (``Bucket=``, ``Key=``, ``Body=``, …) and return
    boto3's answers, except that GetObject's ``Body`` is a stream that resumes on another
    gateway when one dies, and large objects move in parallel parts (see
    :class:`TransferConfig`). Thread-safe; a client may be pickled (the copy starts its
    own connections and health thread, e.g. in a DataLoader worker) and survives a fork.

    Test seams (keyword-only): ``clock`` and ``sleep`` (time), ``client_factory`` (makes
    the per-endpoint S3 client; faults are injected there), ``probe`` (the active health
    probe of one endpoint URL; raises when the endpoint is down),
    ``health_thread=False`` (no background thread; call :meth:`run_health_checks`).
    """

    def __init__(
        self,
        endpoints: Optional[Sequence[str]] = None,
        *,
        endpoints_file: Union[None, PathArg, Sequence[PathArg]] = None,
        cluster_api: Optional[str] = None,
        access_key: Optional[str] = None,
        secret_key: Optional[str] = None,
        session_token: Optional[str] = None,
        region: str = "us-east-1",
        transfer: TransferConfig = TransferConfig(),
        health: HealthConfig = HealthConfig(),
        retry: RetryConfig = RetryConfig(),
        connect_timeout_s: float = 2.0,
        read_timeout_s: float = 60.0,
        verify: Union[None, bool, str] = None,
        boto_config: Optional[botocore.config.Config] = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        client_factory: Optional[Callable[[str], Any]] = None,
        probe: Optional[Callable[[str], None]] = None,
        health_thread: bool = True,
    ) -> None:
        self._init_args = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self._source = make_source(endpoints, endpoints_file, cluster_api)
        initial = [normalize(e) for e in endpoints] if endpoints is not None else self._source()  # type: ignore[misc]
        if not initial:
            raise NoEndpointsError("no gateway endpoints given")
        self._initial = initial
        self._access_key = access_key
        self._secret_key = secret_key
        self._session_token = session_token
        self._region = region
        self._transfer = transfer
        self._health = health
        self._retry = retry
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._verify = verify
        self._boto_config = boto_config
        self._clock = clock
        self._sleep = sleep
        self._client_factory = client_factory
        self._probe_fn = probe or self._probe_http
        self._health_thread = health_thread
        self._start_runtime()

    # -- lifecycle ----------------------------------------------------------------------

    def _start_runtime(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._backoff = Backoff(self._retry)
        self._pool = EndpointPool(
            self._initial, self._health, clock=self._clock,
            probing=self._health.probe_interval_s > 0,
        )
        self._checker = HealthChecker(
            self._pool, self._probe_fn, self._health, refresh=self._source, clock=self._clock
        )
        if self._health_thread:
            self._checker.start()
        self._boto_clients: Dict[str, Any] = {}
        self._session: Optional[boto3.session.Session] = None
        self._executor: Optional[ThreadPoolExecutor] = None
        self._closed = False

    def _runtime(self) -> None:
        """After a fork the threads and connections of the parent are gone: start anew."""
        if self._pid != os.getpid():
            self._start_runtime()

    def close(self) -> None:
        """Stops the health thread and the transfer threads; closes connections."""
        if self._closed or self._pid != os.getpid():
            return
        self._closed = True
        self._checker.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        with self._lock:
            clients, self._boto_clients = self._boto_clients, {}
        for c in clients.values():
            close = getattr(c, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> Dict[str, Any]:
        return dict(self._init_args)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    # -- endpoints and health -----------------------------------------------------------

    def endpoints(self) -> List[str]:
        """The endpoints known now (from the list or the last read of the source)."""
        return self._pool.endpoints()

    def healthy_endpoints(self) -> List[str]:
        return self._pool.healthy()

    def endpoint_status(self) -> List[EndpointStatus]:
        """Health and request counters of every endpoint."""
        return self._pool.status()

    def endpoint_for(self, Bucket: str, Key: str = "") -> str:
        """The endpoint a request for ``(Bucket, Key)`` goes to now."""
        return self._pool.ranked(Bucket, Key)[0]

    def run_health_checks(self) -> None:
        """One round of probes and source refresh, in this thread (with
        ``health_thread=False``)."""
        self._checker.run_once()

    def _probe_http(self, url: str) -> None:
        """``HEAD probe_path`` on the endpoint: any HTTP answer but a server failure
        (500, 502, 503, 504) means it serves."""
        parsed = urllib.parse.urlsplit(url)
        timeout = self._health.probe_timeout_s
        conn: http.client.HTTPConnection
        if parsed.scheme == "https":
            ctx = ssl.create_default_context(
                cafile=self._verify if isinstance(self._verify, str) else None
            )
            if self._verify is False:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            conn = http.client.HTTPSConnection(
                parsed.hostname or "", parsed.port, timeout=timeout, context=ctx
            )
        else:
            conn = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=timeout)
        try:
            conn.request("HEAD", self._health.probe_path)
            status = conn.getresponse().status
        finally:
            conn.close()
        if status in (500, 502, 503, 504):
            raise ConnectionError(f"HEAD {self._health.probe_path}: HTTP {status}")

    # -- the request loop ---------------------------------------------------------------

    def _boto(self, endpoint: str) -> Any:
        with self._lock:
            c = self._boto_clients.get(endpoint)
            if c is not None:
                return c
            if self._client_factory is not None:
                c = self._client_factory(endpoint)
            else:
                if self._session is None:
                    self._session = boto3.session.Session(
                        aws_access_key_id=self._access_key,
                        aws_secret_access_key=self._secret_key,
                        aws_session_token=self._session_token,
                        region_name=self._region,
                    )
                c = self._session.client(
                    "s3", endpoint_url=endpoint, verify=self._verify, config=self._botocore_config()
                )
                _no_expect_continue(c)
            self._boto_clients[endpoint] = c
            return c

    def _botocore_config(self) -> botocore.config.Config:
        base = botocore.config.Config(
            connect_timeout=self._connect_timeout_s,
            read_timeout=self._read_timeout_s,
            max_pool_connections=4 * self._transfer.max_concurrency + 8,
            tcp_keepalive=True,
        )
        if self._boto_config is not None:
            base = base.merge(self._boto_config)
        # Gateways take path-style requests; retries are this client's job (on another
        # endpoint), never boto3's (same endpoint).
        return base.merge(
            botocore.config.Config(
                s3={"addressing_style": "path"},
                retries={"total_max_attempts": 1, "mode": "standard"},
            )
        )

    def _report_failure(self, endpoint: str, e: BaseException) -> None:
        self._pool.report_failure(endpoint, f"{type(e).__name__}: {_one_line(e)}")

    def _call_at(
        self,
        operation: str,
        bucket: str,
        route_key: str,
        idempotent: bool,
        fn: Callable[[Any], T],
        resolve: Optional[Resolver] = None,
    ) -> Tuple[T, str]:
        """Runs ``fn(s3_client)`` on the endpoints in the rendezvous order of ``(bucket,
        route_key)`` until it succeeds; returns its result and the endpoint that gave it.

        ``resolve`` is called with a definitive error that follows a failed attempt which
        may have reached a gateway (the first attempt may have taken effect and only its
        answer was lost); it returns the result the caller should see, or raises.
        """
        self._runtime()
        tried: Set[str] = set()
        maybe_applied = False
        last: Optional[BaseException] = None
        for attempt in range(self._retry.max_attempts):
            if attempt:
                self._sleep(self._backoff.delay_s(attempt))
            ranked = self._pool.ranked(bucket, route_key)
            if not ranked:
                raise NoEndpointsError("the endpoint list is empty")
            endpoint = next((e for e in ranked if e not in tried), None)
            if endpoint is None:  # every endpoint tried: start over in order
                tried.clear()
                endpoint = ranked[0]
            tried.add(endpoint)
            try:
                result = fn(self._boto(endpoint))
            except Exception as e:
                verdict = classify(e)
                if verdict is Verdict.DEFINITIVE:
                    if isinstance(e, botocore.exceptions.ClientError):
                        self._pool.report_answer(endpoint)
                    if maybe_applied and resolve is not None:
                        return resolve(e), endpoint
                    raise
                self._report_failure(endpoint, e)
                log.debug("%s on %s failed (%s): %s", operation, endpoint, verdict.value, e)
                if not may_retry(verdict, idempotent):
                    raise
                maybe_applied = maybe_applied or verdict is Verdict.ENDPOINT_FAILED
                last = e
                continue
            self._pool.report_success(endpoint)
            return result, endpoint
        assert last is not None
        raise EndpointsExhaustedError(operation, self._retry.max_attempts, last) from last

    def _call(
        self,
        operation: str,
        bucket: str,
        route_key: str,
        idempotent: bool,
        fn: Callable[[Any], T],
        resolve: Optional[Resolver] = None,
    ) -> T:
        return self._call_at(operation, bucket, route_key, idempotent, fn, resolve)[0]

    def _transfer_executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._transfer.max_concurrency,
                    thread_name_prefix="ferrobay-s3-transfer",
                )
            return self._executor

    # -- any operation ------------------------------------------------------------------

    def call(self, operation: str, *, idempotent: bool = True, **kwargs: Any) -> Any:
        """Any boto3 S3 method by name (``"put_bucket_versioning"``, ``"list_parts"``…),
        routed by its ``Bucket`` and ``Key`` arguments and retried on another endpoint if
        ``idempotent`` (a body to be re-sent must then be bytes, not a file); the escape
        hatch for calls without a method here."""
        bucket = str(kwargs.get("Bucket", ""))
        key = str(kwargs.get("Key", ""))
        return self._call(
            operation, bucket, key, idempotent, lambda c: getattr(c, operation)(**kwargs)
        )

    # -- buckets ------------------------------------------------------------------------

    def list_buckets(self, **kwargs: Any) -> Dict[str, Any]:
        return self._call("ListBuckets", "", "", True, lambda c: c.list_buckets(**kwargs))

    def create_bucket(self, Bucket: str, **kwargs: Any) -> Dict[str, Any]:
        """CreateBucket; a repeat after a lost answer that finds the bucket already ours
        (409 BucketAlreadyOwnedByYou) counts as success."""

        def resolve(e: BaseException) -> Dict[str, Any]:
            if error_code(e) == "BucketAlreadyOwnedByYou":
                return {"Location": f"/{Bucket}"}
            raise e

        return self._call(
            "CreateBucket", Bucket, "", True,
            lambda c: c.create_bucket(Bucket=Bucket, **kwargs), resolve,
        )

    def delete_bucket(self, Bucket: str, **kwargs: Any) -> Dict[str, Any]:
        """DeleteBucket; a repeat after a lost answer that finds no bucket counts as
        success."""

        def resolve(e: BaseException) -> Dict[str, Any]:
            if error_code(e) == "NoSuchBucket":
                return {}
            raise e

        return self._call(
            "DeleteBucket", Bucket, "", True,
            lambda c: c.delete_bucket(Bucket=Bucket, **kwargs), resolve,
        )

    def head_bucket(self, Bucket: str, **kwargs: Any) -> Dict[str, Any]:
        return self._call(
            "HeadBucket", Bucket, "", True, lambda c: c.head_bucket(Bucket=Bucket, **kwargs)
        )

    # -- listings -----------------------------------------------------------------------

    def list_objects_pages(
        self,
        Bucket: str,
        Prefix: str = "",
        Delimiter: Optional[str] = None,
        StartAfter: Optional[str] = None,
        PageSize: int = 1000,
        **kwargs: Any,
    ) -> Iterator[Dict[str, Any]]:
        """ListObjectsV2 pages (``Contents``, ``CommonPrefixes``) until the listing ends;
        each page is retried on its own (continuation tokens work on any gateway)."""
        token: Optional[str] = None
        route = f"\0list\0{Prefix}"
        while True:
            args: Dict[str, Any] = dict(Bucket=Bucket, Prefix=Prefix, MaxKeys=PageSize, **kwargs)
            if Delimiter:
                args["Delimiter"] = Delimiter
            if token:
                args["ContinuationToken"] = token
            elif StartAfter:
                args["StartAfter"] = StartAfter
            page = self._call(
                "ListObjectsV2", Bucket, route, True, lambda c: c.list_objects_v2(**args)
            )
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def list_objects(
        self,
        Bucket: str,
        Prefix: str = "",
        Delimiter: Optional[str] = None,
        StartAfter: Optional[str] = None,
        PageSize: int = 1000,
        **kwargs: Any,
    ) -> Iterator[Dict[str, Any]]:
        """Every object under ``Prefix``, in key order, as ListObjectsV2's ``Contents``
        entries (``Key``, ``Size``, ``ETag``, ``LastModified``…), fetched page by page as
        the generator is consumed."""
        for page in self.list_objects_pages(
            Bucket, Prefix, Delimiter, StartAfter, PageSize, **kwargs
        ):
            yield from page.get("Contents", [])

    def list_prefixes(
        self, Bucket: str, Prefix: str = "", Delimiter: str = "/", **kwargs: Any
    ) -> Iterator[str]:
        """The common prefixes ("directories") directly under ``Prefix``."""
        for page in self.list_objects_pages(Bucket, Prefix, Delimiter, **kwargs):
            for p in page.get("CommonPrefixes", []):
                yield p["Prefix"]

    # -- small object calls -------------------------------------------------------------

    def head_object(self, Bucket: str, Key: str, **kwargs: Any) -> Dict[str, Any]:
        return self._call(
            "HeadObject", Bucket, Key, True,
            lambda c: c.head_object(Bucket=Bucket, Key=Key, **kwargs),
        )

    def delete_object(self, Bucket: str, Key: str, **kwargs: Any) -> Dict[str, Any]:
        """DeleteObject (retried unless conditional: a repeat of a conditional delete
        that took effect would be refused)."""
        idempotent = not (CONDITION_ARGS & kwargs.keys())
        return self._call(
            "DeleteObject", Bucket, Key, idempotent,
            lambda c: c.delete_object(Bucket=Bucket, Key=Key, **kwargs),
        )

    def delete_objects(self, Bucket: str, Delete: Mapping[str, Any], **kwargs: Any) -> Dict[str, Any]:
        return self._call(
            "DeleteObjects", Bucket, "", True,
            lambda c: c.delete_objects(Bucket=Bucket, Delete=Delete, **kwargs),
        )

    def copy_object(
        self, Bucket: str, Key: str, CopySource: Union[str, Mapping[str, Any]], **kwargs: Any
    ) -> Dict[str, Any]:
        idempotent = not (CONDITION_ARGS & kwargs.keys())
        return self._call(
            "CopyObject", Bucket, Key, idempotent,
            lambda c: c.copy_object(Bucket=Bucket, Key=Key, CopySource=CopySource, **kwargs),
        )

    # -- PUT ----------------------------------------------------------------------------

    def put_object(self, Bucket: str, Key: str, Body: Body = b"", **kwargs: Any) -> Dict[str, Any]:
        """PutObject. ``Body`` is bytes, str (UTF-8) or a readable file object. A body
        larger than ``multipart_threshold_bytes`` is sent as a parallel multipart upload
        (aborted if it fails) unless ``kwargs`` carry a value of the whole body
        (``ContentMD5``, ``Checksum*``); the answer is then CompleteMultipartUpload's
        (``ETag`` ends in ``-N``)."""
        if isinstance(Body, str):
            Body = Body.encode("utf-8")
        if isinstance(Body, (bytes, bytearray, memoryview)):
            data = bytes(Body) if not isinstance(Body, bytes) else Body
            if len(data) > self._transfer.multipart_threshold_bytes and self._may_split(kwargs):
                chunk = self._part_size(len(data))
                parts = (
                    (n, _slice_part(data, a, chunk))
                    for n, a in enumerate(range(0, len(data), chunk), start=1)
                )
                return self._multipart_upload(Bucket, Key, parts, kwargs)
            return self._put_whole(Bucket, Key, data, kwargs)
        if hasattr(Body, "read"):
            return self._put_fileobj(Bucket, Key, Body, kwargs)
        raise TypeError(f"Body must be bytes, str or a readable file object, not {type(Body).__name__}")

    def upload_fileobj(
        self, Fileobj: Any, Bucket: str, Key: str, ExtraArgs: Optional[Mapping[str, Any]] = None
    ) -> Dict[str, Any]:
        """Uploads a readable file object (as boto3's ``upload_fileobj``; returns the S3
        answer). Seekable regular files are read in parallel (``os.pread``); other
        streams part by part."""
        return self._put_fileobj(Bucket, Key, Fileobj, dict(ExtraArgs or {}))

    def upload_file(
        self, Filename: PathArg, Bucket: str, Key: str,
        ExtraArgs: Optional[Mapping[str, Any]] = None,
    ) -> Dict[str, Any]:
        """Uploads a file (as boto3's ``upload_file``; returns the S3 answer)."""
        with open(Filename, "rb") as f:
            return self._put_fileobj(Bucket, Key, f, dict(ExtraArgs or {}))

    def _may_split(self, kwargs: Mapping[str, Any]) -> bool:
        return not (WHOLE_BODY_ARGS & kwargs.keys())

    def _part_size(self, total: int) -> int:
        chunk = self._transfer.multipart_chunksize_bytes
        return max(chunk, -(-total // MAX_PARTS))

    def _put_whole(self, Bucket: str, Key: str, data: bytes, kwargs: Mapping[str, Any]) -> Dict[str, Any]:
        idempotent = not (CONDITION_ARGS & kwargs.keys())
        return self._call(
            "PutObject", Bucket, Key, idempotent,
            lambda c: c.put_object(Bucket=Bucket, Key=Key, Body=data, **kwargs),
        )

    def _put_fileobj(self, Bucket: str, Key: str, f: Any, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        threshold = self._transfer.multipart_threshold_bytes
        size = _remaining_size(f)
        if size is not None and (size <= threshold or not self._may_split(kwargs)):
            return self._put_whole(Bucket, Key, _read_exactly(f, size), kwargs)
        if size is not None:
            chunk = self._part_size(size)
            fd = _regular_fd(f)
            start = f.tell()
            if fd is not None:
                # Parts read in the transfer threads, in parallel.
                parts: Iterator[Tuple[int, PartSupplier]] = (
                    (n, _pread_part(fd, min(chunk, size - a), start + a))
                    for n, a in enumerate(range(0, size, chunk), start=1)
                )
            else:
                parts = (
                    (n, _ready(_read_exactly(f, min(chunk, size - a))))
                    for n, a in enumerate(range(0, size, chunk), start=1)
                )
            try:
                return self._multipart_upload(Bucket, Key, parts, kwargs)
            finally:
                if fd is not None:
                    f.seek(start + size)
        # A stream of unknown length: a single PUT if it ends within the threshold.
        head = _read_up_to(f, threshold + 1)
        if len(head) <= threshold or not self._may_split(kwargs):
            rest = b"" if len(head) <= threshold else _read_up_to(f, MAX_SINGLE_PUT_BYTES)
            return self._put_whole(Bucket, Key, head + rest, kwargs)
        chunk = self._transfer.multipart_chunksize_bytes
        return self._multipart_upload(Bucket, Key, _stream_parts(head, f, chunk), kwargs)

    def _multipart_upload(
        self, Bucket: str, Key: str, parts: Iterator[Tuple[int, PartSupplier]],
        kwargs: Mapping[str, Any],
    ) -> Dict[str, Any]:
        unknown = set(kwargs) - MULTIPART_CREATE_ARGS - MULTIPART_COMPLETE_ARGS
        if unknown:
            raise TypeError(f"put arguments not usable for a multipart upload: {sorted(unknown)}")
        create_args = {k: v for k, v in kwargs.items() if k in MULTIPART_CREATE_ARGS}
        part_args = {k: v for k, v in kwargs.items() if k in MULTIPART_PART_ARGS}
        complete_args = {k: v for k, v in kwargs.items() if k in MULTIPART_COMPLETE_ARGS}
        # Retried like the others: a repeat after a lost answer leaves an empty upload
        # behind (no data), which is better than failing the PUT.
        created = self._call(
            "CreateMultipartUpload", Bucket, Key, True,
            lambda c: c.create_multipart_upload(Bucket=Bucket, Key=Key, **create_args),
        )
        upload_id = created["UploadId"]
        executor = self._transfer_executor()
        window = self._transfer.max_concurrency
        pending: Set["Future[Dict[str, Any]]"] = set()
        done: List[Dict[str, Any]] = []
        try:
            for number, supplier in parts:
                while len(pending) >= window:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    done += [f.result() for f in finished]
                pending.add(
                    executor.submit(
                        self._upload_part, Bucket, Key, upload_id, number, supplier, part_args
                    )
                )
            finished, pending = wait(pending)
            done += [f.result() for f in finished]
            done.sort(key=lambda p: p["PartNumber"])
            return self._complete(Bucket, Key, upload_id, done, complete_args)
        except BaseException:
            for f in pending:
                f.cancel()
            wait(pending)
            self._abort_quietly(Bucket, Key, upload_id)
            raise

    def _upload_part(
        self, Bucket: str, Key: str, upload_id: str, number: int, supplier: PartSupplier,
        part_args: Mapping[str, Any],
    ) -> Dict[str, Any]:
        data = supplier()
        resp = self._call(
            "UploadPart", Bucket, f"{Key}\0part{number}", True,
            lambda c: c.upload_part(
                Bucket=Bucket, Key=Key, UploadId=upload_id, PartNumber=number, Body=data,
                **part_args,
            ),
        )
        part = {"PartNumber": number, "ETag": resp["ETag"]}
        for field in CHECKSUM_FIELDS:
            if resp.get(field):
                part[field] = resp[field]
        return part

    def _complete(
        self, Bucket: str, Key: str, upload_id: str, parts: List[Dict[str, Any]],
        complete_args: Mapping[str, Any],
    ) -> Dict[str, Any]:
        expected = multipart_etag([p["ETag"] for p in parts])

        def resolve(e: BaseException) -> Dict[str, Any]:
            # An earlier attempt completed the upload but its answer was lost: the
            # object now has exactly the ETag these parts make.
            if error_code(e) == "NoSuchUpload":
                head = self.head_object(Bucket=Bucket, Key=Key)
                if head.get("ETag") == expected:
                    return {
                        "Bucket": Bucket, "Key": Key, "ETag": expected,
                        **({"VersionId": head["VersionId"]} if head.get("VersionId") else {}),
                    }
            raise e

        return self._call(
            "CompleteMultipartUpload", Bucket, Key, True,
            lambda c: c.complete_multipart_upload(
                Bucket=Bucket, Key=Key, UploadId=upload_id,
                MultipartUpload={"Parts": parts}, **complete_args,
            ),
            resolve,
        )

    def _abort_quietly(self, Bucket: str, Key: str, upload_id: str) -> None:
        try:
            self._call(
                "AbortMultipartUpload", Bucket, Key, True,
                lambda c: c.abort_multipart_upload(Bucket=Bucket, Key=Key, UploadId=upload_id),
                resolve=lambda e: {} if error_code(e) == "NoSuchUpload" else _raise(e),
            )
        except Exception as e:
            log.warning("abort of upload %s of s3://%s/%s failed: %s", upload_id, Bucket, Key, e)

    # -- GET ----------------------------------------------------------------------------

    def get_object(self, Bucket: str, Key: str, **kwargs: Any) -> Dict[str, Any]:
        """GetObject. The answer's ``Body`` resumes on another gateway if the stream
        breaks. The first request asks for ``range_threshold_bytes``; if the object is
        larger, the rest is read as parallel ranged GETs pinned to the first answer's
        ETag (a concurrent overwrite raises :class:`ObjectChangedError` while reading),
        and the answer describes the whole object (``ContentLength``, no
        ``ContentRange``). ``Range``, ``PartNumber`` or ``ChecksumMode`` make it one
        plain GET."""
        single = bool(SINGLE_GET_ARGS & kwargs.keys())
        first_range = None if single else f"bytes=0-{self._transfer.range_threshold_bytes - 1}"

        def op(c: Any) -> Dict[str, Any]:
            if first_range is None:
                return c.get_object(Bucket=Bucket, Key=Key, **kwargs)
            try:
                return c.get_object(Bucket=Bucket, Key=Key, Range=first_range, **kwargs)
            except botocore.exceptions.ClientError as e:
                if http_status(e) != 416:
                    raise
                # An empty object has no byte 0: ask for all of it.
                return c.get_object(Bucket=Bucket, Key=Key, **kwargs)

        resp, endpoint = self._call_at("GetObject", Bucket, Key, True, op)
        repeated = {k: v for k, v in kwargs.items() if k in REPEATED_GET_ARGS}
        if resp.get("VersionId") and "VersionId" not in repeated and resp["VersionId"] != "null":
            repeated["VersionId"] = resp["VersionId"]
        etag = resp.get("ETag", "")
        length = int(resp.get("ContentLength", 0))
        span = parse_content_range(resp.get("ContentRange", "") or "")
        if span is None or single:
            start = span[0] if span else 0
            resp["Body"] = ResumableBody(
                self, Bucket, Key, resp["Body"], endpoint, start, start + length, etag, repeated
            )
            return resp
        a, b, total = span
        if (a, b - a) != (0, length):
            resp["Body"].close()
            raise botocore.exceptions.ClientError(
                {"Error": {"Code": "InvalidRange", "Message": f"gateway answered {resp['ContentRange']} "
                           f"with {length} bytes for {first_range}"},
                 "ResponseMetadata": {"HTTPStatusCode": 502}},
                "GetObject",
            )
        first = ResumableBody(self, Bucket, Key, resp["Body"], endpoint, 0, b, etag, repeated)
        if b < total:
            resp["Body"] = RangedBody(
                self, Bucket, Key, first, b, total, etag,
                chunk_bytes=self._transfer.range_chunksize_bytes,
                window=self._transfer.max_concurrency,
                executor=self._transfer_executor(),
                repeated_args=repeated,
            )
        else:
            resp["Body"] = first
        resp["ContentLength"] = total
        resp.pop("ContentRange", None)
        resp.setdefault("ResponseMetadata", {})["HTTPStatusCode"] = 200
        return resp

    def download_fileobj(
        self, Bucket: str, Key: str, Fileobj: Any, ExtraArgs: Optional[Mapping[str, Any]] = None
    ) -> None:
        """Writes the object to a writable file object (as boto3's ``download_fileobj``)."""
        body = self.get_object(Bucket=Bucket, Key=Key, **dict(ExtraArgs or {}))["Body"]
        try:
            shutil.copyfileobj(body, Fileobj, 1 << 20)
        finally:
            body.close()

    def download_file(
        self, Bucket: str, Key: str, Filename: PathArg,
        ExtraArgs: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Writes the object to ``Filename`` (through a temporary file in the same
        directory, renamed when complete: a failed download leaves no partial file)."""
        target = os.fspath(Filename)
        tmp = f"{target}.{uuid.uuid4().hex[:8]}.part"
        try:
            with open(tmp, "wb") as f:
                self.download_fileobj(Bucket, Key, f, ExtraArgs)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    # -- datasets -----------------------------------------------------------------------

    def dataset(self, bucket: str, prefix: str = "", **options: Any) -> "ObjectDataset[Any]":
        """An iterable over the objects under ``prefix`` for training loops; see
        :class:`ferrobay_s3.ObjectDataset` for the options (shuffle, seed, transform,
        sharding, prefetch)."""
        from .dataset import ObjectDataset

        return ObjectDataset(self, bucket, prefix, **options)


# -- helpers ---------------------------------------------------------------------------


def multipart_etag(part_etags: Sequence[str]) -> str:
    """The ETag S3 gives a multipart object: MD5 of the parts' binary MD5s, ``-N``."""
    h = hashlib.md5()
    for e in part_etags:
        h.update(binascii.unhexlify(e.strip('"')))
    return f'"{h.hexdigest()}-{len(part_etags)}"'


def _no_expect_continue(c: Any) -> None:
    """Stops boto3 from sending ``Expect: 100-continue``: on a reused connection botocore
    can mis-parse the answer that follows a ``100 Continue`` (its headers are lost, and
    the read waits for the read timeout). Bodies go at once instead."""
    import botocore.handlers

    c.meta.events.unregister("before-call.s3", botocore.handlers.add_expect_header)


def _raise(e: BaseException) -> Any:
    raise e


def _ready(data: bytes) -> PartSupplier:
    return lambda: data


def _slice_part(data: bytes, offset: int, length: int) -> PartSupplier:
    return lambda: data[offset : offset + length]


def _pread_part(fd: int, length: int, offset: int) -> PartSupplier:
    """Reads the part when called (in a transfer thread; ``os.pread`` needs no lock)."""
    return lambda: _pread_exactly(fd, length, offset)


def _remaining_size(f: Any) -> Optional[int]:
    """Bytes from the current position to the end, for seekable files; else None."""
    try:
        if not f.seekable():
            return None
        pos = f.tell()
        end = f.seek(0, io.SEEK_END)
        f.seek(pos)
        return max(0, end - pos)
    except (AttributeError, OSError, ValueError):
        return None


def _regular_fd(f: Any) -> Optional[int]:
    try:
        fd = f.fileno()
        import stat

        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None


def _read_exactly(f: Any, n: int) -> bytes:
    data = _read_up_to(f, n)
    if len(data) != n:
        raise ValueError(f"the file ended after {len(data)} of {n} bytes (did it shrink?)")
    return data


def _read_up_to(f: Any, n: int) -> bytes:
    parts = []
    left = n
    while left > 0:
        b = f.read(left)
        if not b:
            break
        if isinstance(b, str):
            raise TypeError("the file object must be opened in binary mode")
        parts.append(b)
        left -= len(b)
    return b"".join(parts)


def _pread_exactly(fd: int, n: int, offset: int) -> bytes:
    parts = []
    got = 0
    while got < n:
        b = os.pread(fd, n - got, offset + got)
        if not b:
            raise ValueError(f"the file ended at byte {offset + got} (did it shrink?)")
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def _stream_parts(head: bytes, f: Any, chunk: int) -> Iterator[Tuple[int, PartSupplier]]:
    """Parts of a stream whose first bytes were already read into ``head``."""
    buf = head
    number = 1
    while True:
        while len(buf) < chunk:
            more = _read_up_to(f, chunk - len(buf))
            if not more:
                break
            buf += more
        if not buf:
            return
        if number > MAX_PARTS:
            raise ValueError(f"the stream needs more than {MAX_PARTS} parts of {chunk} bytes")
        yield number, _ready(buf[:chunk])
        buf = buf[chunk:]
        number += 1

