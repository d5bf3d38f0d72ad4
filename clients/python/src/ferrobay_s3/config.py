"""Tunables of the client, grouped by concern. Every size is in bytes, every duration in
seconds; the defaults suit a handful of gateways on a LAN."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
#: S3's smallest multipart part (all but the last).
MIN_PART_BYTES = 5 * MIB
#: S3's largest number of parts in one upload.
MAX_PARTS = 10_000


@dataclass(frozen=True)
class TransferConfig:
    """When and how large objects are moved in parallel parts.

    - ``multipart_threshold_bytes``: a PUT larger than this becomes a multipart upload of
      ``multipart_chunksize_bytes`` parts (grown when needed to stay within 10,000
      parts).
    - ``range_threshold_bytes``: a GET's first request asks for this many bytes; an object
      larger than that is read as parallel ranged GETs of ``range_chunksize_bytes``, each
      pinned to the ETag of the first answer (``If-Match``).
    - ``max_concurrency``: parts in flight per transfer (and the bound on buffered parts:
      memory use is about ``max_concurrency`` × chunk size per transfer).
    """

    multipart_threshold_bytes: int = 16 * MIB
    multipart_chunksize_bytes: int = 8 * MIB
    range_threshold_bytes: int = 16 * MIB
    range_chunksize_bytes: int = 8 * MIB
    max_concurrency: int = 8

    def __post_init__(self) -> None:
        if self.multipart_chunksize_bytes < MIN_PART_BYTES:
            raise ValueError(
                f"multipart_chunksize_bytes {self.multipart_chunksize_bytes}: S3 parts "
                f"(but the last) must be at least {MIN_PART_BYTES} bytes"
            )
        if self.multipart_threshold_bytes < 1:
            raise ValueError("multipart_threshold_bytes must be at least 1")
        if self.range_threshold_bytes < 1 or self.range_chunksize_bytes < 1:
            raise ValueError("range_threshold_bytes and range_chunksize_bytes must be at least 1")
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")


@dataclass(frozen=True)
class HealthConfig:
    """Ejection and return of gateway endpoints.

    Passive: a connection error or a 5xx answer ejects the endpoint for
    ``eject_base_s`` × 2^(consecutive failures − 1), at most ``eject_max_s``; a request
    that succeeds resets the count. Active: a background thread probes every endpoint each
    ``probe_interval_s`` (an ejected one only once its ejection time is over) with an HTTP
    ``HEAD probe_path``: any HTTP answer within ``probe_timeout_s`` but 500, 502, 503 or
    504 means the gateway serves (501, which ``HEAD /`` gets today, is an answer). An ejected endpoint returns when a probe succeeds (or, with
    ``probe_interval_s=0``, which turns probing off, when its ejection time is over).
    The endpoint source (file, URL, cluster API) is read again every
    ``refresh_interval_s``.
    """

    eject_base_s: float = 1.0
    eject_max_s: float = 30.0
    probe_interval_s: float = 1.0
    probe_timeout_s: float = 2.0
    probe_path: str = "/"
    probe_workers: int = 4
    refresh_interval_s: float = 30.0

    def __post_init__(self) -> None:
        if self.eject_base_s <= 0 or self.eject_max_s < self.eject_base_s:
            raise ValueError("need 0 < eject_base_s <= eject_max_s")
        if self.probe_interval_s < 0 or self.probe_timeout_s <= 0:
            raise ValueError("probe_interval_s must be >= 0 and probe_timeout_s > 0")
        if self.probe_workers < 1:
            raise ValueError("probe_workers must be at least 1")
        if not self.probe_path.startswith("/"):
            raise ValueError(f"probe_path {self.probe_path!r} must start with /")


@dataclass(frozen=True)
class RetryConfig:
    """Retries on another endpoint.

    A request is tried at most ``max_attempts`` times, each on the next endpoint of its
    rendezvous order that it has not tried yet; before attempt n (n ≥ 2) it waits
    between half and all of ``backoff_base_s`` × 2^(n − 2), at most ``backoff_max_s``.
    Only idempotent requests are retried after they may have reached a gateway; any
    request is retried when the connection could not be opened. A definitive S3 answer
    (4xx) is never retried.
    """

    max_attempts: int = 6
    backoff_base_s: float = 0.05
    backoff_max_s: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.backoff_base_s < 0 or self.backoff_max_s < self.backoff_base_s:
            raise ValueError("need 0 <= backoff_base_s <= backoff_max_s")
