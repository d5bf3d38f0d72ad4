"""What a failed request means and whether it may be tried again on another endpoint."""

from __future__ import annotations

import enum
import http.client
import random
from typing import Optional, Tuple

import botocore.exceptions

from .config import RetryConfig
from .errors import ShortReadError

try:  # botocore's transport; only used to recognise its errors
    import urllib3.exceptions as _urllib3_exceptions

    _URLLIB3_ERRORS: Tuple[type, ...] = (_urllib3_exceptions.HTTPError,)
except ImportError:  # pragma: no cover - urllib3 comes with botocore
    _URLLIB3_ERRORS = ()


class Verdict(enum.Enum):
    """How a request ended."""

    #: A definitive answer (S3 4xx, 501, or a client-side error such as a bad
    #: parameter): raise it, the endpoint is fine.
    DEFINITIVE = "definitive"
    #: The connection could not be opened: the request never reached a gateway, so any
    #: request may be sent to another one. Ejects the endpoint.
    NOT_SENT = "not-sent"
    #: The endpoint failed after the request may have reached it (connection reset or
    #: timeout mid-request, cut body, 5xx): ejects it; only idempotent requests are
    #: retried.
    ENDPOINT_FAILED = "endpoint-failed"


def http_status(e: BaseException) -> Optional[int]:
    if isinstance(e, botocore.exceptions.ClientError):
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if status is not None else None
    return None


def error_code(e: BaseException) -> Optional[str]:
    if isinstance(e, botocore.exceptions.ClientError):
        code = e.response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


def classify(e: BaseException) -> Verdict:
    """The verdict on an exception raised by a boto3 call (or by reading its body)."""
    if isinstance(e, botocore.exceptions.ClientError):
        status = http_status(e)
        if status is not None and status >= 500 and status != 501:
            return Verdict.ENDPOINT_FAILED
        return Verdict.DEFINITIVE
    # Connect errors and connect timeouts: nothing was sent.
    if isinstance(e, botocore.exceptions.ConnectionError) and not isinstance(
        e, botocore.exceptions.HTTPClientError
    ):
        return Verdict.NOT_SENT
    if isinstance(
        e,
        (
            botocore.exceptions.HTTPClientError,  # closed, read timeout, cut stream
            botocore.exceptions.IncompleteReadError,
            ShortReadError,
            http.client.HTTPException,
            ConnectionError,
            TimeoutError,
        )
        + _URLLIB3_ERRORS,
    ):
        return Verdict.ENDPOINT_FAILED
    if isinstance(e, OSError):
        return Verdict.ENDPOINT_FAILED
    return Verdict.DEFINITIVE


def may_retry(verdict: Verdict, idempotent: bool) -> bool:
    """Whether a request that ended with ``verdict`` may be sent again."""
    if verdict is Verdict.NOT_SENT:
        return True
    if verdict is Verdict.ENDPOINT_FAILED:
        return idempotent
    return False


class Backoff:
    """The wait before each retry: between half and all of ``backoff_base_s`` ×
    2^(retry − 1), at most ``backoff_max_s``."""

    def __init__(self, config: RetryConfig, rng: Optional[random.Random] = None) -> None:
        self._config = config
        self._rng = rng or random.Random()

    def delay_s(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1 for the second attempt)."""
        if retry < 1:
            return 0.0
        ceiling = min(self._config.backoff_max_s, self._config.backoff_base_s * 2 ** (retry - 1))
        return ceiling * (0.5 + 0.5 * self._rng.random())
