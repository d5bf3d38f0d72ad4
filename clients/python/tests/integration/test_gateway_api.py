"""The client against three real gateways, all healthy: every call, interoperation with
plain boto3, routing, endpoint sources, consistency of ranged reads."""

import hashlib
import http.server
import io
import json
import multiprocessing
import os
import threading

import boto3
import botocore.config
import botocore.exceptions
import pytest
from conftest import MIB, make_client, pattern
from gateways import ACCESS_KEY, SECRET_KEY

import ferrobay_s3
from ferrobay_s3 import HealthConfig, ObjectChangedError, TransferConfig


def plain_boto3(url):
    return boto3.client(
        "s3", endpoint_url=url, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1", config=botocore.config.Config(s3={"addressing_style": "path"}),
    )


def test_the_package_under_test_is_the_installed_one():
    where = os.environ.get("FERROBAY_S3_INSTALLED_AT")
    if where:
        assert os.path.realpath(ferrobay_s3.__file__).startswith(os.path.realpath(where))
        assert os.path.exists(os.path.join(os.path.dirname(ferrobay_s3.__file__), "py.typed"))


def test_object_calls_and_interoperation_with_boto3(client, bucket, all_up):
    s3 = plain_boto3(all_up[0].url)
    client.put_object(Bucket=bucket, Key="a/small.txt", Body=b"hello", ContentType="text/plain",
                      Metadata={"origin": "client"})
    head = s3.head_object(Bucket=bucket, Key="a/small.txt")
    assert head["ContentType"] == "text/plain" and head["Metadata"] == {"origin": "client"}
    assert head["ETag"] == f'"{hashlib.md5(b"hello").hexdigest()}"'
    big = pattern(21 * MIB + 11, 1)
    resp = client.put_object(Bucket=bucket, Key="a/big.bin", Body=big, ContentType="x/y")
    assert resp["ETag"].endswith('-5"')  # 5 MiB parts
    assert s3.get_object(Bucket=bucket, Key="a/big.bin")["Body"].read() == big
    assert s3.head_object(Bucket=bucket, Key="a/big.bin")["ContentType"] == "x/y"
    # Written by boto3 (its own multipart upload), read by the client in ranges.
    other = pattern(13 * MIB + 1, 2)
    s3.upload_fileobj(io.BytesIO(other), bucket, "a/by-boto3.bin")
    got = client.get_object(Bucket=bucket, Key="a/by-boto3.bin")
    assert got["ContentLength"] == len(other) and got["Body"].read() == other
    part = client.get_object(Bucket=bucket, Key="a/by-boto3.bin", Range="bytes=100-199")
    assert part["Body"].read() == other[100:200] and part["ContentRange"].startswith("bytes 100-199/")
    assert client.head_object(Bucket=bucket, Key="a/small.txt")["ContentLength"] == 5
    assert client.get_object(Bucket=bucket, Key="a/small.txt")["Body"].read() == b"hello"
    client.put_object(Bucket=bucket, Key="a/empty", Body=b"")
    assert client.get_object(Bucket=bucket, Key="a/empty")["Body"].read() == b""
    keys = [o["Key"] for o in client.list_objects(Bucket=bucket, Prefix="a/", PageSize=2)]
    assert keys == ["a/big.bin", "a/by-boto3.bin", "a/empty", "a/small.txt"]
    assert list(client.list_prefixes(Bucket=bucket)) == ["a/"]
    client.copy_object(Bucket=bucket, Key="b/copy", CopySource={"Bucket": bucket, "Key": "a/small.txt"})
    assert client.get_object(Bucket=bucket, Key="b/copy")["Body"].read() == b"hello"
    client.delete_object(Bucket=bucket, Key="a/small.txt")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client.head_object(Bucket=bucket, Key="a/small.txt")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client.get_object(Bucket=bucket, Key="nope")
    assert e.value.response["Error"]["Code"] == "NoSuchKey"
    assert bucket in [b["Name"] for b in client.list_buckets()["Buckets"]]
    versioning = client.call("get_bucket_versioning", Bucket=bucket)
    assert "ResponseMetadata" in versioning


def test_files_up_and_down(client, bucket, tmp_path):
    data = pattern(19 * MIB + 4097, 3)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    client.upload_file(src, bucket, "f/src.bin")
    dst = tmp_path / "dst.bin"
    client.download_file(bucket, "f/src.bin", dst)
    assert dst.read_bytes() == data
    # A pipe-like stream of unknown length.
    r, w = os.pipe()

    def feed():
        with os.fdopen(w, "wb") as f:
            for off in range(0, len(data), 1 << 16):
                f.write(data[off:off + (1 << 16)])

    t = threading.Thread(target=feed)
    t.start()
    with os.fdopen(r, "rb") as f:
        client.upload_fileobj(f, bucket, "f/stream.bin")
    t.join()
    out = io.BytesIO()
    client.download_fileobj(bucket, "f/stream.bin", out)
    assert out.getvalue() == data


def test_each_key_goes_to_its_rendezvous_owner(all_up, bucket):
    # Passive health only: nothing but a failed request could move a key.
    c = make_client(endpoints=[g.url for g in all_up], health=HealthConfig(probe_interval_s=0))
    try:
        keys = [f"r/{i}" for i in range(90)]
        for k in keys:
            c.put_object(Bucket=bucket, Key=k, Body=b"x")
        owners = {k: c.endpoint_for(bucket, k) for k in keys}
        per = {s.url: s.requests for s in c.endpoint_status()}
        # PUTs only (the bucket fixture used another client): exactly one per key, on its owner.
        expected = {u: sum(1 for o in owners.values() if o == u) for u in per}
        assert per == expected
        assert min(expected.values()) >= 15, expected
    finally:
        c.close()


def test_an_overwrite_during_a_parallel_read_is_detected(all_up, bucket):
    c = make_client(endpoints=[g.url for g in all_up], transfer=TransferConfig(
        range_threshold_bytes=MIB, range_chunksize_bytes=MIB, max_concurrency=1))
    try:
        c.put_object(Bucket=bucket, Key="o", Body=pattern(8 * MIB, 4))
        body = c.get_object(Bucket=bucket, Key="o")["Body"]
        first = body.read(MIB)
        assert first == pattern(8 * MIB, 4)[:MIB]
        c.put_object(Bucket=bucket, Key="o", Body=pattern(8 * MIB, 5))
        with pytest.raises(ObjectChangedError):
            while body.read(MIB):
                pass
        # Deleted mid-read is the same.
        body = c.get_object(Bucket=bucket, Key="o")["Body"]
        body.read(MIB)
        c.delete_object(Bucket=bucket, Key="o")
        with pytest.raises(ObjectChangedError):
            while body.read(MIB):
                pass
    finally:
        c.close()


def test_endpoints_from_gateway_files_and_from_a_cluster_url(all_up, bucket):
    urls = sorted(g.url for g in all_up)
    c = make_client(endpoints_file=[g.endpoints_file for g in all_up])
    try:
        assert sorted(c.endpoints()) == urls
        c.put_object(Bucket=bucket, Key="via-files", Body=b"1")
    finally:
        c.close()

    listing = {"endpoints": urls}

    class Api(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path != "/v1/s3/endpoints":
                self.send_error(404)
                return
            body = json.dumps(listing).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    try:
        c = make_client(cluster_api=f"http://127.0.0.1:{api.server_address[1]}")
        try:
            assert sorted(c.endpoints()) == urls
            assert c.get_object(Bucket=bucket, Key="via-files")["Body"].read() == b"1"
            # The cluster stops listing one gateway: the client follows.
            listing["endpoints"] = urls[:2]
            wait_for(lambda: sorted(c.endpoints()) == urls[:2])
            for i in range(20):
                c.put_object(Bucket=bucket, Key=f"two/{i}", Body=b"2")
            per = {s.url: s.requests for s in c.endpoint_status()}
            assert set(per) == set(urls[:2])
        finally:
            c.close()
    finally:
        api.shutdown()
        api.server_close()


def _worker_keys(client, bucket, worker, workers, out):
    ds = client.dataset(bucket, "ds/", shuffle=True, seed=11,
                        worker_info=_Fixed(worker, workers), transform=_digest)
    out.put(list(ds))


class _Fixed:
    def __init__(self, worker, workers):
        self.value = (worker, workers)

    def __call__(self):
        return self.value


def _digest(key, data):
    return key, hashlib.sha256(data).hexdigest()


def test_dataset_shards_over_worker_processes(client, bucket):
    """What a DataLoader with num_workers=3 does: the dataset (client included) is
    pickled into fresh processes, each reads its share."""
    expected = {}
    for i in range(45):
        data = pattern(1000 + 997 * i, 100 + i)
        client.put_object(Bucket=bucket, Key=f"ds/{i:03d}", Body=data)
        expected[f"ds/{i:03d}"] = hashlib.sha256(data).hexdigest()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker_keys, args=(client, bucket, w, 3, out)) for w in range(3)]
    for p in procs:
        p.start()
    shares = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    items = [x for s in shares for x in s]
    assert dict(items) == expected and len(items) == 45
    assert sorted(len(s) for s in shares) == [15, 15, 15]


def wait_for(cond, timeout_s=10.0):
    import time

    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
