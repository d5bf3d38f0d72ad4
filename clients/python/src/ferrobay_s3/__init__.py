"""ferrobay_s3: a Python client for Ferrobay's S3 gateways, built on boto3.

Spreads requests over every gateway by rendezvous hashing of (bucket, key), ejects a
failing gateway and returns it when its health probe answers, retries idempotent
requests on another gateway, moves large objects as parallel ranged GETs and multipart
PUTs, and iterates over a prefix as a dataset for training loops::

    from ferrobay_s3 import Client

    s3 = Client(["http://10.0.0.21:9000", "http://10.0.0.22:9000"],
                access_key="...", secret_key="...")
    s3.put_object(Bucket="data", Key="a.bin", Body=b"...")
    for key, data in s3.dataset("data", "train/", shuffle=True, seed=1):
        ...
"""

from .client import Client, multipart_etag
from .config import HealthConfig, RetryConfig, TransferConfig
from .dataset import ObjectDataset, torch_worker_info
from .errors import (
    EndpointSourceError, EndpointsExhaustedError, FerrobayS3Error, NoEndpointsError,
    ObjectChangedError, ShortReadError,
)
from .health import EndpointPool, EndpointStatus
from .hashing import owner, rank, score

__all__ = [
    "Client", "ObjectDataset", "TransferConfig", "HealthConfig", "RetryConfig",
    "EndpointStatus", "EndpointPool", "FerrobayS3Error", "NoEndpointsError",
    "EndpointsExhaustedError", "ObjectChangedError", "ShortReadError", "EndpointSourceError",
    "multipart_etag", "torch_worker_info", "owner", "rank", "score",
]
__version__ = "0.1.0"
