"""Signatures, presigned URLs, access keys, anonymous access and bucket policies."""

import json
import os
import time
import urllib.error
import urllib.request

import pytest

from helpers import error_of


def http_get(url, method="GET", data=None, headers=None):
    req = urllib.request.Request(url, method=method, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def code_of(body):
    text = body.decode()
    return text.split("<Code>")[1].split("</Code>")[0] if "<Code>" in text else None


def test_wrong_secret_and_unknown_key(bucket, make_client):
    wrong = make_client(secret="not-the-secret")
    assert error_of(wrong.list_objects_v2, Bucket=bucket)[:2] == (403, "SignatureDoesNotMatch")
    stranger = make_client(access="NOSUCHKEY000", secret="whatever123")
    assert error_of(stranger.list_objects_v2, Bucket=bucket)[:2] == (403, "InvalidAccessKeyId")
    assert error_of(wrong.put_object, Bucket=bucket, Key="k", Body=b"x")[0] == 403
    assert make_client().list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_second_access_key(bucket, make_client):
    alt = make_client(access=os.environ["S3_ALT_ACCESS_KEY"], secret=os.environ["S3_ALT_SECRET_KEY"])
    alt.put_object(Bucket=bucket, Key="alt", Body=b"from alt")
    assert alt.get_object(Bucket=bucket, Key="alt")["Body"].read() == b"from alt"


def test_presigned_urls(bucket, make_client):
    s3 = make_client(signature_version="s3v4")
    s3.put_object(Bucket=bucket, Key="p", Body=b"presigned")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"}, ExpiresIn=600)
    assert http_get(url) == (200, b"presigned")
    sig_at = url.index("X-Amz-Signature=") + len("X-Amz-Signature=")
    flipped = "1" if url[sig_at] == "0" else "0"
    tampered = url[:sig_at] + flipped + url[sig_at + 1 :]
    status, body = http_get(tampered)
    assert (status, code_of(body)) == (403, "SignatureDoesNotMatch")
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "up"}, ExpiresIn=600)
    assert http_get(put_url, method="PUT", data=b"uploaded", headers={"Content-Type": ""})[0] == 200
    assert s3.get_object(Bucket=bucket, Key="up")["Body"].read() == b"uploaded"
    short = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"}, ExpiresIn=1)
    time.sleep(2.5)
    status, body = http_get(short)
    assert (status, code_of(body)) == (403, "AccessDenied")
    assert "expired" in body.decode().lower()


def test_anonymous_access_follows_the_bucket_policy(s3, bucket):
    s3.put_object(Bucket=bucket, Key="pub/a.txt", Body=b"public")
    s3.put_object(Bucket=bucket, Key="private.txt", Body=b"secret")
    base = os.environ["S3_ENDPOINT"] + f"/{bucket}"
    status, body = http_get(f"{base}/pub/a.txt")
    assert (status, code_of(body)) == (403, "AccessDenied")
    assert error_of(s3.get_bucket_policy, Bucket=bucket)[:2] == (404, "NoSuchBucketPolicy")
    policy = {
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "PublicRead", "Effect": "Allow", "Principal": "*",
            "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/pub/*",
        }],
    }
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    assert json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"]) == policy
    assert http_get(f"{base}/pub/a.txt") == (200, b"public")
    assert http_get(f"{base}/pub/a.txt", method="HEAD")[0] == 200
    for url, method in [(f"{base}/private.txt", "GET"), (f"{base}?list-type=2", "GET"), (f"{base}/pub/new", "PUT")]:
        status, body = http_get(url, method=method, data=b"x" if method == "PUT" else None)
        assert status == 403, (url, method)
    s3.delete_bucket_policy(Bucket=bucket)
    assert http_get(f"{base}/pub/a.txt")[0] == 403


@pytest.mark.parametrize("doc", ["{", '{"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::other/*", "Principal": "*"}]}'])
def test_malformed_policy(s3, bucket, doc):
    assert error_of(s3.put_bucket_policy, Bucket=bucket, Policy=doc)[:2] == (400, "MalformedPolicy")
