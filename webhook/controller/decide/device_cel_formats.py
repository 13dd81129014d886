"""Kubernetes' format library of CEL (k8s.io/apiserver/pkg/cel/library/format.go, from 1.31):
`format.dns1123Label()` and the other named formats, `format.named(name)` (an optional), and
`f.validate(s)`: optional.none() when `s` is valid, else optional.of(the messages), worded as the API's
validation words them (k8s.io/apimachinery v0.36 pkg/util/validation and pkg/api/validate/content, whose
length limits count bytes; kube-openapi's strfmt for uuid, byte, date and datetime).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from typing import Any

from celpy import celtypes

from webhook.controller.decide.device_cel_optional import NONE, Optional
from webhook.controller.decide.device_cel_url import request_uri_error

LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
SUBDOMAIN = LABEL + "(\\." + LABEL + ")*"
DNS1035 = "[a-z]([-a-z0-9]*[a-z0-9])?"
KEY = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
VALUE = "(" + KEY + ")?"
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character"
)
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character"
)
DNS1035_MESSAGE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character"
)
KEY_MESSAGE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character"
)
UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.IGNORECASE)
BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})")
DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
TIME = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))", re.DOTALL)


def _matches(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text, re.ASCII) is not None


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    """validation.RegexError."""
    shown = "".join(f"{' or ' if i else ''}'{e}', " for i, e in enumerate(examples))
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def dns1123_label(text: str, unit: str = "characters") -> list[str]:
    errors = [f"must be no more than 63 {unit}"] if _size(text) > 63 else []
    if not _matches(LABEL, text):
        dots = _matches(SUBDOMAIN, text)
        errors.append("must not contain dots" if dots else _regex_error(LABEL_MESSAGE, LABEL, "my-name", "123-abc"))
    return errors


def dns1123_subdomain(text: str, unit: str = "characters") -> list[str]:
    errors = [f"must be no more than 253 {unit}"] if _size(text) > 253 else []
    if not _matches(SUBDOMAIN, text):
        errors.append(_regex_error(SUBDOMAIN_MESSAGE, SUBDOMAIN, "example.com"))
    return errors


def dns1035_label(text: str) -> list[str]:
    errors = ["must be no more than 63 characters"] if _size(text) > 63 else []
    if not _matches(DNS1035, text):
        errors.append(_regex_error(DNS1035_MESSAGE, DNS1035, "my-name", "abc-123"))
    return errors


def qualified_name(text: str) -> list[str]:
    """content.IsLabelKey."""
    parts = text.split("/")
    if len(parts) > 2:
        return [
            "a valid label key "
            + _regex_error(KEY_MESSAGE, KEY, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    errors: list[str] = []
    if len(parts) == 2:
        if not parts[0]:
            errors.append("prefix part must be non-empty")
        else:
            errors += ["prefix part " + e for e in dns1123_subdomain(parts[0], "bytes")]
    name = parts[-1]
    if not name:
        errors.append("name part must be non-empty")
    elif _size(name) > 63:
        errors.append("name part must be no more than 63 bytes")
    if not _matches(KEY, name):
        errors.append("name part " + _regex_error(KEY_MESSAGE, KEY, "MyName", "my.name", "123-abc"))
    return errors


def label_value(text: str) -> list[str]:
    errors = ["must be no more than 63 bytes"] if _size(text) > 63 else []
    if not _matches(VALUE, text):
        errors.append(_regex_error(VALUE_MESSAGE, VALUE, "MyValue", "my_value", "12345"))
    return errors


def _prefix(check: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """apimachinery's NameIs* with prefix: a trailing dash masked (generic.go maskTrailingDash: the last two
    bytes become an "a")."""

    def checked(text: str) -> list[str]:
        raw = text.encode("utf-8", "surrogateescape")
        if len(raw) > 1 and raw.endswith(b"-"):
            text = (raw[:-2] + b"a").decode("utf-8", "surrogateescape")
        return check(text)

    return checked


def _is_date(text: str) -> bool:
    """time.Parse("2006-01-02"): four, two and two digits, a day the month has (year 0 a leap year)."""
    found = DATE.fullmatch(text)
    if found is None:
        return False
    year, month, day = (int(g) for g in found.groups())
    return 1 <= month <= 12 and 1 <= day <= calendar.monthrange(year or 2000, month)[1]


def _is_datetime(text: str) -> bool:
    """strfmt IsDateTime."""
    if len(text) < 4:
        return False
    parts = text.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    found = TIME.fullmatch(parts[1])
    return found is not None and found[1] <= "23" and found[2] <= "59" and found[3] <= "59"


def _uri(text: str) -> list[str]:
    error = request_uri_error(text)
    return [error] if error else []


VALIDATORS: dict[str, Callable[[str], list[str]]] = {
    "dns1123Label": dns1123_label,
    "dns1123Subdomain": dns1123_subdomain,
    "dns1035Label": dns1035_label,
    "qualifiedName": qualified_name,
    "dns1123LabelPrefix": _prefix(dns1123_label),
    "dns1123SubdomainPrefix": _prefix(dns1123_subdomain),
    "dns1035LabelPrefix": _prefix(dns1035_label),
    "labelValue": label_value,
    "uri": _uri,
    "uuid": lambda text: [] if UUID.fullmatch(text) else ["does not match the UUID format"],
    "byte": lambda text: [] if BASE64.fullmatch(text) else ["invalid base64"],
    "date": lambda text: [] if _is_date(text) else ["invalid date"],
    "datetime": lambda text: [] if _is_datetime(text) else ["invalid datetime"],
}


class Format:
    """A named format of the library."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Format) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def _validate(format_: object, text: object) -> Optional:
    if not isinstance(format_, Format) or not isinstance(text, str):
        raise TypeError("no such overload: validate takes a format and a string")
    errors = VALIDATORS[format_.name](str(text))
    return Optional(True, celtypes.ListType(map(celtypes.StringType, errors))) if errors else NONE


def _named(name: object) -> Optional:
    if not isinstance(name, str):
        raise TypeError("no such overload: format.named takes a string")
    return Optional(True, Format(str(name))) if str(name) in VALIDATORS else NONE


def _constant(name: str) -> Callable[[], Format]:
    return lambda: Format(name)


FUNCTIONS: dict[str, Any] = {
    "validate": _validate,
    "format.named": _named,
    **{f"format.{name}": _constant(name) for name in VALIDATORS},
}
