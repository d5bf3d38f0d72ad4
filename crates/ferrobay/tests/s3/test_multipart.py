"""Multipart uploads."""

import boto3.s3.transfer

from helpers import MIB, assert_absent, data, error_of, md5

import hashlib


def upload(s3, bucket, key, parts, **create):
    u = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
    done = []
    for n, body in enumerate(parts, start=1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=u, PartNumber=n, Body=body)
        assert r["ETag"] == f'"{md5(body)}"'
        done.append({"PartNumber": n, "ETag": r["ETag"]})
    return u, done


def test_complete_and_read(s3, bucket):
    parts = [data(5 * MIB, 1), data(5 * MIB, 2), data(MIB + 17, 3)]
    u, done = upload(s3, bucket, "mp", parts, ContentType="video/mp4", Metadata={"x": "y"})
    listed = s3.list_parts(Bucket=bucket, Key="mp", UploadId=u)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in listed] == [(1, 5 * MIB), (2, 5 * MIB), (3, MIB + 17)]
    assert [x["UploadId"] for x in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [u]
    r = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=u, MultipartUpload={"Parts": done})
    whole = b"".join(parts)
    want_etag = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-3"
    assert r["ETag"] == f'"{want_etag}"'
    g = s3.get_object(Bucket=bucket, Key="mp")
    assert g["Body"].read() == whole
    assert (g["ContentType"], g["Metadata"]) == ("video/mp4", {"x": "y"})
    assert s3.get_object(Bucket=bucket, Key="mp", PartNumber=2)["Body"].read() == parts[1]
    assert s3.head_object(Bucket=bucket, Key="mp", PartNumber=3)["PartsCount"] == 3
    rng = s3.get_object(Bucket=bucket, Key="mp", Range=f"bytes={5 * MIB - 3}-{5 * MIB + 2}")["Body"].read()
    assert rng == whole[5 * MIB - 3 : 5 * MIB + 3]
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert error_of(s3.list_parts, Bucket=bucket, Key="mp", UploadId=u)[:2] == (404, "NoSuchUpload")


def test_replaced_part_and_subset(s3, bucket):
    u, done = upload(s3, bucket, "sub", [data(5 * MIB, 4), data(5 * MIB, 5), data(10, 6)])
    # Upload part 2 again with other bytes, complete with parts 1 and 2 only.
    new2 = data(5 * MIB, 7)
    e2 = s3.upload_part(Bucket=bucket, Key="sub", UploadId=u, PartNumber=2, Body=new2)["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key="sub", UploadId=u, MultipartUpload={"Parts": [done[0], {"PartNumber": 2, "ETag": e2}]})
    assert s3.get_object(Bucket=bucket, Key="sub")["Body"].read() == data(5 * MIB, 4) + new2


def test_complete_errors(s3, bucket):
    u, done = upload(s3, bucket, "bad", [data(MIB, 8), data(MIB, 9)])
    assert error_of(s3.complete_multipart_upload, Bucket=bucket, Key="bad", UploadId=u, MultipartUpload={"Parts": done})[:2] == (400, "EntityTooSmall")
    wrong = [{"PartNumber": 1, "ETag": '"00000000000000000000000000000000"'}]
    assert error_of(s3.complete_multipart_upload, Bucket=bucket, Key="bad", UploadId=u, MultipartUpload={"Parts": wrong})[:2] == (400, "InvalidPart")
    assert error_of(s3.complete_multipart_upload, Bucket=bucket, Key="bad", UploadId=u, MultipartUpload={"Parts": done[::-1]})[:2] == (400, "InvalidPartOrder")
    assert error_of(s3.upload_part, Bucket=bucket, Key="bad", UploadId=u, PartNumber=10001, Body=b"x")[:2] == (400, "InvalidArgument")
    assert error_of(s3.upload_part, Bucket=bucket, Key="bad", UploadId="nope", PartNumber=1, Body=b"x")[:2] == (404, "NoSuchUpload")
    # The upload is intact after the refused completions; abort removes it.
    assert len(s3.list_parts(Bucket=bucket, Key="bad", UploadId=u)["Parts"]) == 2
    s3.abort_multipart_upload(Bucket=bucket, Key="bad", UploadId=u)
    assert error_of(s3.list_parts, Bucket=bucket, Key="bad", UploadId=u)[:2] == (404, "NoSuchUpload")
    assert_absent(s3, bucket, "bad")


def test_upload_part_copy(s3, bucket):
    src = data(6 * MIB, 10)
    s3.put_object(Bucket=bucket, Key="src", Body=src)
    u = s3.create_multipart_upload(Bucket=bucket, Key="cp")["UploadId"]
    p1 = s3.upload_part_copy(Bucket=bucket, Key="cp", UploadId=u, PartNumber=1, CopySource=f"{bucket}/src", CopySourceRange=f"bytes=0-{5 * MIB - 1}")
    p2 = s3.upload_part_copy(Bucket=bucket, Key="cp", UploadId=u, PartNumber=2, CopySource=f"{bucket}/src")
    parts = [{"PartNumber": 1, "ETag": p1["CopyPartResult"]["ETag"]}, {"PartNumber": 2, "ETag": p2["CopyPartResult"]["ETag"]}]
    s3.complete_multipart_upload(Bucket=bucket, Key="cp", UploadId=u, MultipartUpload={"Parts": parts})
    assert s3.get_object(Bucket=bucket, Key="cp")["Body"].read() == src[: 5 * MIB] + src
    bad = error_of(s3.upload_part_copy, Bucket=bucket, Key="cp", UploadId="x", PartNumber=1, CopySource=f"{bucket}/src")
    assert bad[:2] == (404, "NoSuchUpload")


def test_transfer_manager(s3, bucket, tmp_path):
    # boto3's own multipart path (threads, 5 MiB chunks).
    path = tmp_path / "f"
    body = data(12 * MIB + 1, 11)
    path.write_bytes(body)
    cfg = boto3.s3.transfer.TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    s3.upload_file(str(path), bucket, "tm", Config=cfg)
    out = tmp_path / "g"
    s3.download_file(bucket, "tm", str(out), Config=cfg)
    assert out.read_bytes() == body
