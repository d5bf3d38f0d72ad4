import pytest

from fakes import FakeClock, FakeCluster

from ferrobay_s3 import Client, HealthConfig, RetryConfig, TransferConfig

MIB = 1 << 20


@pytest.fixture
def cluster():
    return FakeCluster(3)


@pytest.fixture
def make_client(cluster):
    made = []

    def make(transfer=TransferConfig(), retry=RetryConfig(), health=HealthConfig(), clock=None,
             probe=None):
        sleeps = []
        c = Client(
            cluster.urls,
            client_factory=cluster.factory,
            transfer=transfer,
            retry=retry,
            health=health,
            clock=clock or FakeClock(),
            sleep=sleeps.append,
            probe=probe or (lambda url: None),
            health_thread=False,
        )
        c.sleeps = sleeps  # type: ignore[attr-defined]
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
