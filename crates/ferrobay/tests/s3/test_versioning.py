"""Versioning: enable, suspend, version ids, delete markers, ListObjectVersions."""

from helpers import error_of


def test_versions_and_markers(s3, bucket):
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"before")  # the null version
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    ids = [s3.put_object(Bucket=bucket, Key="k", Body=f"v{i}".encode())["VersionId"] for i in range(3)]
    assert len(set(ids)) == 3 and "null" not in ids
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v2"
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=ids[0])["Body"].read() == b"v0"
    assert s3.get_object(Bucket=bucket, Key="k", VersionId="null")["Body"].read() == b"before"
    d = s3.delete_object(Bucket=bucket, Key="k")
    assert d["DeleteMarker"] is True
    marker = d["VersionId"]
    status, code, _ = error_of(s3.get_object, Bucket=bucket, Key="k")
    assert (status, code) == (404, "NoSuchKey")
    assert error_of(s3.head_object, Bucket=bucket, Key="k", VersionId=marker)[0] == 405
    v = s3.list_object_versions(Bucket=bucket)
    assert [(x["VersionId"], x["IsLatest"]) for x in v["DeleteMarkers"]] == [(marker, True)]
    assert [x["VersionId"] for x in v["Versions"]] == ids[::-1] + ["null"]
    # Paged two at a time.
    seen, km, vm = [], None, None
    while True:
        args = dict(Bucket=bucket, MaxKeys=2)
        if km:
            args.update(KeyMarker=km, VersionIdMarker=vm)
        p = s3.list_object_versions(**args)
        seen += [x["VersionId"] for x in p.get("DeleteMarkers", []) + p.get("Versions", [])]
        if not p["IsTruncated"]:
            break
        km, vm = p["NextKeyMarker"], p["NextVersionIdMarker"]
    assert sorted(seen) == sorted([marker] + ids + ["null"])
    # Removing the marker brings v2 back; removing a version for good.
    s3.delete_object(Bucket=bucket, Key="k", VersionId=marker)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v2"
    s3.delete_object(Bucket=bucket, Key="k", VersionId=ids[2])
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v1"
    assert error_of(s3.get_object, Bucket=bucket, Key="k", VersionId=ids[2])[0] == 404


def test_suspended_writes_the_null_version(s3, bucket):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    kept = s3.put_object(Bucket=bucket, Key="k", Body=b"kept")["VersionId"]
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"
    assert s3.put_object(Bucket=bucket, Key="k", Body=b"n1").get("VersionId") == "null"
    s3.put_object(Bucket=bucket, Key="k", Body=b"n2")
    ids = [x["VersionId"] for x in s3.list_object_versions(Bucket=bucket)["Versions"]]
    assert ids == ["null", kept]
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"n2"
    d = s3.delete_object(Bucket=bucket, Key="k")
    assert d["DeleteMarker"] is True and d["VersionId"] == "null"
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=kept)["Body"].read() == b"kept"
