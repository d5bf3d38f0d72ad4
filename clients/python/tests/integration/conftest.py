"""Three real gateways sharing one PostgreSQL index and the same shard stores.

Needs FERROBAY_BIN (the ferrobay binary) and FERROBAY_S3_META (a PostgreSQL URL); the
cargo test crates/ferrobay/tests/s3_client.rs sets both (it starts the database). When
they are missing the tests skip, or fail under FERROBAY_REQUIRE_ALL=1."""

import os
import uuid

import pytest
from gateways import ACCESS_KEY, SECRET_KEY, Gateway

from ferrobay_s3 import Client, HealthConfig, RetryConfig, TransferConfig

MIB = 1 << 20


def prerequisite(why: str) -> None:
    """A missing prerequisite: fails under FERROBAY_REQUIRE_ALL=1, else skips."""
    if os.environ.get("FERROBAY_REQUIRE_ALL") == "1":
        pytest.fail(f"FERROBAY_REQUIRE_ALL=1 and {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def gateway_env():
    binary = os.environ.get("FERROBAY_BIN", "")
    meta = os.environ.get("FERROBAY_S3_META", "")
    if not binary or not os.access(binary, os.X_OK):
        prerequisite("FERROBAY_BIN does not name the ferrobay binary (run through "
                     "cargo test -p ferrobay --test s3_client)")
    if not meta.startswith("postgres"):
        prerequisite("FERROBAY_S3_META does not name a PostgreSQL database (run through "
                     "cargo test -p ferrobay --test s3_client)")
    return binary, meta


@pytest.fixture(scope="session")
def gateways(gateway_env, tmp_path_factory):
    binary, meta = gateway_env
    work = tmp_path_factory.mktemp("gateways")
    stores = [work / f"store{i}" for i in range(1, 4)]
    for d in stores:
        d.mkdir()
    gws = [Gateway(binary, meta, stores, work, f"gw{i}") for i in range(1, 4)]
    try:
        for g in gws:
            g.start(0)
        yield gws
    finally:
        for g in gws:
            g.stop()


@pytest.fixture
def all_up(gateways):
    """Every gateway running (a test that killed one restarts it; this makes sure)."""
    for g in gateways:
        if not g.running:
            g.start()
    return gateways


# Quick ejection and return; a generous probe timeout, so that a gateway slowed down by
# a loaded machine is not taken for dead (a dead one refuses connections at once).
FAST_HEALTH = HealthConfig(eject_base_s=0.5, eject_max_s=2.0, probe_interval_s=0.2,
                           probe_timeout_s=5.0, refresh_interval_s=0.3)
SMALL_TRANSFERS = TransferConfig(
    multipart_threshold_bytes=8 * MIB, multipart_chunksize_bytes=5 * MIB,
    range_threshold_bytes=4 * MIB, range_chunksize_bytes=2 * MIB, max_concurrency=4,
)


def make_client(**kw):
    args = dict(access_key=ACCESS_KEY, secret_key=SECRET_KEY, health=FAST_HEALTH,
                transfer=SMALL_TRANSFERS,
                retry=RetryConfig(max_attempts=8, backoff_base_s=0.05, backoff_max_s=0.5))
    args.update(kw)
    return Client(**args)


@pytest.fixture
def client(all_up):
    c = make_client(endpoints=[g.url for g in all_up])
    yield c
    c.close()


@pytest.fixture
def bucket(client):
    name = "py-" + uuid.uuid4().hex[:16]
    client.create_bucket(Bucket=name)
    yield name
    try:
        keys = [o["Key"] for o in client.list_objects(Bucket=name)]
        for i in range(0, len(keys), 1000):
            client.delete_objects(Bucket=name, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})
        client.delete_bucket(Bucket=name)
    except Exception as e:  # the test's own failure matters more
        print(f"cleanup of {name}: {e}")


def pattern(n: int, seed: int) -> bytes:
    """n reproducible bytes (fast: a seeded block repeated with a running counter)."""
    import hashlib

    block = b"".join(hashlib.sha256(f"{seed}:{i}".encode()).digest() for i in range(2048))
    reps = -(-n // len(block))
    out = bytearray(block * reps)
    # Make every 64 KiB distinct so a misplaced range is caught.
    for off in range(0, n, 65536):
        out[off:off + 8] = off.to_bytes(8, "little")
    return bytes(out[:n])

