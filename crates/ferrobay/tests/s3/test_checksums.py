"""Object checksums (CRC32, CRC32C, CRC64NVME, SHA-1, SHA-256) and Content-MD5."""

import base64
import hashlib
import zlib

import pytest

from helpers import MIB, assert_absent, data, error_of


def _crc(poly, width, b):
    # Reflected CRC with init and xorout all ones (CRC32C, CRC64/NVME).
    mask = (1 << width) - 1
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    crc = mask
    for x in b:
        crc = table[(crc ^ x) & 0xFF] ^ (crc >> 8)
    return (crc ^ mask).to_bytes(width // 8, "big")


def digest(alg, b):
    if alg == "CRC32":
        return (zlib.crc32(b) & 0xFFFFFFFF).to_bytes(4, "big")
    if alg == "CRC32C":
        return _crc(0x82F63B78, 32, b)
    if alg == "CRC64NVME":
        return _crc(0x9A6C9329AC4BC9B5, 64, b)
    return hashlib.new(alg.lower().replace("sha", "sha"), b).digest()


def b64(x):
    return base64.b64encode(x).decode()


ALGS = ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"]


@pytest.mark.parametrize("alg", ALGS)
def test_checksum_values_are_checked_and_kept(s3, bucket, alg):
    body = data(MIB + 11, 21)
    value = b64(digest(alg, body))
    field = "Checksum" + alg
    r = s3.put_object(Bucket=bucket, Key="c", Body=body, **{field: value})
    assert r.get(field) == value
    h = s3.head_object(Bucket=bucket, Key="c", ChecksumMode="ENABLED")
    assert h[field] == value
    g = s3.get_object(Bucket=bucket, Key="c", ChecksumMode="ENABLED")
    assert g[field] == value and g["Body"].read() == body
    wrong = b64(digest(alg, body + b"x"))
    status, code, _ = error_of(s3.put_object, Bucket=bucket, Key="wrong", Body=body, **{field: wrong})
    assert (status, code) == (400, "BadDigest")
    assert_absent(s3, bucket, "wrong")


@pytest.mark.parametrize("alg", ["CRC32", "SHA1", "SHA256"])
def test_sdk_computed_checksums(s3, bucket, alg):
    body = data(3 * MIB, 22)
    s3.put_object(Bucket=bucket, Key="s", Body=body, ChecksumAlgorithm=alg)
    h = s3.head_object(Bucket=bucket, Key="s", ChecksumMode="ENABLED")
    assert h["Checksum" + alg] == b64(digest(alg, body))


def test_content_md5(s3, bucket):
    body = b"integrity"
    good = b64(hashlib.md5(body).digest())
    s3.put_object(Bucket=bucket, Key="m", Body=body, ContentMD5=good)
    bad = b64(hashlib.md5(b"other").digest())
    assert error_of(s3.put_object, Bucket=bucket, Key="m2", Body=body, ContentMD5=bad)[:2] == (400, "BadDigest")
    assert error_of(s3.put_object, Bucket=bucket, Key="m3", Body=body, ContentMD5="nonsense")[:2] == (400, "InvalidDigest")
    assert_absent(s3, bucket, "m2")
    assert_absent(s3, bucket, "m3")


@pytest.mark.parametrize("alg,kind", [("SHA256", "COMPOSITE"), ("CRC32", "COMPOSITE"), ("CRC32C", "FULL_OBJECT"), ("CRC64NVME", "FULL_OBJECT")])
def test_multipart_checksums(s3, bucket, alg, kind):
    parts = [data(5 * MIB, 30), data(MIB, 31)]
    u = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm=alg, ChecksumType=kind)["UploadId"]
    done = []
    for n, p in enumerate(parts, start=1):
        v = b64(digest(alg, p))
        r = s3.upload_part(Bucket=bucket, Key="mp", UploadId=u, PartNumber=n, Body=p, **{"Checksum" + alg: v})
        assert r["Checksum" + alg] == v
        done.append({"PartNumber": n, "ETag": r["ETag"], "Checksum" + alg: v})
    r = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=u, MultipartUpload={"Parts": done})
    if kind == "FULL_OBJECT":
        want = b64(digest(alg, b"".join(parts)))
    else:
        want = b64(digest(alg, b"".join(digest(alg, p) for p in parts))) + f"-{len(parts)}"
    assert r["Checksum" + alg] == want
    h = s3.head_object(Bucket=bucket, Key="mp", ChecksumMode="ENABLED")
    assert h["Checksum" + alg] == want and h["ChecksumType"] == kind


def test_part_checksum_mismatch(s3, bucket):
    u = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="SHA256")["UploadId"]
    wrong = b64(hashlib.sha256(b"x").digest())
    assert error_of(s3.upload_part, Bucket=bucket, Key="mp", UploadId=u, PartNumber=1, Body=b"abc", ChecksumSHA256=wrong)[:2] == (400, "BadDigest")
    assert s3.list_parts(Bucket=bucket, Key="mp", UploadId=u).get("Parts", []) == []
