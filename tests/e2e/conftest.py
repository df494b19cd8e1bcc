"""The e2e tier: tests that use moto's emulated AWS get a fresh one per module."""

from tests.aws_fixtures import emulated_aws, fresh_emulated_aws, moto_endpoint

__all__ = ["emulated_aws", "fresh_emulated_aws", "moto_endpoint"]
