"""Deterministic gang names that fit Kubernetes limits.

A gang name is used as a label value (63 characters), an object name (DNS subdomain, but we keep to a
DNS label so one name serves everywhere) and a native podGroup name (DNS label). Names too long keep a
readable prefix and end in a stable hash of the full name, so two long names never collide.
"""

from __future__ import annotations

import hashlib
import re
import secrets

MAX_NAME = 63
_HASH_LEN = 10
_INVALID = re.compile(r"[^a-z0-9-]+")

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_dns_subdomain(text: str) -> bool:
    """RFC 1123 subdomain, as the API server checks pod.spec.schedulerName."""
    return len(text) <= 253 and _DNS_SUBDOMAIN.fullmatch(text) is not None


def dns_label(text: str) -> str:
    """Lower-case DNS label (RFC 1123) of at most 63 characters, shortened with a stable hash."""
    cleaned = _INVALID.sub("-", text.lower()).strip("-") or "gang"
    if len(cleaned) <= MAX_NAME and cleaned == text:
        return cleaned
    if len(cleaned) <= MAX_NAME and cleaned != text and not _INVALID.search(text.lower()):
        return cleaned
    digest = hashlib.sha256(text.encode()).hexdigest()[:_HASH_LEN]
    head = cleaned[: MAX_NAME - _HASH_LEN - 1].rstrip("-")
    return f"{head}-{digest}"


def gang_name(tag: str, name: str, *parts: str | int) -> str:
    """`<kind tag>-<name>[-<part>...]`, e.g. `lws-vllm-0` for group 0 of LeaderWorkerSet vllm (each kind's
    tag is its record's, gangs.kinds.Kind.tag: a Job and a StatefulSet may share a name)."""
    return dns_label("-".join([tag, name, *(str(p) for p in parts)]))


# k8s.io/apiserver pkg/storage/names/generate.go: the API server's own name generator, which it runs only
# when admission left metadata.name empty: 5 random characters without vowels after the prefix, the prefix
# cut so the name fits 63 characters.
_GENERATED_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_GENERATED_SUFFIX = 5


def generated_name(prefix: str) -> str:
    """A name for an object created with only `metadata.generateName`, made as the API server makes it."""
    head = prefix[: MAX_NAME - _GENERATED_SUFFIX]
    return head + "".join(secrets.choice(_GENERATED_ALPHABET) for _ in range(_GENERATED_SUFFIX))
