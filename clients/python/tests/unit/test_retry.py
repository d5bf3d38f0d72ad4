"""Retry policy: what is retried, where, how often, and what is never retried."""

import http.server
import random
import threading

import botocore.exceptions
import pytest
from fakes import client_error, refused, reset

from ferrobay_s3 import Client, EndpointsExhaustedError, RetryConfig
from ferrobay_s3.config import RetryConfig as RC
from ferrobay_s3.retry import Backoff, Verdict, classify, may_retry


@pytest.mark.parametrize(
    "error, verdict",
    [
        (refused("http://x"), Verdict.NOT_SENT),
        (botocore.exceptions.ConnectTimeoutError(endpoint_url="http://x"), Verdict.NOT_SENT),
        (reset("http://x"), Verdict.ENDPOINT_FAILED),
        (botocore.exceptions.ReadTimeoutError(endpoint_url="http://x"), Verdict.ENDPOINT_FAILED),
        (botocore.exceptions.ResponseStreamingError(error="cut"), Verdict.ENDPOINT_FAILED),
        (botocore.exceptions.IncompleteReadError(actual_bytes=1, expected_bytes=2), Verdict.ENDPOINT_FAILED),
        (ConnectionResetError(), Verdict.ENDPOINT_FAILED),
        (client_error(500, "InternalError"), Verdict.ENDPOINT_FAILED),
        (client_error(503, "ServiceUnavailable"), Verdict.ENDPOINT_FAILED),
        (client_error(501, "NotImplemented"), Verdict.DEFINITIVE),
        (client_error(404, "NoSuchKey"), Verdict.DEFINITIVE),
        (client_error(403, "AccessDenied"), Verdict.DEFINITIVE),
        (client_error(412, "PreconditionFailed"), Verdict.DEFINITIVE),
        (client_error(400, "RequestTimeout"), Verdict.DEFINITIVE),
        (botocore.exceptions.ParamValidationError(report="bad"), Verdict.DEFINITIVE),
        (ValueError("bug"), Verdict.DEFINITIVE),
    ],
)
def test_classify(error, verdict):
    assert classify(error) is verdict


def test_only_idempotent_requests_are_retried_after_they_may_have_arrived():
    assert may_retry(Verdict.NOT_SENT, idempotent=False)
    assert may_retry(Verdict.ENDPOINT_FAILED, idempotent=True)
    assert not may_retry(Verdict.ENDPOINT_FAILED, idempotent=False)
    assert not may_retry(Verdict.DEFINITIVE, idempotent=True)


def test_backoff_doubles_with_jitter_and_a_cap():
    b = Backoff(RC(backoff_base_s=0.1, backoff_max_s=0.5), random.Random(1))
    assert b.delay_s(0) == 0
    for retry, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.5), (9, 0.5)]:
        for _ in range(50):
            d = b.delay_s(retry)
            assert ceiling / 2 <= d <= ceiling


def test_a_dead_owner_sends_the_request_to_the_next_endpoint(cluster, make_client):
    c = make_client()
    c.put_object(Bucket="b", Key="k", Body=b"v")
    first, second = c._pool.ranked("b", "k")[:2]
    cluster.s3[first].down = True
    assert c.get_object(Bucket="b", Key="k")["Body"].read() == b"v"
    assert cluster.calls("GetObject")[second] == 1
    assert first not in c.healthy_endpoints()
    # Routed to the second endpoint from now on, without touching the dead one.
    before = cluster.calls("GetObject")[first]
    c.head_object(Bucket="b", Key="k")
    assert cluster.calls("GetObject")[first] == before
    assert cluster.calls("HeadObject")[second] == 1


def test_s3_errors_are_raised_at_once(cluster, make_client):
    c = make_client()
    with pytest.raises(botocore.exceptions.ClientError) as e:
        c.get_object(Bucket="b", Key="missing")
    assert e.value.response["Error"]["Code"] == "NoSuchKey"
    assert sum(cluster.calls("GetObject").values()) == 1
    assert c.healthy_endpoints() == cluster.urls and c.sleeps == []


def test_5xx_is_retried_elsewhere_for_idempotent_requests(cluster, make_client):
    c = make_client()
    owner = c.endpoint_for("b", "k")
    cluster.s3[owner].faults.append(lambda op, kw: client_error(503, "ServiceUnavailable"))
    c.put_object(Bucket="b", Key="k", Body=b"x")
    assert cluster.model.objects[("b", "k")][0] == b"x"
    assert owner not in c.healthy_endpoints()
    assert len(c.sleeps) == 1


def test_conditional_put_is_not_retried_after_it_may_have_arrived(cluster, make_client):
    c = make_client()
    owner = c.endpoint_for("b", "k")
    cluster.s3[owner].faults.append(lambda op, kw: reset(owner))
    with pytest.raises(botocore.exceptions.ConnectionClosedError):
        c.put_object(Bucket="b", Key="k", Body=b"x", IfNoneMatch="*")
    assert sum(cluster.calls("PutObject").values()) == 1
    # But one whose connection was refused never arrived: it goes elsewhere.
    cluster.s3[owner].faults.clear()
    cluster.s3[owner].down = True
    c2 = make_client()
    c2.put_object(Bucket="b", Key="k", Body=b"x", IfNoneMatch="*")
    assert cluster.model.objects[("b", "k")][0] == b"x"


def test_exhausted_attempts_raise_with_the_last_error(cluster, make_client):
    c = make_client(retry=RetryConfig(max_attempts=5, backoff_base_s=0.01, backoff_max_s=0.02))
    for s in cluster.s3.values():
        s.down = True
    with pytest.raises(EndpointsExhaustedError) as e:
        c.head_object(Bucket="b", Key="k")
    assert e.value.attempts == 5
    assert isinstance(e.value.last, botocore.exceptions.EndpointConnectionError)
    # Each endpoint once, then around again; a backoff before each retry.
    calls = cluster.calls("HeadObject")
    assert sorted(calls.values()) == [1, 2, 2]
    assert len(c.sleeps) == 4 and all(0.005 <= s <= 0.02 for s in c.sleeps)


def test_a_complete_whose_answer_was_lost_is_recognised(cluster, make_client):
    c = make_client()
    # The owner completes the upload, then the connection drops before the answer.
    owner = c.endpoint_for("b", "big")
    real = cluster.s3[owner].complete_multipart_upload

    def complete_then_drop(**kw):
        real(**kw)
        raise reset(owner)

    cluster.s3[owner].complete_multipart_upload = complete_then_drop  # type: ignore[method-assign]
    data = bytes(range(256)) * (90 * 1024)  # 22.5 MiB: three 8 MiB parts
    resp = c.put_object(Bucket="b", Key="big", Body=data)
    stored, etag = cluster.model.objects[("b", "big")]
    assert stored == data and resp["ETag"] == etag and etag.endswith('-3"')


def test_boto3_itself_never_retries():
    """A real boto3 client over real HTTP: a gateway answering 503 gets exactly one
    request per attempt the policy allows, spread over the endpoints."""
    hits = []

    class Busy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            hits.append(self.server.server_address[1])
            body = b"<Error><Code>SlowDown</Code><Message>busy</Message></Error>"
            self.send_response(503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_HEAD = do_GET

        def log_message(self, *a):
            pass

    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Busy) for _ in range(2)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    try:
        urls = [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
        c = Client(urls, access_key="k", secret_key="secret-key", health_thread=False,
                   retry=RetryConfig(max_attempts=2, backoff_base_s=0, backoff_max_s=0))
        with pytest.raises(EndpointsExhaustedError) as e:
            c.get_object(Bucket="b", Key="k", Range="bytes=0-1")
        assert e.value.last.response["Error"]["Code"] == "SlowDown"
        assert sorted(hits) == sorted(s.server_address[1] for s in servers)
        c.close()
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


def test_requests_carry_no_expect_continue():
    """botocore can lose the headers of the answer after a 100 Continue on a reused
    connection (and then wait for the read timeout): the client never asks for one."""
    seen = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_PUT(self):  # noqa: N802
            seen.append(dict(self.headers))
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("ETag", '"0"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        c = Client([f"http://127.0.0.1:{server.server_address[1]}"], access_key="k",
                   secret_key="secret-key", health_thread=False)
        c.put_object(Bucket="b", Key="k", Body=b"x" * (2 << 20))
        c.upload_fileobj(__import__("io").BytesIO(b"y" * 100), "b", "k2")
        c.close()
        assert len(seen) == 2
        assert all("expect" not in {k.lower() for k in h} for h in seen), seen
    finally:
        server.shutdown()
        server.server_close()


def _apply_then_drop(cluster, url, method):
    real = getattr(cluster.s3[url], method)

    def apply_then_drop(**kw):
        real(**kw)
        raise reset(url)

    setattr(cluster.s3[url], method, apply_then_drop)


def test_bucket_calls_whose_answer_was_lost_count_as_done(cluster, make_client):
    c = make_client()
    owner = c.endpoint_for("nb")
    _apply_then_drop(cluster, owner, "create_bucket")
    _apply_then_drop(cluster, owner, "delete_bucket")
    c.create_bucket(Bucket="nb")
    assert cluster.model.buckets == {"nb"}
    c2 = make_client()  # the owner is healthy again for this client
    c2.delete_bucket(Bucket="nb")
    assert cluster.model.buckets == set()
    # Without a lost answer, the S3 error is the caller's.
    c3 = make_client()
    c3.create_bucket(Bucket="x")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        c3.create_bucket(Bucket="x")
    assert e.value.response["Error"]["Code"] == "BucketAlreadyOwnedByYou"
