"""Shared helpers of the end-to-end S3 suite."""

import hashlib
import os

import botocore.exceptions
import pytest


def error_of(fn, *args, **kwargs):
    """Runs fn, expecting an S3 error; returns (HTTP status, error code, message)."""
    with pytest.raises(botocore.exceptions.ClientError) as e:
        fn(*args, **kwargs)
    r = e.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"].get("Code"), r["Error"].get("Message")


def data(n, seed=0):
    """n pseudo-random bytes, the same for the same seed."""
    out = bytearray()
    block = hashlib.sha256(f"{seed}".encode()).digest()
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n])


def md5(b):
    return hashlib.md5(b).hexdigest()


def assert_absent(s3, bucket, key):
    status, code, _ = error_of(s3.head_object, Bucket=bucket, Key=key)
    assert (status, code) == (404, "404"), (status, code)


MIB = 1 << 20
ENDPOINT = os.environ.get("S3_ENDPOINT", "")
