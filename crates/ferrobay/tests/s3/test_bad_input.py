"""Bad input gets AWS's error and leaves nothing stored: malformed or truncated bodies,
bad chunk signatures, trailer checksums, invalid XML, oversized headers."""

import base64
import hashlib
import zlib

from helpers import MIB, assert_absent, data, error_of
from sigv4 import Signer, aws_chunked, error_code, send


def put_raw(bucket, key, body, headers=None, payload_hash=None, content_length=None, close_after_body=False):
    s = Signer()
    ph = payload_hash or hashlib.sha256(body).hexdigest()
    h, sig, amz_date, scope = s.sign("PUT", f"/{bucket}/{key}", headers=headers, payload_hash=ph)
    return send("PUT", f"/{bucket}/{key}", "", h, body, content_length=content_length, close_after_body=close_after_body)


def test_signed_body_mismatch(s3, bucket):
    status, _, body = put_raw(bucket, "k", b"actual", payload_hash=hashlib.sha256(b"claimed").hexdigest())
    assert (status, error_code(body)) == (400, "XAmzContentSHA256Mismatch")
    assert_absent(s3, bucket, "k")


def test_truncated_bodies_store_nothing(s3, bucket):
    for size in [1000, 3 * MIB]:
        body = data(size, 40)
        status, _, resp = put_raw(
            bucket, f"t{size}", body[: size // 2], payload_hash="UNSIGNED-PAYLOAD",
            content_length=size, close_after_body=True,
        )
        # The client stopped sending: the gateway answers IncompleteBody or drops the
        # connection; either way the object must not exist.
        assert status in (None, 400), (status, resp)
        if status == 400:
            assert error_code(resp) == "IncompleteBody"
        assert_absent(s3, bucket, f"t{size}")


def chunked_put(bucket, key, payload, trailer_alg=None, trailer_value=None, sign=False, corrupt_chunk=None, raw_body=None):
    s = Signer()
    headers = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(payload))}
    if sign:
        mode = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
    else:
        mode = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    trailer = None
    if trailer_alg:
        headers["x-amz-trailer"] = f"x-amz-checksum-{trailer_alg}"
        trailer = f"x-amz-checksum-{trailer_alg}:{trailer_value}"
    h, sig, amz_date, scope = s.sign("PUT", f"/{bucket}/{key}", headers=headers, payload_hash=mode)
    body = raw_body if raw_body is not None else aws_chunked(
        payload, 64 << 10, signer=s if sign else None, seed=sig, amz_date=amz_date, scope=scope,
        trailer=trailer, corrupt_chunk=corrupt_chunk,
    )
    return send("PUT", f"/{bucket}/{key}", "", h, body)


def crc32_b64(b):
    return base64.b64encode((zlib.crc32(b) & 0xFFFFFFFF).to_bytes(4, "big")).decode()


def test_aws_chunked_with_trailer_checksum(s3, bucket):
    payload = data(MIB + 5, 41)
    status, _, body = chunked_put(bucket, "good", payload, "crc32", crc32_b64(payload))
    assert status == 200, body
    assert s3.get_object(Bucket=bucket, Key="good")["Body"].read() == payload
    status, _, body = chunked_put(bucket, "bad", payload, "crc32", crc32_b64(payload + b"!"))
    assert (status, error_code(body)) == (400, "BadDigest")
    assert_absent(s3, bucket, "bad")


def test_signed_chunks(s3, bucket):
    payload = data(300 << 10, 42)
    status, _, body = chunked_put(bucket, "signed", payload, sign=True)
    assert status == 200, body
    assert s3.get_object(Bucket=bucket, Key="signed")["Body"].read() == payload
    status, _, body = chunked_put(bucket, "forged", payload, sign=True, corrupt_chunk=2)
    assert (status, error_code(body)) == (403, "SignatureDoesNotMatch")
    assert_absent(s3, bucket, "forged")


def test_malformed_chunk_framing(s3, bucket):
    payload = b"hello world"
    for raw in [b"zz\r\nhello world\r\n0\r\n\r\n", b"5\r\nhello world\r\n0\r\n\r\n", b"b\r\nhello world"]:
        status, _, body = chunked_put(bucket, "mal", payload, raw_body=raw)
        assert status is None or 400 <= status < 500, (raw, status, body)
        assert_absent(s3, bucket, "mal")


def post_xml(bucket, query, xml, extra=None):
    s = Signer()
    headers = {"content-md5": base64.b64encode(hashlib.md5(xml).digest()).decode(), "content-type": "application/xml"}
    headers.update(extra or {})
    h, *_ = s.sign("POST", f"/{bucket}", query=query, headers=headers, payload_hash=hashlib.sha256(xml).hexdigest())
    return send("POST", f"/{bucket}", query, h, xml)


def test_invalid_xml(s3, bucket):
    s3.put_object(Bucket=bucket, Key="keep", Body=b"x")
    status, _, body = post_xml(bucket, "delete=", b"<Delete><Object><Key>keep</Key></Object>")
    assert (status, error_code(body)) == (400, "MalformedXML")
    assert s3.get_object(Bucket=bucket, Key="keep")["Body"].read() == b"x"
    u = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    s = Signer()
    xml = b"<CompleteMultipartUpload><Part><PartNumber>one</PartNumber></Part></CompleteMultipartUpload>"
    h, *_ = s.sign("POST", f"/{bucket}/mp", query=f"uploadId={u}", payload_hash=hashlib.sha256(xml).hexdigest())
    status, _, body = send("POST", f"/{bucket}/mp", f"uploadId={u}", h, xml)
    assert (status, error_code(body)) == (400, "MalformedXML")
    assert_absent(s3, bucket, "mp")


def test_oversized_header_section(s3, bucket):
    status, _, body = put_raw(bucket, "h", b"x", headers={"x-padding": "p" * 9000})
    assert (status, error_code(body)) == (400, "RequestHeaderSectionTooLarge")
    assert_absent(s3, bucket, "h")


def test_answers_before_the_body_keep_their_error(s3, bucket):
    """The gateway answers some requests before reading their bodies (a bad upload id, a
    part number out of range). What is left of the body must neither reset the answer
    nor be read as the next request on the connection: once it did, a third of these
    came back as a bare (400, '400') or a (404, '404') without the error document."""
    u = s3.create_multipart_upload(Bucket=bucket, Key="early")["UploadId"]
    seen = []
    for _ in range(60):
        seen.append(error_of(s3.upload_part, Bucket=bucket, Key="early", UploadId=u, PartNumber=10001, Body=b"x")[:2])
        seen.append(error_of(s3.upload_part, Bucket=bucket, Key="early", UploadId="nope", PartNumber=1, Body=b"x")[:2])
    wrong = [s for s in seen if s not in ((400, "InvalidArgument"), (404, "NoSuchUpload"))]
    assert wrong == [], f"{len(wrong)} of {len(seen)} answers lost their error: {wrong[:5]}"
    s3.abort_multipart_upload(Bucket=bucket, Key="early", UploadId=u)
