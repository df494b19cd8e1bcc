"""moto fixtures for the tiers that use the emulated AWS (integration, end-to-end).

The unit tier never imports this module: it runs without moto.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from stack.local.emulator import EmbeddedAws


@pytest.fixture(scope="module", autouse=True)
def fresh_emulated_aws() -> Iterator[None]:
    """Every test module starts with an empty emulated AWS.

    moto keeps its backends per process, shared by every ``ThreadedMotoServer`` and
    ``mock_aws`` in it, so one module's table or queue would otherwise be found (or collide)
    in the next.
    """
    from moto.moto_api._internal.models import moto_api_backend

    moto_api_backend.reset()
    yield


@pytest.fixture(scope="module")
def emulated_aws() -> Iterator[EmbeddedAws]:
    """moto's server on 127.0.0.1 for one test module: the project's own embedded AWS."""
    with EmbeddedAws() as aws:
        yield aws


@pytest.fixture(scope="module")
def moto_endpoint(emulated_aws: EmbeddedAws) -> str:
    return emulated_aws.endpoint


def moto_client(service: str, endpoint: str, **kwargs: Any) -> Any:
    """A boto3 client of ``service`` on the emulated AWS at ``endpoint``."""
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        **kwargs,
    )
