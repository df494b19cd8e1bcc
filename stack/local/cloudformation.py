"""What a local deploy does around moto's CloudFormation: the template as it receives it (one
placeholder code package, custom resources left out, parameter values as strings), and what it
leaves out done through the service APIs, with enough of CloudFormation's intrinsic functions to
resolve their properties."""

from __future__ import annotations

import copy
import io
import re
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from controller.stream import REDUCED_STREAM_VARIABLE
from stack.errors import CliError
from stack.local.template import local_code_resources

ACCOUNT = "123456789012"  # moto's default account
CODE_BUCKET = "queuemesh-local-code"
SERVERLESS_FUNCTION = "AWS::Serverless::Function"
CODE_KEY = "queuemesh-functions.zip"
# Types moto's CloudFormation does not create; deploy() makes them through the API instead.
SUBSCRIPTION_FILTER = "AWS::Logs::SubscriptionFilter"


def code_dirs(
    template: Mapping[str, Any], code_root: Path, physical: Mapping[str, str]
) -> dict[str, str]:
    """Function name -> its CodeUri folder, relative to ``code_root``."""
    return {
        physical[logical]: str((code_root / folder).resolve())
        for logical, folder in local_code_resources(template).items()
        if logical in physical and template["Resources"][logical]["Type"] == SERVERLESS_FUNCTION
    }


def placeholder_code_zip() -> bytes:
    """Lambda in moto needs a code package; the local runtime imports the real code from this
    checkout, so the package only has to be a valid zip."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(
            "README.txt", "Placeholder: the QueueMesh local runtime runs the code in-process.\n"
        )
    return buffer.getvalue()


def custom_resources(template: Mapping[str, Any]) -> dict[str, Any]:
    """Custom resources backed by a Lambda function: moto would have to run the function's code
    (in Docker) to create them, so they are left out and done through the API instead."""
    return {
        logical: spec
        for logical, spec in template["Resources"].items()
        if str(spec.get("Type", "")).startswith("Custom::")
        or spec.get("Type") == "AWS::CloudFormation::CustomResource"
    }


def with_code_location(template: Mapping[str, Any]) -> dict[str, Any]:
    """Plain AWS::Lambda::Function resources in the template get the same package."""
    located = copy.deepcopy(dict(template))
    for spec in located["Resources"].values():
        if spec.get("Type") == "AWS::Lambda::Function":
            spec.setdefault("Properties", {})["Code"] = {"S3Bucket": CODE_BUCKET, "S3Key": CODE_KEY}
    return located


def flat_parameters(values: Mapping[str, Any]) -> dict[str, str]:
    """Parameter values as CloudFormation receives them (lists as comma strings)."""
    return {name: ",".join(v) if isinstance(v, list) else v for name, v in values.items()}


def log_group_of(
    function: str, physical: Mapping[str, str], resources: Mapping[str, Any], resolver: Resolver
) -> str:
    """The function's LoggingConfig.LogGroup as the template sets it (moto's Lambda does not
    keep LoggingConfig), else Lambda's default /aws/lambda/<function>."""
    for logical, spec in resources.items():
        if physical.get(logical) == function and spec["Type"] == "AWS::Lambda::Function":
            configured = spec.get("Properties", {}).get("LoggingConfig", {}).get("LogGroup")
            if configured is not None:
                return str(resolver.resolve(configured))
    return f"/aws/lambda/{function}"


def arn_function_name(function_arn: str) -> str:
    return function_arn.split(":function:", 1)[1].split(":", 1)[0]


def stream_mappings(
    lambda_client: Any, mappings: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The Kinesis mappings of reducers (functions told of a reduced stream other than the one
    they read: where to put their totals) and of controllers (the others: a controller reads
    the reduced stream it is told of back), and each one's function's environment variables
    by UUID."""
    streams = [m for m in mappings if ":kinesis:" in m["EventSourceArn"]]
    variables = {}
    for mapping in streams:
        configuration = lambda_client.get_function_configuration(
            FunctionName=mapping["FunctionArn"]
        )
        variables[mapping["UUID"]] = dict(configuration.get("Environment", {}).get("Variables", {}))

    def reduces(mapping: dict[str, Any]) -> bool:
        told = variables[mapping["UUID"]].get(REDUCED_STREAM_VARIABLE)
        return told is not None and not str(mapping["EventSourceArn"]).endswith(f"/{told}")

    reducers = [m for m in streams if reduces(m)]
    return reducers, [m for m in streams if m not in reducers], variables


def create_what_moto_drops(
    logs: Any,
    dynamodb: Any,
    resources: Mapping[str, Any],
    physical: Mapping[str, str],
    resolver: Resolver,
) -> list[str]:
    """Create through the service APIs what moto's CloudFormation left out (subscription
    filters, DynamoDB TTL); a line naming each."""
    done: list[str] = []
    for logical, spec in sorted(resources.items()):
        properties = spec.get("Properties", {})
        if spec["Type"] == SUBSCRIPTION_FILTER and logical not in physical:
            group = resolver.resolve(properties["LogGroupName"])
            logs.put_subscription_filter(
                logGroupName=group,
                filterName=str(properties.get("FilterName", logical)),
                filterPattern=str(resolver.resolve(properties.get("FilterPattern", ""))),
                destinationArn=resolver.resolve(properties["DestinationArn"]),
                **(
                    {"roleArn": resolver.resolve(properties["RoleArn"])}
                    if "RoleArn" in properties
                    else {}
                ),
            )
            done.append(f"{logical} ({SUBSCRIPTION_FILTER} on {group})")
        ttl = properties.get("TimeToLiveSpecification")
        if spec["Type"] == "AWS::DynamoDB::Table" and ttl and ttl.get("Enabled"):
            dynamodb.update_time_to_live(
                TableName=physical[logical],
                TimeToLiveSpecification={
                    "Enabled": True,
                    "AttributeName": str(ttl["AttributeName"]),
                },
            )
            done.append(f"{logical} TimeToLiveSpecification ({ttl['AttributeName']})")
    return done


class Resolver:
    """Enough of CloudFormation's intrinsic functions to finish resources moto dropped:
    Ref, Fn::GetAtt (Arn and names), Fn::Sub and Fn::Join over the created stack."""

    def __init__(
        self,
        region: str,
        resources: Mapping[str, Any],
        physical: Mapping[str, str],
        parameters: Mapping[str, str],
        stack_name: str,
    ) -> None:
        self._types = {logical: spec["Type"] for logical, spec in resources.items()}
        self._physical = physical
        self._values: dict[str, str] = {
            **parameters,
            "AWS::Region": region,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": "aws",
            "AWS::StackName": stack_name,
            "AWS::URLSuffix": "amazonaws.com",
        }
        self._arn_formats: dict[str, Callable[[str], str]] = {
            "AWS::Kinesis::Stream": lambda p: f"arn:aws:kinesis:{region}:{ACCOUNT}:stream/{p}",
            "AWS::IAM::Role": lambda p: f"arn:aws:iam::{ACCOUNT}:role/{p}",
            "AWS::Lambda::Function": lambda p: f"arn:aws:lambda:{region}:{ACCOUNT}:function:{p}",
            "AWS::SQS::Queue": lambda p: f"arn:aws:sqs:{region}:{ACCOUNT}:{p.rsplit('/', 1)[1]}",
            "AWS::Logs::LogGroup": lambda p: f"arn:aws:logs:{region}:{ACCOUNT}:log-group:{p}:*",
            "AWS::DynamoDB::Table": lambda p: f"arn:aws:dynamodb:{region}:{ACCOUNT}:table/{p}",
        }

    def resolve(self, value: Any) -> Any:
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if not isinstance(value, dict) or len(value) != 1:
            raise CliError(f"cannot resolve {value!r} on the embedded AWS")
        ((function, argument),) = value.items()
        if function == "Ref":
            return self._ref(str(argument))
        if function == "Fn::GetAtt":
            logical, attribute = argument.split(".", 1) if isinstance(argument, str) else argument
            return self._get_att(str(logical), str(attribute))
        if function == "Fn::Sub":
            text, extra = (argument, {}) if isinstance(argument, str) else argument
            variables = {key: str(self.resolve(item)) for key, item in extra.items()}
            return re.sub(
                r"\$\{([^}!]+)\}", lambda match: self._sub(match.group(1), variables), text
            )
        if function == "Fn::Join":
            separator, items = argument
            return str(separator).join(str(self.resolve(item)) for item in items)
        raise CliError(f"cannot resolve {function} on the embedded AWS")

    def _ref(self, name: str) -> str:
        if name in self._values:
            return self._values[name]
        if name in self._physical:
            return self._physical[name]
        raise CliError(f"cannot resolve Ref {name}: no such parameter or created resource")

    def _get_att(self, logical: str, attribute: str) -> str:
        physical = self._ref(logical)
        if attribute == "Arn" and self._types.get(logical) in self._arn_formats:
            return self._arn_formats[self._types[logical]](physical)
        if attribute in ("Name", "QueueName", "StreamName"):
            return physical.rsplit("/", 1)[-1]
        raise CliError(f"cannot resolve Fn::GetAtt {logical}.{attribute} on the embedded AWS")

    def _sub(self, name: str, variables: Mapping[str, str]) -> str:
        if name in variables:
            return variables[name]
        if "." in name:
            logical, attribute = name.split(".", 1)
            return self._get_att(logical, attribute)
        return self._ref(name)
