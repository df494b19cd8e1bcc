"""boto3 clients for CLI commands: ``--endpoint-url``, ``--region``, ``--profile``, and the
translation of "cannot reach AWS" failures into one-line CLI errors."""

from __future__ import annotations

import argparse
import contextlib
import os
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from stack.errors import CliError, quoted

# The local stack (moto) accepts any credentials; these let `--endpoint-url` work on a machine
# without an AWS profile, and are never used for a real AWS endpoint.
LOCAL_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
LOCAL_REGION = "us-east-1"


@dataclass(frozen=True, slots=True)
class AwsTarget:
    """Where a command's AWS calls go: AWS itself (profile, region), or a local endpoint."""

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AwsTarget:
        return cls(
            endpoint_url=getattr(args, "endpoint_url", None),
            region=getattr(args, "region", None),
            profile=getattr(args, "profile", None),
        )

    def describe(self) -> str:
        return self.endpoint_url or f"AWS ({self.region or 'default region'})"

    def client(self, service: str, *, retries: bool = True) -> Any:
        """A boto3 client for ``service``.

        ``retries=False`` leaves retrying to the caller (the controller's adapters pace and
        retry themselves; botocore's retries would multiply with theirs).
        """
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError

        # Standard mode, 3 attempts: an operator waits seconds, not DynamoDB's legacy 10 tries.
        attempts = 3 if retries else 1
        settings: dict[str, Any] = {
            "connect_timeout": 3,
            "read_timeout": 10,
            "retries": {"mode": "standard", "total_max_attempts": attempts},
        }
        try:
            session = boto3.Session(profile_name=self.profile, region_name=self.region)
            region = session.region_name
            credentials: dict[str, str] = {}
            if self.endpoint_url is not None:
                region = region or LOCAL_REGION
                if session.get_credentials() is None:
                    credentials = LOCAL_CREDENTIALS
            if region is None:
                raise CliError(
                    "no AWS region configured; pass --region or set AWS_REGION "
                    "(or AWS_DEFAULT_REGION)"
                )
            return session.client(
                service,
                region_name=region,
                endpoint_url=self.endpoint_url,
                config=Config(**settings),
                **credentials,
            )
        except BotoCoreError as error:
            raise CliError(f"cannot create a {service} client: {error}") from error


def add_target_arguments(parser: argparse.ArgumentParser, endpoint_from_env: bool = True) -> None:
    """``--endpoint-url``, ``--region``, ``--profile``, as the AWS CLI names them.

    ``endpoint_from_env`` makes boto3's ``AWS_ENDPOINT_URL`` the default endpoint; commands
    for which an endpoint changes what they do (replay) ask for it explicitly instead.
    """
    if endpoint_from_env:
        parser.add_argument(
            "--endpoint-url",
            type=endpoint_url,
            default=os.environ.get("AWS_ENDPOINT_URL") or None,
            help="send AWS calls here (the local stack); default: AWS_ENDPOINT_URL, else AWS",
        )
    else:
        parser.add_argument(
            "--endpoint-url",
            type=endpoint_url,
            help="use the AWS (local stack) at this endpoint",
        )
    parser.add_argument("--region", help="AWS region (default: the profile's or AWS_REGION)")
    parser.add_argument("--profile", help="AWS credentials profile (default: the usual chain)")


# samconfig.toml's stack_name: where the commands that read a deployed stack look by default.
DEFAULT_STACK_NAME = "queuemesh"


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    """``--stack-name`` and ``--table``: which deployed stack, and its ledger table."""
    parser.add_argument(
        "--stack-name",
        default=DEFAULT_STACK_NAME,
        help=f"the deployed stack (default {DEFAULT_STACK_NAME}, as in samconfig.toml)",
    )
    parser.add_argument(
        "--table",
        default=os.environ.get("QUEUEMESH_TABLE"),
        help="ledger table (default: QUEUEMESH_TABLE, else the stack's LedgerTableName output)",
    )


def endpoint_url(raw: str) -> str:
    """``--endpoint-url``: an http(s) URL naming a host, the only kind botocore can call."""
    try:
        parts = urllib.parse.urlsplit(raw)
        parts.port  # noqa: B018 - parsing the port is what rejects 'http://host:99999'
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{quoted(raw)} is not a URL ({error})") from error
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{quoted(raw)} is not an http(s) URL such as http://127.0.0.1:5000"
        )
    return raw


@contextlib.contextmanager
def aws_errors(target: AwsTarget) -> Iterator[None]:
    """Turn "no credentials", "endpoint unreachable" and access errors into one-line errors,
    also when an adapter wrapped them (``LedgerError``, ``ActuationError``: the cause is chained).

    Errors that mean something to the command itself (a missing table, a missing mapping) are
    left for the command to name; only the ones any command would phrase the same way are here.
    """
    try:
        yield
    except CliError:
        raise
    except Exception as error:
        message = explain(root_cause(error), target)
        if message is None:
            raise
        raise CliError(message) from error


def explain(error: BaseException, target: AwsTarget) -> str | None:
    """A one-line explanation of an error that means "cannot talk to AWS", else ``None``."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ProfileNotFound,
    )
    from botocore.exceptions import ConnectionError as BotoConnectionError

    if isinstance(error, NoCredentialsError | PartialCredentialsError):
        return (
            f"no usable AWS credentials ({error}); configure a profile (--profile) or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or pass --endpoint-url for the local stack"
        )
    if isinstance(error, ProfileNotFound):
        return f"{error}; check --profile or AWS_PROFILE"
    if isinstance(error, NoRegionError):
        return "no AWS region configured; pass --region or set AWS_REGION"
    if isinstance(error, EndpointConnectionError | BotoConnectionError):
        return f"cannot reach {target.describe()}: {error}; is the endpoint up?"
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        if code in REFUSED_CREDENTIAL_CODES:
            return f"AWS refused the credentials ({code}): {error}"
    return None


REFUSED_CREDENTIAL_CODES = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "AccessDenied",
        "AccessDeniedException",
    }
)


def root_cause(error: BaseException) -> BaseException:
    """The innermost chained cause: adapters wrap botocore errors in their own."""
    seen: set[int] = set()
    while error.__cause__ is not None and id(error) not in seen:
        seen.add(id(error))
        error = error.__cause__
    return error
