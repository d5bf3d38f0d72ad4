"""Rendezvous hashing: even spread, minimal movement, the same answer everywhere."""

import collections

from ferrobay_s3 import owner, rank, score

ENDPOINTS = [f"http://10.0.0.{i}:9000" for i in range(1, 6)]
KEYS = [f"train/shard-{i:06d}.tar" for i in range(20_000)]


def owners(endpoints, keys=KEYS, bucket="data"):
    return {k: owner(endpoints, bucket, k) for k in keys}


def test_score_is_pinned():
    # Every client must route a key to the same gateway: the function never changes.
    assert score("http://10.0.0.1:9000", "data", "a/b.bin") == SCORE_GOLDEN
    assert score("http://a", "bc", "d") != score("http://a", "b", "cd")


def test_keys_spread_evenly():
    counts = collections.Counter(owners(ENDPOINTS).values())
    expected = len(KEYS) / len(ENDPOINTS)
    assert set(counts) == set(ENDPOINTS)
    for e, n in counts.items():
        assert abs(n - expected) / expected < 0.03, (e, n, expected)


def test_removing_an_endpoint_moves_only_its_keys_and_spreads_them():
    before = owners(ENDPOINTS)
    dead = ENDPOINTS[2]
    after = owners([e for e in ENDPOINTS if e != dead])
    moved = {k for k in KEYS if before[k] != after[k]}
    assert moved == {k for k in KEYS if before[k] == dead}
    # The dead endpoint's keys land on every survivor, about evenly.
    spread = collections.Counter(after[k] for k in moved)
    assert set(spread) == set(ENDPOINTS) - {dead}
    for n in spread.values():
        assert abs(n - len(moved) / 4) / (len(moved) / 4) < 0.08
    # When it returns, exactly those keys come back.
    assert owners(ENDPOINTS) == before


def test_adding_an_endpoint_takes_a_fair_share_from_everyone():
    before = owners(ENDPOINTS)
    new = "http://10.0.0.9:9000"
    after = owners(ENDPOINTS + [new])
    moved = [k for k in KEYS if before[k] != after[k]]
    assert all(after[k] == new for k in moved)
    share = len(moved) / len(KEYS)
    assert abs(share - 1 / 6) < 0.01, share


def test_rank_is_a_permutation_led_by_the_owner_and_independent_of_input_order():
    for k in KEYS[:200]:
        r = rank(ENDPOINTS, "data", k)
        assert sorted(r) == sorted(ENDPOINTS)
        assert r[0] == owner(ENDPOINTS, "data", k)
        assert rank(list(reversed(ENDPOINTS)), "data", k) == r


def test_buckets_route_independently():
    a = owners(ENDPOINTS, KEYS[:5000], "a")
    b = owners(ENDPOINTS, KEYS[:5000], "b")
    same = sum(1 for k in a if a[k] == b[k])
    assert abs(same / 5000 - 1 / 5) < 0.03


SCORE_GOLDEN = 13471040627981961295  # BLAKE2b-64, see hashing.score
