"""Fixtures of the end-to-end S3 suite: clients for the gateway that
crates/ferrobay/tests/s3_gateway.rs starts (endpoint and keys in the environment)."""

import os
import uuid

import boto3
import botocore.config
import pytest


def _client(access=None, secret=None, **cfg):
    return boto3.client(
        "s3",
        endpoint_url=os.environ["S3_ENDPOINT"],
        aws_access_key_id=access or os.environ["S3_ACCESS_KEY"],
        aws_secret_access_key=secret or os.environ["S3_SECRET_KEY"],
        region_name=os.environ.get("S3_REGION", "us-east-1"),
        config=botocore.config.Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            **cfg,
        ),
    )


@pytest.fixture(scope="session")
def s3():
    return _client()


@pytest.fixture(scope="session")
def make_client():
    return _client


@pytest.fixture
def bucket(s3):
    name = "t-" + uuid.uuid4().hex[:20]
    s3.create_bucket(Bucket=name)
    yield name
    # Empty and remove it (every version and upload).
    try:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=name):
            for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                s3.delete_object(Bucket=name, Key=v["Key"], VersionId=v["VersionId"])
        for u in s3.list_multipart_uploads(Bucket=name).get("Uploads", []):
            s3.abort_multipart_upload(Bucket=name, Key=u["Key"], UploadId=u["UploadId"])
        s3.delete_bucket(Bucket=name)
    except Exception as e:  # the test's own failure matters more
        print(f"cleanup of {name}: {e}")
