"""The dataset: every key exactly once across workers and ranks, seeded shuffles, order
kept under prefetch, transforms, and the PyTorch worker hook without torch."""

import pickle
import sys
import types

import pytest
from fakes import client_error

from ferrobay_s3 import torch_worker_info


@pytest.fixture
def filled(cluster, make_client):
    c = make_client()
    keys = [f"train/{i:04d}.bin" for i in range(200)]
    for k in keys:
        c.put_object(Bucket="d", Key=k, Body=k.encode() * 3)
    c.put_object(Bucket="d", Key="train/", Body=b"")  # a directory marker
    c.put_object(Bucket="d", Key="other/x", Body=b"x")
    return c, keys


def test_iterates_the_prefix_in_key_order_with_bytes(filled):
    c, keys = filled
    got = list(c.dataset("d", "train/", prefetch=5))
    assert got == [(k, k.encode() * 3) for k in keys]


def test_workers_and_ranks_partition_the_keys(filled):
    c, keys = filled
    seen = []
    for rank in range(2):
        for worker in range(3):
            ds = c.dataset("d", "train/", shuffle=True, seed=7, rank=rank, world_size=2,
                           worker_info=lambda w=worker: (w, 3), transform=lambda k, d: k)
            seen.append(list(ds))
    flat = [k for s in seen for k in s]
    assert sorted(flat) == keys  # every key once
    assert all(abs(len(s) - 200 / 6) <= 1 for s in seen)


def test_shuffle_follows_seed_and_epoch(filled):
    c, keys = filled
    ds = c.dataset("d", "train/", shuffle=True, seed=3, transform=lambda k, d: k)
    e0 = list(ds)
    assert e0 == list(c.dataset("d", "train/", shuffle=True, seed=3, transform=lambda k, d: k))
    assert e0 != keys and sorted(e0) == keys
    ds.set_epoch(1)
    e1 = list(ds)
    assert e1 != e0 and sorted(e1) == keys


def test_transform_and_missing_objects(filled, cluster):
    c, keys = filled
    ds = c.dataset("d", "train/", transform=lambda k, d: len(d))
    assert ds.keys() == keys  # listed once and kept
    c.delete_object(Bucket="d", Key=keys[5])
    with pytest.raises(Exception) as e:
        list(ds)
    assert "NoSuchKey" in str(e.value)
    assert list(c.dataset("d", "train/", skip_missing=True, keys=keys, transform=lambda k, d: k)) \
        == keys[:5] + keys[6:]


def test_an_error_stops_iteration_and_cleans_up(filled, cluster):
    c, keys = filled
    for s in cluster.s3.values():
        s.faults.append(lambda op, kw: client_error(403, "AccessDenied")
                        if kw.get("Key") == keys[50] else None)
    it = iter(c.dataset("d", "train/", prefetch=4))
    got = []
    with pytest.raises(Exception):
        for item in it:
            got.append(item)
    assert len(got) == 50


def test_worker_hook_uses_torch_only_if_already_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert torch_worker_info() == (0, 1)
    fake = types.ModuleType("torch")
    info = types.SimpleNamespace(id=2, num_workers=4)
    fake.utils = types.SimpleNamespace(data=types.SimpleNamespace(get_worker_info=lambda: info))
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert torch_worker_info() == (2, 4)


def test_dataset_options_are_checked(filled):
    c, _ = filled
    with pytest.raises(ValueError):
        c.dataset("d", rank=2, world_size=2)
    with pytest.raises(ValueError):
        c.dataset("d", prefetch=0)


def test_a_dataset_of_a_real_client_pickles_for_worker_processes():
    from ferrobay_s3 import Client

    c = Client(["http://127.0.0.1:1"], access_key="a", secret_key="secret-key",
               health_thread=False)
    ds = c.dataset("d", "p/", shuffle=True, seed=4)
    copy = pickle.loads(pickle.dumps(ds))
    assert (copy.bucket, copy.prefix, copy.seed, copy.shuffle) == ("d", "p/", 4, True)
    assert copy.client.endpoints() == ["http://127.0.0.1:1"]
    assert copy.client is not c
    copy.client.close()
    c.close()
