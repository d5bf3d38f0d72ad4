"""Rendezvous (highest random weight) hashing of requests over gateway endpoints.

Every endpoint scores a request's routing key ``(bucket, key)``; the request goes to the
endpoint with the highest score, and on failure to the next ones in descending order.
While the set of healthy endpoints is unchanged each key always goes to the same
gateway; when an endpoint leaves, only the keys it scored highest for move (each to its
own second choice, so they spread over all the others), and they come back when it
returns. No state is shared between clients: every client computes the same order.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, List


def score(endpoint: str, bucket: str, key: str) -> int:
    """The 64-bit weight of ``endpoint`` for ``(bucket, key)``: BLAKE2b-64 over the three
    strings, each followed by a NUL byte (so ``("ab", "c")`` and ``("a", "bc")`` differ)."""
    h = hashlib.blake2b(digest_size=8)
    for part in (endpoint, bucket, key):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return int.from_bytes(h.digest(), "big")


def rank(endpoints: Iterable[str], bucket: str, key: str) -> List[str]:
    """``endpoints`` in the order ``(bucket, key)`` tries them: highest score first (ties,
    practically impossible, broken by the endpoint string)."""
    return sorted(endpoints, key=lambda e: (-score(e, bucket, key), e))


def owner(endpoints: Iterable[str], bucket: str, key: str) -> str:
    """The endpoint that serves ``(bucket, key)`` while all of ``endpoints`` are healthy."""
    ranked = rank(endpoints, bucket, key)
    if not ranked:
        raise ValueError("no endpoints")
    return ranked[0]
