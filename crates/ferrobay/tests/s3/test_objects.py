"""PUT / GET / HEAD / DELETE / copy, ranges, conditions, metadata, tags."""

import datetime
import urllib.parse

import pytest

from helpers import MIB, assert_absent, data, error_of, md5


@pytest.mark.parametrize("size", [0, 1, 16 << 10, (16 << 10) + 1, MIB + 3, 5 * MIB + 7])
def test_round_trip(s3, bucket, size):
    body = data(size, seed=size)
    r = s3.put_object(Bucket=bucket, Key=f"obj-{size}", Body=body)
    assert r["ETag"] == f'"{md5(body)}"'
    got = s3.get_object(Bucket=bucket, Key=f"obj-{size}")
    assert got["Body"].read() == body
    assert got["ContentLength"] == size
    assert got["ETag"] == r["ETag"]
    head = s3.head_object(Bucket=bucket, Key=f"obj-{size}")
    assert head["ContentLength"] == size


def test_overwrite_replaces(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=data(3 * MIB, 1))
    s3.put_object(Bucket=bucket, Key="k", Body=b"short")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"short"


def test_ranges(s3, bucket):
    body = data(3 * MIB + 100, 7)
    s3.put_object(Bucket=bucket, Key="r", Body=body)
    for rng, want in [
        ("bytes=0-0", body[0:1]),
        ("bytes=100-2000000", body[100:2000001]),
        ("bytes=-10", body[-10:]),
        (f"bytes={len(body) - 5}-", body[-5:]),
        (f"bytes=2097150-2097153", body[2097150:2097154]),
        (f"bytes=0-{len(body) + 100}", body),
    ]:
        r = s3.get_object(Bucket=bucket, Key="r", Range=rng)
        assert r["Body"].read() == want, rng
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert r["ContentRange"].endswith(f"/{len(body)}")
    assert error_of(s3.get_object, Bucket=bucket, Key="r", Range=f"bytes={len(body)}-")[:2] == (416, "InvalidRange")


def test_conditional_get(s3, bucket):
    etag = s3.put_object(Bucket=bucket, Key="c", Body=b"hello")["ETag"]
    past = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    assert s3.get_object(Bucket=bucket, Key="c", IfMatch=etag)["Body"].read() == b"hello"
    assert error_of(s3.get_object, Bucket=bucket, Key="c", IfMatch='"nope"')[:2] == (412, "PreconditionFailed")
    assert error_of(s3.get_object, Bucket=bucket, Key="c", IfNoneMatch=etag)[0] == 304
    assert error_of(s3.get_object, Bucket=bucket, Key="c", IfModifiedSince=future)[0] == 304
    assert s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=past)["Body"].read() == b"hello"
    assert error_of(s3.get_object, Bucket=bucket, Key="c", IfUnmodifiedSince=past)[:2] == (412, "PreconditionFailed")
    assert error_of(s3.head_object, Bucket=bucket, Key="c", IfMatch='"nope"')[0] == 412


def test_conditional_put(s3, bucket):
    s3.put_object(Bucket=bucket, Key="once", Body=b"1", IfNoneMatch="*")
    assert error_of(s3.put_object, Bucket=bucket, Key="once", Body=b"2", IfNoneMatch="*")[:2] == (412, "PreconditionFailed")
    assert s3.get_object(Bucket=bucket, Key="once")["Body"].read() == b"1"
    etag = s3.head_object(Bucket=bucket, Key="once")["ETag"]
    assert error_of(s3.put_object, Bucket=bucket, Key="once", Body=b"3", IfMatch='"0000"')[:2] == (412, "PreconditionFailed")
    s3.put_object(Bucket=bucket, Key="once", Body=b"4", IfMatch=etag)
    assert s3.get_object(Bucket=bucket, Key="once")["Body"].read() == b"4"
    assert error_of(s3.put_object, Bucket=bucket, Key="absent", Body=b"5", IfMatch=etag)[:2] == (404, "NoSuchKey")


def test_metadata_and_content_headers(s3, bucket):
    expires = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    s3.put_object(
        Bucket=bucket, Key="m", Body=b"{}",
        ContentType="application/json", ContentDisposition="attachment; filename=x.json",
        CacheControl="max-age=60", ContentEncoding="identity", ContentLanguage="en",
        Expires=expires, Metadata={"Color": "blue", "n": "1"},
    )
    h = s3.head_object(Bucket=bucket, Key="m")
    assert h["ContentType"] == "application/json"
    assert h["ContentDisposition"] == "attachment; filename=x.json"
    assert h["CacheControl"] == "max-age=60"
    assert h["ContentEncoding"] == "identity"
    assert h["ContentLanguage"] == "en"
    assert h["Expires"] == expires
    assert h["Metadata"] == {"color": "blue", "n": "1"}
    g = s3.get_object(Bucket=bucket, Key="m", ResponseContentType="text/plain")
    assert g["ContentType"] == "text/plain"
    status, code, _ = error_of(s3.put_object, Bucket=bucket, Key="big-meta", Body=b"", Metadata={"a": "x" * 2100})
    assert (status, code) == (400, "MetadataTooLarge")
    assert_absent(s3, bucket, "big-meta")


def test_delete_and_delete_objects(s3, bucket):
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"d{i}", Body=b"x")
    s3.delete_object(Bucket=bucket, Key="d0")
    s3.delete_object(Bucket=bucket, Key="never-existed")
    assert_absent(s3, bucket, "d0")
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"d{i}"} for i in range(1, 4)]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["d1", "d2", "d3"]
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "d4"}], "Quiet": True})
    assert "Deleted" not in r and "Errors" not in r
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    assert error_of(s3.get_object, Bucket=bucket, Key="d1")[:2] == (404, "NoSuchKey")


def test_copy(s3, bucket, make_client):
    body = data(2 * MIB + 5, 3)
    s3.put_object(Bucket=bucket, Key="src", Body=body, Metadata={"a": "1"}, ContentType="text/x")
    r = s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    assert r["CopyObjectResult"]["ETag"] == f'"{md5(body)}"'
    h = s3.head_object(Bucket=bucket, Key="dst")
    assert (h["Metadata"], h["ContentType"]) == ({"a": "1"}, "text/x")
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == body
    s3.copy_object(Bucket=bucket, Key="dst2", CopySource=f"{bucket}/src", MetadataDirective="REPLACE", Metadata={"b": "2"}, ContentType="text/y")
    h = s3.head_object(Bucket=bucket, Key="dst2")
    assert (h["Metadata"], h["ContentType"]) == ({"b": "2"}, "text/y")
    status, code, _ = error_of(s3.copy_object, Bucket=bucket, Key="src", CopySource=f"{bucket}/src")
    assert (status, code) == (400, "InvalidRequest")
    # Replacing the metadata of an object in place is allowed.
    s3.copy_object(Bucket=bucket, Key="src", CopySource=f"{bucket}/src", MetadataDirective="REPLACE", Metadata={"c": "3"})
    assert s3.get_object(Bucket=bucket, Key="src")["Body"].read() == body
    assert error_of(s3.copy_object, Bucket=bucket, Key="x", CopySource=f"{bucket}/src", CopySourceIfMatch='"00"')[:2] == (412, "PreconditionFailed")
    assert error_of(s3.copy_object, Bucket=bucket, Key="x", CopySource=f"{bucket}/missing")[:2] == (404, "NoSuchKey")


def test_object_tagging(s3, bucket):
    s3.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging="a=1&b=two%20words")
    assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "two words"}]
    assert s3.get_object(Bucket=bucket, Key="t")["TagCount"] == 2
    s3.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]})
    assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == [{"Key": "k", "Value": "v"}]
    s3.delete_object_tagging(Bucket=bucket, Key="t")
    assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == []
    too_many = {"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(11)]}
    assert error_of(s3.put_object_tagging, Bucket=bucket, Key="t", Tagging=too_many)[:2] == (400, "InvalidTag")
    dup = {"TagSet": [{"Key": "k", "Value": "1"}, {"Key": "k", "Value": "2"}]}
    assert error_of(s3.put_object_tagging, Bucket=bucket, Key="t", Tagging=dup)[:2] == (400, "InvalidTag")


@pytest.mark.parametrize("key", ["日本語/ファイル", "../escape", "a/../b", "./x", "sp ace+plus%pct", "q?mark#hash", "x" * 1024, "emoji-🦀", "trailing/"])
def test_odd_keys(s3, bucket, key):
    s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == key.encode()
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == [key]
    url = s3.list_objects_v2(Bucket=bucket, EncodingType="url")
    assert [urllib.parse.unquote_plus(o["Key"]) for o in url["Contents"]] == [key]


def test_key_too_long(s3, bucket):
    status, code, _ = error_of(s3.put_object, Bucket=bucket, Key="x" * 1025, Body=b"x")
    assert (status, code) == (400, "KeyTooLongError")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
