"""AdmissionReview admission.k8s.io/v1: decoding requests and building responses.

Two error channels, as the API server expects: a malformed review is answered with an HTTP error
(BadReview); a well-formed review whose object is refused gets HTTP 200 with `allowed: false`.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Literal, NotRequired, TypedDict

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_BODY_BYTES = 3 * 1024 * 1024  # the API server's own limit on request bodies
MAX_WARNING = 120  # API server guidance: about 120 characters, never over 256

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class AdmissionRequest(TypedDict):
    uid: str
    kind: dict[str, str]
    operation: Operation
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


def decode(body: bytes) -> AdmissionRequest:
    if len(body) > MAX_BODY_BYTES:
        raise BadReview(413, f"request body of {len(body)} bytes exceeds the {MAX_BODY_BYTES} byte limit")
    if not body:
        raise BadReview(400, "empty request body; expected an AdmissionReview")
    try:
        review = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadReview(400, f"request body is not JSON: {exc}") from None
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
        raise BadReview(400, f"unknown operation {request.get('operation')!r}")
    for key in ("object", "oldObject"):
        if request.get(key) is not None and not isinstance(request.get(key), dict):
            raise BadReview(400, f"request.{key} is not a JSON object")
    if request["operation"] in ("CREATE", "UPDATE") and not isinstance(request.get("object"), dict):
        raise BadReview(400, f"{request['operation']} request has no object")
    return request  # type: ignore[return-value]


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
