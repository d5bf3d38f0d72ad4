"""Parallel multipart PUT and ranged GET over fake endpoints with injected faults: the
bytes that come back are the bytes that went in, or the transfer fails cleanly."""

import hashlib
import io
import os

import botocore.exceptions
import pytest
from fakes import client_error, reset

from ferrobay_s3 import ObjectChangedError, TransferConfig

MIB = 1 << 20
SMALL_PARTS = TransferConfig(
    multipart_threshold_bytes=6 * MIB, multipart_chunksize_bytes=5 * MIB,
    range_threshold_bytes=2 * MIB, range_chunksize_bytes=1 * MIB, max_concurrency=4,
)


def pattern(n, seed=0):
    out = bytearray()
    block = hashlib.sha256(str(seed).encode()).digest()
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n])


def test_large_put_is_a_multipart_upload_spread_over_every_endpoint(cluster, make_client):
    c = make_client(SMALL_PARTS)
    data = pattern(23 * MIB + 5)
    resp = c.put_object(Bucket="b", Key="big", Body=data)
    assert cluster.model.objects[("b", "big")][0] == data
    assert resp["ETag"].endswith('-5"')
    parts = cluster.calls("UploadPart")
    assert sum(parts.values()) == 5 and min(parts.values()) >= 1, parts
    assert cluster.calls("PutObject") == {u: 0 for u in cluster.urls}


def test_small_put_is_one_request(cluster, make_client):
    c = make_client(SMALL_PARTS)
    c.put_object(Bucket="b", Key="s", Body="héllo")
    assert cluster.model.objects[("b", "s")][0] == "héllo".encode()
    assert sum(cluster.calls("PutObject").values()) == 1


def test_parts_failing_on_one_endpoint_are_sent_to_another(cluster, make_client):
    c = make_client(SMALL_PARTS)
    bad = cluster.urls[1]
    cluster.s3[bad].faults.append(lambda op, kw: reset(bad) if op == "UploadPart" else None)
    data = pattern(30 * MIB, 2)
    c.put_object(Bucket="b", Key="k", Body=data)
    assert cluster.model.objects[("b", "k")][0] == data
    assert bad not in c.healthy_endpoints()


def test_a_part_refused_everywhere_aborts_the_upload(cluster, make_client):
    c = make_client(SMALL_PARTS)
    for s in cluster.s3.values():
        s.faults.append(
            lambda op, kw: client_error(403, "AccessDenied")
            if op == "UploadPart" and kw.get("PartNumber") == 3 else None
        )
    with pytest.raises(botocore.exceptions.ClientError):
        c.put_object(Bucket="b", Key="k", Body=pattern(20 * MIB))
    assert cluster.model.uploads == {}
    assert ("b", "k") not in cluster.model.objects
    assert sum(cluster.calls("AbortMultipartUpload").values()) == 1


@pytest.mark.parametrize("kind", ["regular-file", "bytesio", "pipe-like"])
def test_upload_fileobj_for_every_kind_of_file(cluster, make_client, tmp_path, kind):
    c = make_client(SMALL_PARTS)
    data = pattern(17 * MIB + 3, 3)
    if kind == "regular-file":
        p = tmp_path / "f"
        p.write_bytes(b"skip" + data)
        f = open(p, "rb")
        f.read(4)  # uploads from the current position
    elif kind == "bytesio":
        f = io.BytesIO(data)
    else:
        f = _Unseekable(data)
    with f:
        c.upload_fileobj(f, "b", kind)
    assert cluster.model.objects[("b", kind)][0] == data
    assert sum(cluster.calls("UploadPart").values()) == 4


def test_whole_body_checksums_keep_a_single_put(cluster, make_client):
    c = make_client(SMALL_PARTS)
    data = pattern(7 * MIB)
    c.put_object(Bucket="b", Key="k", Body=data, ContentMD5="x")
    assert sum(cluster.calls("PutObject").values()) == 1


def test_large_get_is_parallel_ranges_reassembled_exactly(cluster, make_client):
    c = make_client(SMALL_PARTS)
    data = pattern(9 * MIB + 7, 4)
    c.put_object(Bucket="b", Key="k", Body=data, ContentMD5="whole")
    resp = c.get_object(Bucket="b", Key="k")
    assert resp["ContentLength"] == len(data) and "ContentRange" not in resp
    assert resp["Body"].read() == data
    ranges = [r for s in cluster.s3.values() for (op, _, r) in s.calls if op == "GetObject"]
    # First 2 MiB, then 1 MiB ranges: 2 + 7 + the 7-byte tail.
    assert sorted(ranges) == sorted(
        ["bytes=0-2097151"] + [f"bytes={a}-{min(a + MIB, len(data)) - 1}"
                               for a in range(2 * MIB, len(data), MIB)]
    )
    per_endpoint = cluster.calls("GetObject")
    assert min(per_endpoint.values()) >= 1, per_endpoint


def test_small_and_empty_objects_take_one_get(cluster, make_client):
    c = make_client(SMALL_PARTS)
    c.put_object(Bucket="b", Key="e", Body=b"")
    c.put_object(Bucket="b", Key="s", Body=b"abc")
    assert c.get_object(Bucket="b", Key="e")["Body"].read() == b""
    r = c.get_object(Bucket="b", Key="s")
    assert (r["Body"].read(), r["ContentLength"]) == (b"abc", 3)


def test_a_stream_cut_mid_object_resumes_on_another_endpoint(cluster, make_client):
    c = make_client(TransferConfig(range_threshold_bytes=64 * MIB))
    data = pattern(3 * MIB + 1, 5)
    c.put_object(Bucket="b", Key="k", Body=data)
    owner = c.endpoint_for("b", "k")
    cluster.s3[owner].cut_bodies = MIB + 17
    body = c.get_object(Bucket="b", Key="k")["Body"]
    got = b"".join(body.iter_chunks(300_000))
    assert got == data and body.resumes == 1
    assert owner not in c.healthy_endpoints()
    resumed = [r for s in cluster.s3.values() for (op, _, r) in s.calls
               if op == "GetObject" and r and r.startswith(f"bytes={MIB + 17}-")]
    assert resumed == [f"bytes={MIB + 17}-{len(data) - 1}"]


def test_an_overwrite_during_a_ranged_read_is_detected(cluster, make_client):
    c = make_client(TransferConfig(range_threshold_bytes=MIB, range_chunksize_bytes=MIB,
                                   max_concurrency=1))
    c.put_object(Bucket="b", Key="k", Body=pattern(6 * MIB, 6))
    body = c.get_object(Bucket="b", Key="k")["Body"]
    assert len(body.read(MIB)) == MIB
    c.put_object(Bucket="b", Key="k", Body=pattern(6 * MIB, 7))
    with pytest.raises(ObjectChangedError):
        while body.read(MIB):
            pass


def test_a_failed_download_leaves_no_file(cluster, make_client, tmp_path):
    c = make_client(SMALL_PARTS)
    c.put_object(Bucket="b", Key="k", Body=pattern(4 * MIB, 8))
    for s in cluster.s3.values():
        s.faults.append(lambda op, kw: client_error(403, "AccessDenied")
                        if kw.get("Range", "").startswith("bytes=3") else None)
    target = tmp_path / "out"
    with pytest.raises(botocore.exceptions.ClientError):
        c.download_file("b", "k", target)
    assert os.listdir(tmp_path) == []
    for s in cluster.s3.values():
        s.faults.clear()
    c.download_file("b", "k", target)
    assert target.read_bytes() == pattern(4 * MIB, 8)


class _Unseekable(io.RawIOBase):
    def __init__(self, data):
        self._f = io.BytesIO(data)

    def readable(self):
        return True

    def seekable(self):
        return False

    def readinto(self, b):
        chunk = self._f.read(min(len(b), 70_001))  # short reads, like a pipe
        b[: len(chunk)] = chunk
        return len(chunk)
