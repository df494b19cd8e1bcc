"""The project's own rules for a (transformed) template: least-privilege IAM, and deliveries
that can neither be dropped nor replayed without end. Both return what they find, empty when
the template is clean (tests/integration/test_template.py applies them to template.yaml)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from stack.local.template import as_list

# Read-only actions IAM authorizes only on Resource "*" (no resource-level permission): the
# one exception to least privilege's "no '*' resource", for statements of these alone.
UNSCOPABLE_READ_ACTIONS = frozenset({"lambda:ListEventSourceMappings"})


def iam_findings(cloudformation: Mapping[str, Any]) -> list[str]:
    """Least-privilege problems in the IAM of a (transformed) template; empty when clean.

    Rules: no wildcard or NotAction actions, no ``"*"`` resource (except for a statement of
    ``UNSCOPABLE_READ_ACTIONS`` only), no NotResource, no managed policies (their content
    cannot be checked offline), every role with an explicit policy.
    """
    findings: list[str] = []
    for logical_id, resource in (cloudformation.get("Resources") or {}).items():
        properties = resource.get("Properties") or {}
        kind = resource.get("Type")
        if kind == "AWS::IAM::Role":
            if properties.get("ManagedPolicyArns"):
                findings.append(f"{logical_id}: managed policies attached; use inline policies")
            documents = [
                (f"{logical_id}/{policy.get('PolicyName')}", policy.get("PolicyDocument") or {})
                for policy in properties.get("Policies") or []
            ]
        elif kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            documents = [(logical_id, properties.get("PolicyDocument") or {})]
        else:
            continue
        for where, document in documents:
            findings.extend(_statement_findings(where, document))
    return findings


_STREAM_SOURCE_ATTRIBUTES = (":kinesis:", ":dynamodb:")


def delivery_findings(cloudformation: Mapping[str, Any]) -> list[str]:
    """Ways a (transformed) template could drop or endlessly replay messages; empty when clean.

    Stream mappings (Kinesis, DynamoDB) must report partial batch failures, bisect failing
    batches, bound their retries and record age, and send what they give up on to an on-failure
    destination. SQS queues consumed by a mapping must have a redrive policy (a dead-letter
    queue).
    """
    resources = cloudformation.get("Resources") or {}
    findings: list[str] = []
    for logical_id, resource in resources.items():
        if resource.get("Type") != "AWS::Lambda::EventSourceMapping":
            continue
        properties = resource.get("Properties") or {}
        source = properties.get("EventSourceArn")
        source_id = _referenced_resource(source)
        source_type = (resources.get(source_id) or {}).get("Type", "") if source_id else ""
        if source_type in ("AWS::Kinesis::Stream", "AWS::DynamoDB::Table") or any(
            marker in str(source) for marker in _STREAM_SOURCE_ATTRIBUTES
        ):
            findings.extend(_stream_mapping_findings(logical_id, properties))
        elif source_type == "AWS::SQS::Queue" and source_id is not None:
            queue = resources[source_id].get("Properties") or {}
            if "RedrivePolicy" not in queue:
                findings.append(f"{logical_id}: queue {source_id} has no dead-letter queue")
    return findings


def _stream_mapping_findings(logical_id: str, properties: Mapping[str, Any]) -> Iterator[str]:
    if "ReportBatchItemFailures" not in (properties.get("FunctionResponseTypes") or []):
        yield f"{logical_id}: FunctionResponseTypes lacks ReportBatchItemFailures"
    if properties.get("BisectBatchOnFunctionError") is not True:
        yield f"{logical_id}: BisectBatchOnFunctionError is not enabled"
    retries = properties.get("MaximumRetryAttempts")
    if not isinstance(retries, int) or not 0 <= retries <= 10:
        yield f"{logical_id}: MaximumRetryAttempts must be 0..10, got {retries!r}"
    record_age = properties.get("MaximumRecordAgeInSeconds")
    if not isinstance(record_age, int) or not 60 <= record_age <= 3600:
        yield f"{logical_id}: MaximumRecordAgeInSeconds must be 60..3600, got {record_age!r}"
    on_failure = ((properties.get("DestinationConfig") or {}).get("OnFailure") or {}).get(
        "Destination"
    )
    if not on_failure:
        yield f"{logical_id}: no on-failure destination; failed batches would be dropped"


def _referenced_resource(value: Any) -> str | None:
    if isinstance(value, dict):
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            return str(target[0] if isinstance(target, list) else target.split(".", 1)[0])
        if "Ref" in value:
            return str(value["Ref"])
    return None


def _statement_findings(where: str, document: Mapping[str, Any]) -> Iterator[str]:
    statements = document.get("Statement") or []
    if isinstance(statements, dict):
        statements = [statements]
    for index, statement in enumerate(statements):
        label = f"{where} statement {statement.get('Sid', index)}"
        if "NotAction" in statement:
            yield f"{label}: NotAction grants everything else"
        if "NotResource" in statement:
            yield f"{label}: NotResource grants everything else"
        for action in as_list(statement.get("Action")):
            if not isinstance(action, str) or "*" in action or "?" in action:
                yield f"{label}: wildcard or computed action {action!r}"
        unscopable = set(as_list(statement.get("Action"))) <= UNSCOPABLE_READ_ACTIONS
        for resource in as_list(statement.get("Resource")):
            if resource == "*" and not unscopable:
                yield f"{label}: Resource '*' (allowed only for {sorted(UNSCOPABLE_READ_ACTIONS)})"
