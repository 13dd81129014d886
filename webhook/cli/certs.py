"""`gangkeeper certs`: a CA and serving certificate, as files or in a Secret."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from webhook.cli.options import Command


def add(command: Command) -> None:
    cert = command("certs", help="generate a CA and serving certificate")
    cert.add_argument("--cert-dir", default="certs")
    cert.add_argument("--san", action="append", help="subject alternative name (repeatable)")
    cert.add_argument("--secret", default=None, help="in-cluster: the Secret to create or rotate")
    cert.add_argument("--namespace", default="gangkeeper-system")
    cert.add_argument("--service", default="gangkeeper-webhook")
    cert.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    cert.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from webhook import certs

    if args.secret:
        args.cert_secret = args.secret
        state = cert_sync(args, Path(args.cert_dir)).sync_once()
        print(
            f"certificates in Secret {args.namespace}/{args.secret} are current; CA bundle has "
            f"{state.bundle.count(b'BEGIN CERTIFICATE')} CA(s)"
        )
        return 0
    sans = args.san or certs.default_sans()
    certs.write(certs.generate(sans), Path(args.cert_dir))
    print(f"wrote {args.cert_dir}/ca.crt, tls.crt, tls.key for {', '.join(sans)}")
    return 0


def cert_sync(args: argparse.Namespace, cert_dir: Path) -> Any:
    from webhook import certs
    from webhook.certsync import CertSync
    from webhook.kube import Api, client_from

    sans = args.san or certs.service_dns_names(args.service, args.namespace)
    return CertSync(Api(client_from(args.kubeconfig)), args.namespace, args.cert_secret, cert_dir, sans)
