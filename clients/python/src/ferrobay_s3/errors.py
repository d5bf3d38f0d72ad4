"""Errors of the client library. S3 errors a gateway answered (4xx, and 5xx once every
attempt is spent) are raised as boto3 raises them, ``botocore.exceptions.ClientError``;
the classes here describe what happens above one request."""

from __future__ import annotations

from typing import Optional


class FerrobayS3Error(Exception):
    """Base class of the errors this library raises itself."""


class NoEndpointsError(FerrobayS3Error):
    """No gateway endpoint is known: the list was empty, or the endpoint source
    (file, URL, cluster API) listed none."""


class EndpointsExhaustedError(FerrobayS3Error):
    """A request failed on every attempt (connection errors or 5xx answers); ``last``
    is the error of the final attempt."""

    def __init__(self, operation: str, attempts: int, last: BaseException) -> None:
        super().__init__(
            f"{operation}: failed {attempts} times on the gateways; last error: {last}"
        )
        self.operation = operation
        self.attempts = attempts
        self.last = last


class ObjectChangedError(FerrobayS3Error):
    """The object was overwritten or deleted while it was being read in parts: a ranged
    GET pinned to the ETag of the first part was refused (412 or 404). The bytes read so
    far belong to the old version and must be discarded."""

    def __init__(self, bucket: str, key: str, etag: str, cause: Optional[BaseException] = None):
        super().__init__(
            f"s3://{bucket}/{key} changed while being read (it was ETag {etag}): {cause}"
        )
        self.bucket = bucket
        self.key = key
        self.etag = etag


class ShortReadError(FerrobayS3Error):
    """A gateway sent fewer or more bytes than the range it answered for; treated like a
    connection failure (the request is retried on another gateway)."""


class EndpointSourceError(FerrobayS3Error):
    """The endpoint list could not be read or parsed (file, URL or cluster API)."""
