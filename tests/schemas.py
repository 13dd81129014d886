"""Validation of what gangkeeper produces against the real schemas.

Native kinds: kubernetes-validate's strict schemas (unknown fields are errors). CRD kinds: the
openAPIV3Schema of the upstream CRDs in ../shared/crds, made strict the way the API server prunes:
an object with declared properties and no x-kubernetes-preserve-unknown-fields takes no others.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import yaml

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CRDS = SHARED / "crds"
EXAMPLES = SHARED / "examples"
SEEDS = SHARED / "seeds"
OWN_CRD = Path(__file__).resolve().parents[1] / "charts" / "gangkeeper" / "templates" / "crd.yaml"


def provisioning_crd() -> Path:
    """Cluster Autoscaler's ProvisioningRequest CRD, as hack/cluster/build.sh core downloads it from its
    apis module (CA_APIS_VERSION) into the component cache."""
    from tests.realcluster.controlplane import cache_dir, versions

    return cache_dir() / "crds" / f"provisioningrequests-{versions()['CA_APIS_VERSION']}.yaml"


NATIVE_VERSIONS = ("1.35", "1.36", "1.37")
_PATCH = {"1.35": "1.35.0", "1.36": "1.36.0", "1.37": "1.37.0"}

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the upstream CRDs are large

# kubernetes-validate reads and parses the (large) definitions file on every call; read each once.
kubernetes_validate.utils.schema_contents = functools.cache(kubernetes_validate.utils.schema_contents)


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        if schema.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.cache
def crd_schemas() -> dict[tuple[str, str], Any]:
    schemas: dict[tuple[str, str], Any] = {}
    # the upstream CRDs, and gangkeeper's own Gang
    for path in [*CRDS.glob("*.yaml"), OWN_CRD, *[crd for crd in [provisioning_crd()] if crd.exists()]]:
        crd = yaml.load(path.read_text(), Loader=_LOADER)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = _strict(version["schema"]["openAPIV3Schema"])
            # metadata is the API server's to check, not the CRD's
            schema.setdefault("properties", {})["metadata"] = {"type": "object"}
            schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


@functools.cache
def _crd_validator(key: tuple[str, str]) -> Any:
    schema = crd_schemas()[key]
    return jsonschema.validators.validator_for(schema)(schema)


def is_crd_kind(obj: dict[str, Any]) -> bool:
    return (obj.get("apiVersion"), obj.get("kind")) in crd_schemas()


def validate(obj: dict[str, Any], kubernetes_version: str = "1.37") -> None:
    """Raise with the reason when `obj` is not valid for its kind."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key in crd_schemas():
        error = jsonschema.exceptions.best_match(_crd_validator(key).iter_errors(obj))  # type: ignore[arg-type]
        if error is not None:
            raise error
        return
    kubernetes_validate.validate(obj, _PATCH[kubernetes_version], strict=True)


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
