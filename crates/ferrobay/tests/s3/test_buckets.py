"""Bucket operations as boto3 sees them."""

import uuid

from helpers import error_of


def test_bucket_lifecycle(s3):
    name = "b-" + uuid.uuid4().hex[:16]
    s3.create_bucket(Bucket=name)
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.head_bucket(Bucket=name)
    assert s3.get_bucket_location(Bucket=name).get("LocationConstraint") in (None, "")
    # us-east-1 answers 200 to re-creating one's own bucket and changes nothing.
    s3.put_object(Bucket=name, Key="k", Body=b"x")
    s3.create_bucket(Bucket=name)
    assert s3.get_object(Bucket=name, Key="k")["Body"].read() == b"x"
    assert error_of(s3.delete_bucket, Bucket=name)[:2] == (409, "BucketNotEmpty")
    s3.delete_object(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)
    assert error_of(s3.head_bucket, Bucket=name)[0] == 404
    assert error_of(s3.list_objects_v2, Bucket=name)[:2] == (404, "NoSuchBucket")
    assert error_of(s3.delete_bucket, Bucket=name)[:2] == (404, "NoSuchBucket")


def test_invalid_bucket_names(s3):
    for bad in ["ab", "UPPER", "a" * 64, "under_score", "-dash", "192.168.5.4"]:
        status, code, _ = error_of(s3.create_bucket, Bucket=bad)
        assert status == 400 and code == "InvalidBucketName", (bad, status, code)


def test_bucket_tagging(s3, bucket):
    assert error_of(s3.get_bucket_tagging, Bucket=bucket)[:2] == (404, "NoSuchTagSet")
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "team", "Value": "storage"}]})
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == [{"Key": "team", "Value": "storage"}]
    s3.delete_bucket_tagging(Bucket=bucket)
    assert error_of(s3.get_bucket_tagging, Bucket=bucket)[:2] == (404, "NoSuchTagSet")


def test_unknown_bucket_erasure_code_is_refused(s3):
    name = "b-" + uuid.uuid4().hex[:16]

    def add_header(request, **_):
        request.headers["x-ferrobay-erasure"] = "9+4"

    s3.meta.events.register_first("before-sign.s3.CreateBucket", add_header)
    try:
        status, code, msg = error_of(s3.create_bucket, Bucket=name)
    finally:
        s3.meta.events.unregister("before-sign.s3.CreateBucket", add_header)
    assert (status, code) == (400, "InvalidArgument")
    assert "failure domains" in msg


def test_acls_show_the_single_owner(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    for acl in [s3.get_bucket_acl(Bucket=bucket), s3.get_object_acl(Bucket=bucket, Key="k")]:
        assert acl["Owner"]["ID"] == "ferrobay"
        assert [g["Permission"] for g in acl["Grants"]] == ["FULL_CONTROL"]
    assert error_of(s3.get_object_acl, Bucket=bucket, Key="missing")[:2] == (404, "NoSuchKey")
