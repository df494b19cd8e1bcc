"""The SAM template, offline: load it, expand it the way CloudFormation would, and check it.

``transform_template`` turns ``template.yaml`` into the plain CloudFormation that
``sam deploy`` would hand to CloudFormation, with no AWS call: ``Fn::ForEach`` (the
``AWS::LanguageExtensions`` transform) is expanded here, then aws-sam-translator runs with a
managed-policy loader that knows no policies (the template attaches none). The local stack
deploys the result onto the emulator; the tests lint it and read its promises
(``stack.local.template_rules`` holds the project's own rules for it).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

DEFAULT_REGION = "us-east-1"
DEFAULT_ACCOUNT_ID = "123456789012"
OFFLINE_ARTIFACT_BUCKET = "queuemesh-offline-artifacts"

LANGUAGE_EXTENSIONS = "AWS::LanguageExtensions"
SERVERLESS_TRANSFORM = "AWS::Serverless-2016-10-31"
_FOR_EACH_PREFIX = "Fn::ForEach::"
_SHORT_FORMS_WITHOUT_FN_PREFIX = frozenset({"Ref", "Condition"})


class TemplateError(ValueError):
    """The template cannot be turned into CloudFormation: what is wrong and where."""


class _CloudFormationLoader(yaml.SafeLoader):
    """SafeLoader that reads CloudFormation short forms (``!Ref``, ``!Sub``, ``!GetAtt``...)."""


def _construct_short_form(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = suffix if suffix in _SHORT_FORMS_WITHOUT_FN_PREFIX else f"Fn::{suffix}"
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:
        raise TemplateError(f"unsupported YAML node for !{suffix}: {node!r}")
    return {name: value}


_CloudFormationLoader.add_multi_constructor("!", _construct_short_form)


def load_template(path: Path | str) -> dict[str, Any]:
    """Read a CloudFormation/SAM YAML (or JSON) template into plain dicts and lists."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        document = yaml.load(text, Loader=_CloudFormationLoader)
    except yaml.YAMLError as error:
        raise TemplateError(f"{path}: not valid YAML: {error}") from error
    if not isinstance(document, dict):
        raise TemplateError(f"{path}: a template is a mapping, got {type(document).__name__}")
    return document


def parameter_values(
    template: Mapping[str, Any], overrides: Mapping[str, str | Sequence[str]] | None = None
) -> dict[str, Any]:
    """Every declared parameter's value: the override if given, else its default.

    Checked as CloudFormation checks them (a value for every parameter without a default,
    MinValue / MaxValue, AllowedValues, AllowedPattern). CommaDelimitedList values are lists (a
    comma string is split); other values are strings.
    """
    declared = template.get("Parameters") or {}
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        raise TemplateError(
            f"unknown parameters {unknown}; the template declares {sorted(declared)}"
        )
    missing = sorted(
        set(declared) - set(overrides) - {n for n, s in declared.items() if "Default" in s}
    )
    if missing:
        raise TemplateError(f"parameters {missing} must have values (they have no default)")
    values: dict[str, Any] = {}
    for name, spec in declared.items():
        raw: Any = overrides[name] if name in overrides else spec["Default"]
        kind = str(spec.get("Type", ""))
        if kind == "CommaDelimitedList" or kind.startswith("List<"):
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            values[name] = [str(item).strip() for item in items]
        else:
            values[name] = str(raw)
            _check_parameter(name, spec, values[name])
    return values


def _check_parameter(name: str, spec: Mapping[str, Any], value: str) -> None:
    allowed = spec.get("AllowedValues")
    if allowed is not None and value not in {str(choice) for choice in allowed}:
        raise TemplateError(f"parameter {name}={value!r} is not one of {allowed}")
    pattern = spec.get("AllowedPattern")
    if pattern is not None and re.fullmatch(pattern, value) is None:
        raise TemplateError(f"parameter {name}={value!r} does not match {pattern}")
    if spec.get("Type") != "Number":
        return
    try:
        number = float(value)
    except ValueError as error:
        raise TemplateError(f"parameter {name}={value!r} is not a number") from error
    low, high = spec.get("MinValue"), spec.get("MaxValue")
    if (low is not None and number < float(low)) or (high is not None and number > float(high)):
        raise TemplateError(f"parameter {name}={value!r} is outside {low}..{high}")


def expand_language_extensions(
    template: Mapping[str, Any], values: Mapping[str, Any]
) -> dict[str, Any]:
    """Expand ``Fn::ForEach`` in Resources, Conditions and Outputs; drop the transform name.

    Covers what QueueMesh uses: a collection that is a list or a ``Ref`` to a list parameter,
    ``${Id}`` / ``&{Id}`` in the output key, ``Ref: Id`` and ``${Id}`` inside ``Fn::Sub``.
    Empty items are skipped (an empty CommaDelimitedList yields no resources).
    """
    transforms = _transform_names(template)
    expanded = copy.deepcopy(dict(template))
    if LANGUAGE_EXTENSIONS not in transforms:
        return expanded
    for section in ("Conditions", "Resources", "Outputs"):
        if isinstance(expanded.get(section), dict):
            expanded[section] = _expand_section(section, expanded[section], values)
    remaining = [name for name in transforms if name != LANGUAGE_EXTENSIONS]
    if remaining:
        expanded["Transform"] = remaining if len(remaining) > 1 else remaining[0]
    else:
        expanded.pop("Transform", None)
    return expanded


def transform_template(
    path: Path | str,
    parameter_overrides: Mapping[str, str | Sequence[str]] | None = None,
    *,
    code_uris: Mapping[str, str | Mapping[str, str]] | None = None,
    region: str = DEFAULT_REGION,
    account_id: str = DEFAULT_ACCOUNT_ID,
) -> dict[str, Any]:
    """The CloudFormation template ``sam deploy`` would submit for ``path``; no AWS calls.

    ``code_uris`` maps a function's or layer's logical id to where its built code lives
    (``s3://b/k`` or ``{"Bucket": ..., "Key": ...}``); those with a local ``CodeUri`` /
    ``ContentUri`` not in it point at a placeholder object in ``OFFLINE_ARTIFACT_BUCKET``.
    """
    return transform_document(
        load_template(path),
        parameter_overrides,
        code_uris=code_uris,
        region=region,
        account_id=account_id,
    )


def transform_document(
    template: Mapping[str, Any],
    parameter_overrides: Mapping[str, str | Sequence[str]] | None = None,
    *,
    code_uris: Mapping[str, str | Mapping[str, str]] | None = None,
    region: str = DEFAULT_REGION,
    account_id: str = DEFAULT_ACCOUNT_ID,
) -> dict[str, Any]:
    """``transform_template`` for a template already loaded (see there)."""
    values = parameter_values(template, parameter_overrides)
    expanded = expand_language_extensions(template, values)
    _point_code_at_artifacts(expanded, code_uris or {})
    return _sam_translate(expanded, values, region=region, account_id=account_id)


def as_list(value: Any) -> list[Any]:
    """A template value that may be one item or a list of them, as a list (``None``: empty)."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _transform_names(template: Mapping[str, Any]) -> list[str]:
    raw = template.get("Transform")
    if raw is None:
        return []
    return [str(name) for name in as_list(raw)]


def _expand_section(
    section: str, entries: Mapping[str, Any], values: Mapping[str, Any]
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    generated: list[tuple[str, Any]] = []
    for key, value in entries.items():
        if key.startswith(_FOR_EACH_PREFIX):
            generated.extend(_expand_for_each(section, key, value, values))
        else:
            result[key] = value
    for key, value in generated:
        if key in result:
            raise TemplateError(f"{section}: Fn::ForEach produced {key!r}, which already exists")
        result[key] = value
    return result


def _expand_for_each(
    section: str, loop: str, arguments: Any, values: Mapping[str, Any]
) -> Iterator[tuple[str, Any]]:
    where = f"{section}.{loop}"
    if not (isinstance(arguments, list) and len(arguments) == 3):
        raise TemplateError(f"{where}: expects [identifier, collection, {{key: fragment}}]")
    identifier, collection, fragments = arguments
    if not isinstance(identifier, str) or not isinstance(fragments, dict):
        raise TemplateError(f"{where}: expects [identifier, collection, {{key: fragment}}]")
    for item in _resolve_collection(where, collection, values):
        for key, fragment in fragments.items():
            if key.startswith(_FOR_EACH_PREFIX):
                raise TemplateError(f"{where}: nested Fn::ForEach is not supported offline")
            new_key = key.replace("${" + identifier + "}", item).replace(
                "&{" + identifier + "}", re.sub(r"[^A-Za-z0-9]", "", item)
            )
            if new_key == key:
                raise TemplateError(f"{where}: key {key!r} must use ${{{identifier}}} or &{{...}}")
            yield new_key, _substitute(fragment, identifier, item)


def _resolve_collection(where: str, collection: Any, values: Mapping[str, Any]) -> list[str]:
    if isinstance(collection, dict) and set(collection) == {"Ref"}:
        name = collection["Ref"]
        if name not in values:
            raise TemplateError(f"{where}: collection parameter {name!r} has no value")
        collection = values[name]
    if not isinstance(collection, list) or not all(isinstance(item, str) for item in collection):
        raise TemplateError(f"{where}: the collection must resolve to a list of strings")
    return [item for item in collection if item]


def _substitute(node: Any, identifier: str, item: str) -> Any:
    if isinstance(node, list):
        return [_substitute(element, identifier, item) for element in node]
    if not isinstance(node, dict):
        return node
    if node == {"Ref": identifier}:
        return item
    if set(node) == {"Fn::Sub"}:
        return {"Fn::Sub": _substitute_sub(node["Fn::Sub"], identifier, item)}
    return {key: _substitute(value, identifier, item) for key, value in node.items()}


def _substitute_sub(argument: Any, identifier: str, item: str) -> Any:
    placeholder = "${" + identifier + "}"
    if isinstance(argument, str):
        return argument.replace(placeholder, item)
    if isinstance(argument, list) and len(argument) == 2:
        text, variables = argument
        if isinstance(variables, dict) and identifier in variables:
            return [text, _substitute(variables, identifier, item)]
        return [text.replace(placeholder, item), _substitute(variables, identifier, item)]
    return argument


# Where each serverless resource type names its local code.
CODE_PROPERTIES = {
    "AWS::Serverless::Function": "CodeUri",
    "AWS::Serverless::LayerVersion": "ContentUri",
}


def local_code_resources(template: Mapping[str, Any]) -> dict[str, str]:
    """Functions and layers whose code is a local folder: logical id -> that folder, as written
    in the template (relative to it); what ``sam build`` builds and ``code_uris`` replaces."""
    found = {}
    for logical_id, resource in (template.get("Resources") or {}).items():
        if not isinstance(resource, dict) or resource.get("Type") not in CODE_PROPERTIES:
            continue
        code = (resource.get("Properties") or {}).get(CODE_PROPERTIES[resource["Type"]])
        if _is_local_path(code):
            found[logical_id] = str(code)
    return found


def _point_code_at_artifacts(
    template: dict[str, Any], code_uris: Mapping[str, str | Mapping[str, str]]
) -> None:
    resources = template.get("Resources") or {}
    unknown = sorted(set(code_uris) - set(resources))
    if unknown:
        raise TemplateError(f"code_uris names resources the template lacks: {unknown}")
    local = local_code_resources(template)
    for logical_id, resource in resources.items():
        if not isinstance(resource, dict) or resource.get("Type") not in CODE_PROPERTIES:
            continue
        properties = resource.setdefault("Properties", {})
        key = CODE_PROPERTIES[resource["Type"]]
        if logical_id in code_uris:
            properties[key] = copy.deepcopy(code_uris[logical_id])
        elif logical_id in local:
            properties[key] = f"s3://{OFFLINE_ARTIFACT_BUCKET}/{logical_id}.zip"


def _is_local_path(code_uri: Any) -> bool:
    return isinstance(code_uri, str) and not code_uri.startswith("s3://")


class _NoManagedPolicies:
    """Stands in for samtranslator's IAM-backed ManagedPolicyLoader: no lookup, no AWS call."""

    def load(self) -> dict[str, str]:
        return {}


def _sam_translate(
    template: dict[str, Any], values: Mapping[str, Any], *, region: str, account_id: str
) -> dict[str, Any]:
    if SERVERLESS_TRANSFORM not in _transform_names(template):
        return template
    import boto3
    from samtranslator.metrics.metrics import DummyMetricsPublisher, Metrics
    from samtranslator.model.exceptions import InvalidDocumentException
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    # The session only supplies the Region name; creating it makes no call.
    session = boto3.session.Session(
        region_name=region, aws_access_key_id="offline", aws_secret_access_key="offline"
    )
    pseudo = {"AWS::Region": region, "AWS::AccountId": account_id}
    metrics = Metrics("ServerlessTransform", DummyMetricsPublisher())
    translator = Translator(None, Parser(), boto_session=session, metrics=metrics)
    loader = _NoManagedPolicies()
    try:
        result: dict[str, Any] = translator.translate(
            copy.deepcopy(template),
            parameter_values={**_sam_parameter_values(values), **pseudo},
            get_managed_policy_map=loader.load,
        )
    except InvalidDocumentException as error:
        causes = "; ".join(cause.message for cause in error.causes)
        raise TemplateError(f"SAM transform failed: {causes}") from error
    finally:
        # Unpublished metrics make samtranslator complain on stderr when they are collected.
        metrics.publish()
    return result


def _sam_parameter_values(values: Mapping[str, Any]) -> dict[str, Any]:
    # samtranslator expects CommaDelimitedList values as the comma string CloudFormation gets.
    return {name: ",".join(v) if isinstance(v, list) else v for name, v in values.items()}
