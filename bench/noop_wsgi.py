"""The no-op admission webhook issue 80 measures gangkeeper against: Flask under granian (a Rust HTTP and
TLS server), decoding each AdmissionReview and allowing it. bench/admission.py serves it with
`python -m granian --interface wsgi bench.noop_wsgi:app` on gangkeeper's own certificate."""

from __future__ import annotations

from typing import Any

from flask import Flask, request  # noqa: TID251  (a baseline outside gangkeeper, not its code)

app = Flask(__name__)


@app.post("/noop")
def noop() -> dict[str, Any]:
    review = request.get_json(force=True)
    uid = (review.get("request") or {}).get("uid", "")
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": uid, "allowed": True}}


@app.get("/readyz")
def ready() -> str:
    return "ok"
