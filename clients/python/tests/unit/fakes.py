"""Fault injection for the unit tests: a trivially correct in-memory S3 model shared by
fake per-endpoint clients, each of which can be made to fail like a dead or broken
gateway. (The integration tests use real gateways.)"""

from __future__ import annotations

import hashlib
import io
import threading
from typing import Any, Callable, Dict, List, Optional

import botocore.exceptions
from botocore.response import StreamingBody


def client_error(status: int, code: str, op: str = "Op") -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        op,
    )


def refused(endpoint: str) -> botocore.exceptions.EndpointConnectionError:
    return botocore.exceptions.EndpointConnectionError(endpoint_url=endpoint)


def reset(endpoint: str) -> botocore.exceptions.ConnectionClosedError:
    return botocore.exceptions.ConnectionClosedError(endpoint_url=endpoint)


def etag_of(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


class Model:
    """Buckets of objects; uploads. One lock: the model, not the client, is trivial."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: Dict[tuple, tuple] = {}  # (bucket, key) -> (data, etag)
        self.uploads: Dict[str, Dict[int, bytes]] = {}
        self.buckets: set = set()
        self.next_upload = 0


class CutStream(io.RawIOBase):
    """A body that breaks after ``cut_after`` bytes, like a gateway killed mid-stream."""

    def __init__(self, data: bytes, cut_after: int, endpoint: str) -> None:
        self._data = data
        self._pos = 0
        self._cut = cut_after
        self._endpoint = endpoint

    def read(self, amt: Optional[int] = None) -> bytes:
        if self._pos >= self._cut:
            raise botocore.exceptions.ResponseStreamingError(error="connection reset")
        n = len(self._data) - self._pos if amt is None else amt
        n = min(n, self._cut - self._pos)
        out = self._data[self._pos : self._pos + n]
        self._pos += len(out)
        return out

    def close(self) -> None:
        pass


class FakeS3:
    """One endpoint's S3 client over the shared model. ``faults`` is a list of
    callables ``(op, kwargs) -> Optional[Exception]`` consulted before each call (the
    first that returns an exception wins; it is raised), ``down`` refuses connections,
    ``cut_bodies`` makes GET bodies break after that many bytes."""

    def __init__(self, endpoint: str, model: Model) -> None:
        self.endpoint = endpoint
        self.model = model
        self.down = False
        self.faults: List[Callable[[str, Dict[str, Any]], Optional[Exception]]] = []
        self.cut_bodies: Optional[int] = None
        self.calls: List[tuple] = []
        self.lock = threading.Lock()

    def _enter(self, op: str, kwargs: Dict[str, Any]) -> None:
        with self.lock:
            self.calls.append((op, kwargs.get("Key"), kwargs.get("Range")))
        if self.down:
            raise refused(self.endpoint)
        for f in list(self.faults):
            e = f(op, kwargs)
            if e is not None:
                raise e

    def _obj(self, Bucket: str, Key: str) -> tuple:
        o = self.model.objects.get((Bucket, Key))
        if o is None:
            raise client_error(404, "NoSuchKey")
        return o

    def create_bucket(self, Bucket: str, **kw: Any) -> Dict[str, Any]:
        self._enter("CreateBucket", kw)
        with self.model.lock:
            if Bucket in self.model.buckets:
                raise client_error(409, "BucketAlreadyOwnedByYou")
            self.model.buckets.add(Bucket)
        return {"Location": f"/{Bucket}"}

    def delete_bucket(self, Bucket: str, **kw: Any) -> Dict[str, Any]:
        self._enter("DeleteBucket", kw)
        with self.model.lock:
            if Bucket not in self.model.buckets:
                raise client_error(404, "NoSuchBucket")
            self.model.buckets.remove(Bucket)
        return {}

    def put_object(self, Bucket: str, Key: str, Body: bytes = b"", **kw: Any) -> Dict[str, Any]:
        self._enter("PutObject", dict(Key=Key, **kw))
        with self.model.lock:
            if kw.get("IfNoneMatch") == "*" and (Bucket, Key) in self.model.objects:
                raise client_error(412, "PreconditionFailed")
            self.model.objects[(Bucket, Key)] = (bytes(Body), etag_of(bytes(Body)))
        return {"ETag": etag_of(bytes(Body))}

    def head_object(self, Bucket: str, Key: str, **kw: Any) -> Dict[str, Any]:
        self._enter("HeadObject", dict(Key=Key, **kw))
        with self.model.lock:
            data, etag = self._obj(Bucket, Key)
        return {"ETag": etag, "ContentLength": len(data)}

    def get_object(self, Bucket: str, Key: str, **kw: Any) -> Dict[str, Any]:
        self._enter("GetObject", dict(Key=Key, **kw))
        with self.model.lock:
            data, etag = self._obj(Bucket, Key)
        if kw.get("IfMatch") not in (None, etag):
            raise client_error(412, "PreconditionFailed")
        resp: Dict[str, Any] = {"ETag": etag}
        rng = kw.get("Range")
        if rng:
            a_s, b_s = rng[len("bytes="):].split("-")
            a = int(a_s)
            if a >= len(data):
                raise client_error(416, "InvalidRange")
            b = min(int(b_s) + 1, len(data)) if b_s else len(data)
            part = data[a:b]
            resp["ContentRange"] = f"bytes {a}-{b - 1}/{len(data)}"
        else:
            part = data
        resp["ContentLength"] = len(part)
        raw: Any = io.BytesIO(part)
        if self.cut_bodies is not None and self.cut_bodies < len(part):
            raw = CutStream(part, self.cut_bodies, self.endpoint)
        resp["Body"] = StreamingBody(raw, len(part))
        return resp

    def delete_object(self, Bucket: str, Key: str, **kw: Any) -> Dict[str, Any]:
        self._enter("DeleteObject", dict(Key=Key, **kw))
        with self.model.lock:
            self.model.objects.pop((Bucket, Key), None)
        return {}

    def list_objects_v2(self, Bucket: str, Prefix: str = "", MaxKeys: int = 1000,
                        ContinuationToken: Optional[str] = None, **kw: Any) -> Dict[str, Any]:
        self._enter("ListObjectsV2", dict(Prefix=Prefix, **kw))
        with self.model.lock:
            keys = sorted(k for (b, k) in self.model.objects if b == Bucket and k.startswith(Prefix))
            if ContinuationToken:
                keys = [k for k in keys if k > ContinuationToken]
            page = keys[:MaxKeys]
            contents = [{"Key": k, "Size": len(self.model.objects[(Bucket, k)][0])} for k in page]
        out: Dict[str, Any] = {"Contents": contents, "IsTruncated": len(keys) > MaxKeys}
        if out["IsTruncated"]:
            out["NextContinuationToken"] = page[-1]
        return out

    def create_multipart_upload(self, Bucket: str, Key: str, **kw: Any) -> Dict[str, Any]:
        self._enter("CreateMultipartUpload", dict(Key=Key, **kw))
        with self.model.lock:
            self.model.next_upload += 1
            uid = f"u{self.model.next_upload}"
            self.model.uploads[uid] = {}
        return {"UploadId": uid}

    def upload_part(self, Bucket: str, Key: str, UploadId: str, PartNumber: int, Body: bytes,
                    **kw: Any) -> Dict[str, Any]:
        self._enter("UploadPart", dict(Key=Key, PartNumber=PartNumber, **kw))
        with self.model.lock:
            if UploadId not in self.model.uploads:
                raise client_error(404, "NoSuchUpload")
            self.model.uploads[UploadId][PartNumber] = bytes(Body)
        return {"ETag": etag_of(bytes(Body))}

    def complete_multipart_upload(self, Bucket: str, Key: str, UploadId: str,
                                  MultipartUpload: Dict[str, Any], **kw: Any) -> Dict[str, Any]:
        self._enter("CompleteMultipartUpload", dict(Key=Key, **kw))
        from ferrobay_s3 import multipart_etag

        with self.model.lock:
            parts = self.model.uploads.pop(UploadId, None)
            if parts is None:
                raise client_error(404, "NoSuchUpload")
            numbers = [p["PartNumber"] for p in MultipartUpload["Parts"]]
            data = b"".join(parts[n] for n in numbers)
            etag = multipart_etag([etag_of(parts[n]) for n in numbers])
            self.model.objects[(Bucket, Key)] = (data, etag)
        return {"ETag": etag, "Bucket": Bucket, "Key": Key}

    def abort_multipart_upload(self, Bucket: str, Key: str, UploadId: str, **kw: Any) -> Dict[str, Any]:
        self._enter("AbortMultipartUpload", dict(Key=Key, **kw))
        with self.model.lock:
            if self.model.uploads.pop(UploadId, None) is None:
                raise client_error(404, "NoSuchUpload")
        return {}


class FakeCluster:
    """Fake endpoints over one model, and a Client factory for them."""

    def __init__(self, n: int = 3) -> None:
        self.model = Model()
        self.urls = [f"http://gw{i}.test:9000" for i in range(n)]
        self.s3 = {u: FakeS3(u, self.model) for u in self.urls}

    def factory(self, endpoint: str) -> FakeS3:
        return self.s3[endpoint]

    def calls(self, op: str) -> Dict[str, int]:
        return {u: sum(1 for c in s.calls if c[0] == op) for u, s in self.s3.items()}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, s: float) -> None:
        self.now += s
