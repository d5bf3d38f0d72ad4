"""ListObjects V1 and V2: prefixes, delimiters, pagination, encoding."""

import urllib.parse


KEYS = sorted(
    [f"photos/2024/{i:02}.jpg" for i in range(7)]
    + [f"photos/2025/{i:02}.jpg" for i in range(5)]
    + ["photos/index.html", "readme", "zeta/a", "é/b", "a+b c"]
)


def fill(s3, bucket):
    for k in KEYS:
        s3.put_object(Bucket=bucket, Key=k, Body=b"")


def model(prefix="", delimiter=None):
    keys, prefixes = [], []
    for k in KEYS:
        if not k.startswith(prefix):
            continue
        rest = k[len(prefix):]
        if delimiter and delimiter in rest:
            cp = prefix + rest[: rest.index(delimiter) + len(delimiter)]
            if cp not in prefixes:
                prefixes.append(cp)
        else:
            keys.append(k)
    return sorted(keys, key=lambda s: s.encode()), sorted(prefixes, key=lambda s: s.encode())


def test_v2_pages_match_the_model(s3, bucket):
    fill(s3, bucket)
    for prefix, delim in [("", None), ("", "/"), ("photos/", "/"), ("photos/2024/", None), ("nothing", "/")]:
        for max_keys in [1, 3, 1000]:
            keys, prefixes, token, pages = [], [], None, 0
            while True:
                args = dict(Bucket=bucket, Prefix=prefix, MaxKeys=max_keys)
                if delim:
                    args["Delimiter"] = delim
                if token:
                    args["ContinuationToken"] = token
                r = s3.list_objects_v2(**args)
                pages += 1
                assert r["KeyCount"] == len(r.get("Contents", [])) + len(r.get("CommonPrefixes", []))
                assert r["KeyCount"] <= max_keys
                keys += [o["Key"] for o in r.get("Contents", [])]
                prefixes += [p["Prefix"] for p in r.get("CommonPrefixes", [])]
                if not r["IsTruncated"]:
                    break
                token = r["NextContinuationToken"]
            assert (keys, prefixes) == model(prefix, delim), (prefix, delim, max_keys)


def test_v1_markers_and_start_after(s3, bucket):
    fill(s3, bucket)
    r = s3.list_objects(Bucket=bucket, Delimiter="/", MaxKeys=2)
    assert r["IsTruncated"] and r["NextMarker"]
    keys, prefixes, marker = [], [], ""
    while True:
        r = s3.list_objects(Bucket=bucket, Delimiter="/", MaxKeys=2, Marker=marker)
        keys += [o["Key"] for o in r.get("Contents", [])]
        prefixes += [p["Prefix"] for p in r.get("CommonPrefixes", [])]
        if not r["IsTruncated"]:
            break
        marker = r["NextMarker"]
    assert (keys, prefixes) == model("", "/")
    after = s3.list_objects_v2(Bucket=bucket, StartAfter="photos/2025/02.jpg", Prefix="photos/")
    assert [o["Key"] for o in after["Contents"]] == ["photos/2025/03.jpg", "photos/2025/04.jpg", "photos/index.html"]


def test_url_encoding_and_limits(s3, bucket):
    fill(s3, bucket)
    # Asked for explicitly, encoded keys reach the caller as sent.
    r = s3.list_objects_v2(Bucket=bucket, EncodingType="url", Prefix="a")
    assert [urllib.parse.unquote_plus(o["Key"]) for o in r["Contents"]] == ["a+b c"]
    assert "+" not in r["Contents"][0]["Key"] and " " not in r["Contents"][0]["Key"]
    raw = s3.list_objects_v2(Bucket=bucket, MaxKeys=0)
    assert raw["KeyCount"] == 0
    r = s3.list_objects_v2(Bucket=bucket, MaxKeys=5000)
    assert r["MaxKeys"] == 1000 and r["KeyCount"] == len(KEYS)
    assert r["Contents"][0]["Size"] == 0 and r["Contents"][0]["ETag"] == '"d41d8cd98f00b204e9800998ecf8427e"'
