"""AdmissionReview admission.k8s.io/v1: decoding requests and building responses.

Two error channels, as the API server expects: a malformed review is answered with an HTTP error
(BadReview); a well-formed review whose object is refused gets HTTP 200 with `allowed: false`.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from typing import Any, Literal, NotRequired, TypedDict

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_BODY_BYTES = 3 * 1024 * 1024  # the API server's own limit on request bodies
MAX_WARNING = 120  # API server guidance: about 120 characters, never over 256
# No Kubernetes object comes near this; a deeper document is a bomb for every recursive walk after
# json.loads (copies, diffs), so it is refused up front with a 400.
MAX_DEPTH = 100

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class AdmissionRequest(TypedDict):
    uid: str
    kind: dict[str, str]
    operation: Operation
    resource: NotRequired[dict[str, str]]
    subResource: NotRequired[str]
    namespace: NotRequired[str]
    name: NotRequired[str]
    object: NotRequired[dict[str, Any] | None]
    oldObject: NotRequired[dict[str, Any] | None]
    dryRun: NotRequired[bool]


class Status(TypedDict):
    code: int
    message: str


class AdmissionResponse(TypedDict):
    uid: str
    allowed: bool
    patch: NotRequired[str]
    patchType: NotRequired[Literal["JSONPatch"]]
    warnings: NotRequired[list[str]]
    status: NotRequired[Status]


class BadReview(Exception):
    def __init__(self, http_status: int, reason: str) -> None:
        super().__init__(reason)
        self.http_status, self.reason = http_status, reason


def _not_json(constant: str) -> Any:
    """NaN and Infinity are Python's extensions, never JSON (RFC 8259) nor anything the API server
    sends; accepted, they would compare unequal to themselves and no patch would ever converge."""
    raise ValueError(f"{constant} is not a JSON value")


def decode(body: bytes) -> AdmissionRequest:
    if len(body) > MAX_BODY_BYTES:
        raise BadReview(413, f"request body of {len(body)} bytes exceeds the {MAX_BODY_BYTES} byte limit")
    if not body:
        raise BadReview(400, "empty request body; expected an AdmissionReview")
    try:
        review = json.loads(body, parse_constant=_not_json)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadReview(400, f"request body is not JSON: {exc}") from None
    except RecursionError:
        raise BadReview(400, f"request body nests deeper than {MAX_DEPTH} levels") from None
    if nesting_depth(body) > MAX_DEPTH:
        raise BadReview(400, f"request body nests deeper than {MAX_DEPTH} levels")
    if not isinstance(review, dict):
        raise BadReview(400, "request body is not a JSON object; expected an AdmissionReview")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise BadReview(
            400,
            f"expected apiVersion {API_VERSION} kind {KIND}, got {review.get('apiVersion')!r} {review.get('kind')!r}",
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview(400, "AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview(400, "AdmissionReview request has no uid")
    if request.get("operation") not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
        raise BadReview(400, f"unknown operation {str(request.get('operation'))[:64]!r}")
    _check_types(request)
    if request["operation"] in ("CREATE", "UPDATE") and not isinstance(request.get("object"), dict):
        raise BadReview(400, f"{request['operation']} request has no object")
    return request  # type: ignore[return-value]


# request field -> the JSON type the API server sends (admission.k8s.io/v1 AdmissionRequest)
_ENVELOPE_TYPES: dict[str, type] = {
    "kind": dict,
    "resource": dict,
    "subResource": str,
    "requestKind": dict,
    "requestResource": dict,
    "requestSubResource": str,
    "name": str,
    "namespace": str,
    "userInfo": dict,
    "object": dict,
    "oldObject": dict,
    "dryRun": bool,
    "options": dict,
}
_GVK_FIELDS = ("kind", "resource", "requestKind", "requestResource")
_METADATA_MAPS = ("labels", "annotations")


def _check_types(request: dict[str, Any]) -> None:
    for key, expected in _ENVELOPE_TYPES.items():
        value = request.get(key)
        if value is not None and not isinstance(value, expected):
            raise BadReview(400, f"request.{key} must be a JSON {_json_type(expected)}")
    if not isinstance(request.get("kind"), dict):
        raise BadReview(400, "request.kind must be a JSON object with group, version and kind")
    for key in _GVK_FIELDS:
        for part, value in (request.get(key) or {}).items():
            if not isinstance(value, str):
                raise BadReview(400, f"request.{key}.{part} must be a string")
    for key in ("object", "oldObject"):
        obj = request.get(key)
        if obj is not None:
            _check_object(key, obj)


def _check_object(key: str, obj: dict[str, Any]) -> None:
    """The parts of the object every kind has: metadata and its string maps, spec and status objects."""
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise BadReview(400, f"request.{key}.metadata must be a JSON object")
    for field in _METADATA_MAPS:
        values = (metadata or {}).get(field)
        if values is not None and not (isinstance(values, dict) and all(isinstance(v, str) for v in values.values())):
            raise BadReview(400, f"request.{key}.metadata.{field} must map strings to strings")
    for field in ("spec", "status"):
        if obj.get(field) is not None and not isinstance(obj.get(field), dict):
            raise BadReview(400, f"request.{key}.{field} must be a JSON object")


def _json_type(python_type: type) -> str:
    return {dict: "object", str: "string", bool: "boolean"}.get(python_type, python_type.__name__)


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def nesting_depth(body: bytes) -> int:
    """How deep objects and arrays nest in a JSON text, counted without recursion (it may be hostile)."""
    if body.count(b"{") + body.count(b"[") <= MAX_DEPTH:  # cannot nest past the limit: most reviews
        return 0
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    return max(itertools.accumulate(_STEP[c] for c in brackets), default=0)


def warning_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_WARNING else line[: MAX_WARNING - 3].rstrip() + "..."


def allow(uid: str, patch: list[dict[str, Any]] | None = None, warnings: list[str] | None = None) -> AdmissionResponse:
    response: AdmissionResponse = {"uid": uid, "allowed": True}
    if patch:
        response["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
        response["patchType"] = "JSONPatch"
    if warnings:
        response["warnings"] = [warning_line(w) for w in warnings]
    return response


def deny(uid: str, code: int, message: str, warnings: list[str] | None = None) -> AdmissionResponse:
    response: AdmissionResponse = {"uid": uid, "allowed": False, "status": {"code": code, "message": message}}
    if warnings:
        response["warnings"] = [warning_line(w) for w in warnings]
    return response


def envelope(response: AdmissionResponse) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
