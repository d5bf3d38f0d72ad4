"""Where the list of gateway endpoints comes from: a static list, JSON files (such as
the ``--endpoints-file`` a ``ferrobay s3 run`` writes), or a URL (a file served over
HTTP, or the cluster API's ``GET /v1/s3/endpoints``).

Accepted JSON documents (all forms may be mixed in one list):

- ``{"s3": "10.0.0.21:9000"}``: one gateway, as ``ferrobay s3 run --endpoints-file``
  writes it;
- ``{"endpoints": [...]}`` or a bare list ``[...]``, whose items are URLs / ``HOST:PORT``
  strings or objects with an ``"s3"``, ``"url"`` or ``"endpoint"`` field.

``HOST:PORT`` becomes ``http://HOST:PORT``; trailing slashes are dropped.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from typing import Any, Callable, List, Optional, Sequence, Union

from .errors import EndpointSourceError

#: A file name argument.
PathArg = Union[str, "os.PathLike[str]"]

#: The path a cluster API serves the gateway list on (see the README).
CLUSTER_API_PATH = "/v1/s3/endpoints"


def normalize(endpoint: str) -> str:
    """``HOST:PORT`` → ``http://HOST:PORT``; validates scheme and host."""
    e = endpoint.strip().rstrip("/")
    if "://" not in e:
        e = "http://" + e
    parsed = urllib.parse.urlsplit(e)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise EndpointSourceError(f"endpoint {endpoint!r}: expected http(s)://HOST:PORT")
    if parsed.path or parsed.query or parsed.fragment:
        raise EndpointSourceError(
            f"endpoint {endpoint!r}: a gateway endpoint has no path (path-style buckets)"
        )
    try:
        parsed.port
    except ValueError as e2:
        raise EndpointSourceError(f"endpoint {endpoint!r}: {e2}") from None
    return e


def parse_document(doc: Any, origin: str) -> List[str]:
    """The endpoints listed by one JSON document (forms above)."""
    if isinstance(doc, dict) and "endpoints" in doc:
        doc = doc["endpoints"]
    items = doc if isinstance(doc, list) else [doc]
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(normalize(item))
            continue
        if isinstance(item, dict):
            for field in ("s3", "url", "endpoint"):
                if isinstance(item.get(field), str):
                    out.append(normalize(item[field]))
                    break
            else:
                raise EndpointSourceError(
                    f"{origin}: endpoint entry {item!r} has no \"s3\", \"url\" or \"endpoint\" field"
                )
            continue
        raise EndpointSourceError(f"{origin}: unexpected endpoint entry {item!r}")
    return out


def read_file(path: PathArg) -> List[str]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise EndpointSourceError(f"endpoints file {os.fspath(path)}: {e}") from None
    return parse_document(doc, os.fspath(path))


def read_url(url: str, timeout_s: float = 5.0) -> List[str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            doc = json.load(r)
    except (OSError, ValueError) as e:
        raise EndpointSourceError(f"endpoint list {url}: {e}") from None
    return parse_document(doc, url)


def cluster_api_url(api: str) -> str:
    """The URL of the gateway list: ``api`` itself when it has a path, else
    ``api`` + :data:`CLUSTER_API_PATH`."""
    a = api.strip()
    if "://" not in a:
        a = "http://" + a
    parsed = urllib.parse.urlsplit(a)
    if parsed.path in ("", "/"):
        return a.rstrip("/") + CLUSTER_API_PATH
    return a


def make_source(
    endpoints: Optional[Sequence[str]] = None,
    endpoints_file: Union[None, PathArg, Sequence[PathArg]] = None,
    cluster_api: Optional[str] = None,
) -> Optional[Callable[[], List[str]]]:
    """A function that reads the current endpoint list, or None for a static list only.
    Exactly one kind of source is allowed."""
    given = [x is not None for x in (endpoints, endpoints_file, cluster_api)]
    if sum(given) != 1:
        raise ValueError("pass exactly one of endpoints=, endpoints_file= or cluster_api=")
    if endpoints is not None:
        if isinstance(endpoints, str):
            raise TypeError("endpoints= takes a list of URLs, not one string")
        return None
    if endpoints_file is not None:
        paths = (
            [endpoints_file]
            if isinstance(endpoints_file, (str, os.PathLike))
            else list(endpoints_file)
        )

        def from_files() -> List[str]:
            out: List[str] = []
            errors = []
            for p in paths:
                try:
                    out += read_file(p)
                except EndpointSourceError as e:
                    errors.append(str(e))
            if not out and errors:
                raise EndpointSourceError("; ".join(errors))
            return list(dict.fromkeys(out))

        return from_files
    assert cluster_api is not None
    url = cluster_api_url(cluster_api)
    return lambda: list(dict.fromkeys(read_url(url)))
