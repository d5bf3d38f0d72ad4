"""A mixed workload over three gateways while one is killed with SIGKILL and later
restarted: no request fails, every byte is checked, the dead gateway is ejected and
returns.

Workers each own a key prefix and a model of it (key → bytes digest), so every answer
can be checked exactly: PUT small and multipart objects, GET (parallel ranged for the
large ones), DELETE then HEAD (404), LIST against the model, and full passes of a
dataset over a fixed prefix. One worker moves only large objects, so the kill lands in
the middle of a multipart upload or a ranged read.
"""

import hashlib
import random
import threading
import time
import traceback

import botocore.exceptions
from conftest import MIB, make_client, pattern

RUN_BEFORE_KILL_S = 3.0
DEAD_FOR_S = 5.0
SMALL_WORKERS = 4
DATASET_OBJECTS = 40


def socket_buffer_ceiling_bytes():
    """The most the kernel may buffer on one loopback connection (receive plus send
    autotuning maxima). The stream read across the kill must be longer than this, or the
    whole remainder can already sit in the client's socket before the gateway dies and
    nothing is left to resume."""
    total = 0
    for name in ("tcp_rmem", "tcp_wmem"):
        try:
            with open(f"/proc/sys/net/ipv4/{name}") as f:
                total += int(f.read().split()[2])
        except (OSError, ValueError, IndexError):
            total += 32 * MIB
    return total


def digest(b):
    return hashlib.sha256(b).hexdigest()


class Workload:
    def __init__(self, client, bucket):
        self.client = client
        self.bucket = bucket
        self.stop = threading.Event()
        self.errors = []
        self.ops = {}
        self.lock = threading.Lock()
        self.large_in_flight = threading.Event()
        self.dataset_expected = {}

    def count(self, op):
        with self.lock:
            self.ops[op] = self.ops.get(op, 0) + 1

    def run(self, fn, *args):
        try:
            fn(*args)
        except BaseException:
            self.errors.append(traceback.format_exc())
            self.stop.set()

    # -- workers ------------------------------------------------------------------------

    def small_worker(self, w):
        rng = random.Random(w)
        c, b = self.client, self.bucket
        prefix = f"w{w}/"
        model = {}
        n = 0
        while not self.stop.is_set():
            op = rng.random()
            if op < 0.35 or len(model) < 5:
                n += 1
                key = f"{prefix}{n:06d}"
                size = rng.choice([0, 1, 100, 4096, 16 * 1024, 17 * 1024, 200 * 1024, 1 * MIB])
                data = pattern(size, w * 1_000_000 + n)
                c.put_object(Bucket=b, Key=key, Body=data)
                model[key] = digest(data)
                self.count("put")
            elif op < 0.7:
                key = rng.choice(sorted(model))
                got = c.get_object(Bucket=b, Key=key)["Body"].read()
                assert digest(got) == model[key], key
                self.count("get")
            elif op < 0.8:
                key = rng.choice(sorted(model))
                c.delete_object(Bucket=b, Key=key)
                del model[key]
                try:
                    c.head_object(Bucket=b, Key=key)
                    raise AssertionError(f"{key} still there after DELETE")
                except botocore.exceptions.ClientError as e:
                    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 404
                self.count("delete")
            elif op < 0.9:
                listed = [o["Key"] for o in c.list_objects(Bucket=b, Prefix=prefix, PageSize=7)]
                assert listed == sorted(model), (listed, sorted(model))
                self.count("list")
            else:
                items = list(c.dataset(b, "ds/", shuffle=True, seed=n, prefetch=4,
                                       transform=lambda k, d: (k, digest(d))))
                assert dict(items) == self.dataset_expected and len(items) == DATASET_OBJECTS
                self.count("dataset")
        self.final_models.append((prefix, model))

    def large_worker(self):
        c, b = self.client, self.bucket
        n = 0
        while not self.stop.is_set():
            n += 1
            size = (24 + 8 * (n % 3)) * MIB + n  # 24..40 MiB, never a multiple of a part
            data = pattern(size, 9_000_000 + n)
            key = f"large/{n:04d}"
            self.large_in_flight.set()
            resp = c.put_object(Bucket=b, Key=key, Body=data)
            assert resp["ETag"].endswith(f'-{-(-size // (5 * MIB))}"'), resp["ETag"]
            self.count("multipart-put")
            got = c.get_object(Bucket=b, Key=key)
            assert got["ContentLength"] == size
            h = hashlib.sha256()
            for chunk in got["Body"].iter_chunks(MIB):
                h.update(chunk)
            assert h.hexdigest() == digest(data), key
            self.large_in_flight.clear()
            self.count("ranged-get")
            c.delete_object(Bucket=b, Key=key)


def test_no_request_fails_while_a_gateway_is_killed_and_restarted(all_up, bucket, client):
    gateways = all_up
    for i in range(DATASET_OBJECTS):
        data = pattern(3000 * i + 1, 500 + i)
        client.put_object(Bucket=bucket, Key=f"ds/{i:03d}", Body=data)
    c = make_client(endpoints=[g.url for g in gateways])
    victim = gateways[1]
    # An object the victim serves, to be read through a stream open while it dies.
    n = 0
    while c.endpoint_for(bucket, f"stream/{n}") != victim.url:
        n += 1
    stream_size = 16 * MIB + socket_buffer_ceiling_bytes() + 5
    stream_key, stream_data = f"stream/{n}", pattern(stream_size, 777)
    c.put_object(Bucket=bucket, Key=stream_key, Body=stream_data)
    work = Workload(c, bucket)
    work.final_models = []
    work.dataset_expected = {
        f"ds/{i:03d}": digest(pattern(3000 * i + 1, 500 + i)) for i in range(DATASET_OBJECTS)
    }
    threads = [threading.Thread(target=work.run, args=(work.small_worker, w))
               for w in range(SMALL_WORKERS)]
    threads.append(threading.Thread(target=work.run, args=(work.large_worker,)))
    for t in threads:
        t.start()
    try:
        time.sleep(RUN_BEFORE_KILL_S)
        # One plain GET streaming from the victim (Range makes it a single request).
        stream = c.get_object(Bucket=bucket, Key=stream_key, Range="bytes=0-")["Body"]
        head = stream.read(MIB)
        # Kill it while a large transfer is in flight (parts on every gateway).
        assert work.large_in_flight.wait(120), "no large transfer started"
        time.sleep(0.2)
        before = dict(work.ops)
        by_url = {s.url: s for s in c.endpoint_status()}
        assert by_url[victim.url].requests > 0
        victim.kill()
        killed_at = time.monotonic()
        # The stream goes on through another gateway, from the next byte.
        assert head + stream.read() == stream_data
        assert stream.resumes >= 1
        time.sleep(DEAD_FOR_S)
        st = {s.url: s for s in c.endpoint_status()}[victim.url]
        assert not st.healthy and st.ejections >= 1 and st.failures >= 1, st
        during = {k: work.ops.get(k, 0) - before.get(k, 0) for k in work.ops}
        victim.start()  # same port
        # Returned by the probe, then serving its keys again.
        deadline = time.monotonic() + 30
        while True:
            st = {s.url: s for s in c.endpoint_status()}[victim.url]
            if st.healthy and st.returns >= 1:
                break
            assert time.monotonic() < deadline and not work.errors, (st, work.errors)
            time.sleep(0.05)
        served_at_return = st.requests
        deadline = time.monotonic() + 30
        while {s.url: s for s in c.endpoint_status()}[victim.url].requests < served_at_return + 20:
            assert time.monotonic() < deadline and not work.errors, work.errors
            time.sleep(0.05)
        # And one more large round trip after the return.
        target = work.ops.get("ranged-get", 0) + 1
        deadline = time.monotonic() + 120
        while work.ops.get("ranged-get", 0) < target:
            assert time.monotonic() < deadline and not work.errors, work.errors
            time.sleep(0.1)
    finally:
        work.stop.set()
        for t in threads:
            t.join(timeout=300)
    assert not work.errors, "\n".join(work.errors)
    print(f"\nops: {work.ops}; while {victim.name} was dead ({DEAD_FOR_S:.0f} s from "
          f"{killed_at:.1f}): {during}")
    for s in c.endpoint_status():
        print(f"  {s.url}: {s.requests} requests, {s.failures} failed, "
              f"{s.ejections} ejections, {s.returns} returns")
    for op in ("put", "get", "delete", "list", "dataset", "multipart-put", "ranged-get"):
        assert work.ops.get(op, 0) > 0, (op, work.ops)
    assert during.get("put", 0) > 0 and during.get("get", 0) > 0, during
    # Everything the workers believe is stored is stored, byte for byte.
    for prefix, model in work.final_models:
        listed = [o["Key"] for o in c.list_objects(Bucket=bucket, Prefix=prefix)]
        assert listed == sorted(model)
        for key, want in model.items():
            assert digest(c.get_object(Bucket=bucket, Key=key)["Body"].read()) == want
    # No multipart upload with data was left behind: failed attempts were completed or
    # aborted. (A CreateMultipartUpload whose answer was lost and was repeated leaves an
    # empty upload; that is the only kind allowed.)
    uploads = c.call("list_multipart_uploads", Bucket=bucket).get("Uploads", [])
    for u in uploads:
        parts = c.call("list_parts", Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
        assert parts.get("Parts", []) == [], u
    c.close()


def test_a_gateway_back_on_a_new_port_is_found_through_its_endpoints_file(all_up, bucket):
    """Endpoints read from the files `ferrobay s3 run --endpoints-file` writes: a gateway
    that dies and comes back elsewhere is dropped and picked up again, with no failed
    request in between."""
    c = make_client(endpoints_file=[g.endpoints_file for g in all_up])
    moving = all_up[2]
    try:
        old_url = moving.url
        for i in range(30):
            c.put_object(Bucket=bucket, Key=f"mv/{i}", Body=pattern(5000 + i, i))
        moving.kill()
        for i in range(30):
            assert c.get_object(Bucket=bucket, Key=f"mv/{i}")["Body"].read() == pattern(5000 + i, i)
        moving.start(0)  # a new free port; the file is rewritten when it serves
        assert moving.url != old_url
        deadline = time.monotonic() + 10
        while moving.url not in c.endpoints():
            assert time.monotonic() < deadline, c.endpoints()
            time.sleep(0.05)
        assert old_url not in c.endpoints()
        moved_keys = [f"mv/{i}" for i in range(30) if c.endpoint_for(bucket, f"mv/{i}") == moving.url]
        assert moved_keys
        for k in moved_keys:
            c.delete_object(Bucket=bucket, Key=k)
        served = {s.url: s.requests for s in c.endpoint_status()}[moving.url]
        assert served == len(moved_keys)
    finally:
        c.close()
