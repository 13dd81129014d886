"""In-cluster certificate upkeep: the Secret, the files the server reads, and the webhook CA bundles."""

from __future__ import annotations

import base64
import datetime as dt
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from webhook import certs
from webhook.kube import Api, ApiError, Resource
from webhook.rotation import CertState, bootstrap, seconds_until_due, step

log = logging.getLogger("gangkeeper.certs")

SECRETS = Resource("v1", "secrets")
MUTATING = Resource("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", namespaced=False)
VALIDATING = Resource("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", namespaced=False)
WEBHOOK_CONFIGURATION = "gangkeeper"


def _decode(secret: dict) -> dict[str, bytes]:  # type: ignore[type-arg]
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _encode(data: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in sorted(data.items())}


class CertSync:
    def __init__(
        self,
        api: Api,
        namespace: str,
        secret: str,
        cert_dir: Path,
        sans: list[str],
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.api, self.namespace, self.secret, self.cert_dir, self.sans = api, namespace, secret, cert_dir, sans
        self.clock = clock

    def published_bundles(self) -> list[bytes]:
        bundles = []
        for resource in (MUTATING, VALIDATING):
            try:
                config = self.api.get(resource.path(name=WEBHOOK_CONFIGURATION))
            except ApiError:
                bundles.append(b"")
                continue
            for hook in config.get("webhooks") or []:
                bundles.append(base64.b64decode((hook.get("clientConfig") or {}).get("caBundle") or ""))
        return bundles

    def publish(self, bundle: bytes) -> None:
        encoded = base64.b64encode(bundle).decode()
        for resource in (MUTATING, VALIDATING):
            path = resource.path(name=WEBHOOK_CONFIGURATION)
            config = self.api.get(path)
            webhooks = [
                {**hook, "clientConfig": {**hook.get("clientConfig", {}), "caBundle": encoded}}
                for hook in config.get("webhooks") or []
            ]
            # a merge patch replaces the list whole, so send every webhook, changed only in caBundle
            self.api.merge_patch(
                path, {"metadata": {"resourceVersion": config["metadata"]["resourceVersion"]}, "webhooks": webhooks}
            )

    def sync_once(self) -> CertState:
        """Read or create the Secret, take one rotation step, publish the bundle, write the files."""
        path = SECRETS.path(self.namespace, self.secret)
        try:
            secret = self.api.get(path)
            state = CertState.from_secret_data(_decode(secret))
        except ApiError as error:
            if error.status != 404:
                raise
            state = bootstrap(self.sans, self.clock())
            try:
                secret = self.api.create(
                    SECRETS.path(self.namespace),
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "type": "Opaque",
                        "metadata": {"name": self.secret, "namespace": self.namespace},
                        "data": _encode(state.to_secret_data()),
                    },
                )
            except ApiError as race:  # another replica made it first: use theirs
                if race.status != 409:
                    raise
                secret = self.api.get(path)
                state = CertState.from_secret_data(_decode(secret))
        published = self.published_bundles()
        next_state = step(
            state, self.sans, self.clock(), lambda bundle: bool(published) and all(b == bundle for b in published)
        )
        if next_state != state:
            self.api.merge_patch(
                path,
                {
                    "metadata": {"resourceVersion": secret["metadata"]["resourceVersion"]},
                    "data": _encode(next_state.to_secret_data()),
                },
            )
            log.info("certificates rotated", extra={"secret": f"{self.namespace}/{self.secret}"})
        if not published or any(b != next_state.bundle for b in published):
            self.publish(next_state.bundle)
        self.write_files(next_state)
        return next_state

    def write_files(self, state: CertState) -> None:
        current = self.cert_dir / certs.CERT_FILE
        if current.exists() and current.read_bytes() == state.tls_crt:
            return
        certs.write(certs.Bundle(ca_pem=state.bundle, cert_pem=state.tls_crt, key_pem=state.tls_key), self.cert_dir)

    def run_forever(
        self, interval: float = 3600.0, stop: threading.Event | None = None, state: CertState | None = None
    ) -> None:
        """A step every `interval`, or sooner when a renewal falls due (and again a few seconds after a
        failure, such as the 409 a replica gets when another one rotated the Secret first)."""
        stop = stop or threading.Event()
        wait = interval
        while True:
            if state is not None:
                wait = min(wait, max(1.0, seconds_until_due(state, self.clock()) + 1.0))
            if stop.wait(wait):
                return
            try:
                state, wait = self.sync_once(), interval
            except (ApiError, OSError, ValueError):
                log.warning("certificate upkeep failed; retrying soon", exc_info=True)
                wait = min(interval, 5.0)
