"""The strings extension's `format` as Kubernetes 1.36 runs it (ext.Strings(ext.StringsVersion(2)): cel-go
v0.26.0 ext/formatting.go, the formatter before version 4), output for output.

- `%s`: a double as Go's `%g` (shortest digits, an exponent from 1e+06 or below 1e-04), a list as
  `[a, b]` and a map as `{k:v, k2:v2}` sorted by key, strings within them quoted as Go's `%q`, doubles
  within them as `%.6f`; `%d` an int; `%b`, `%o`, `%x`, `%X` as Go's verbs (`%x` of a string: its UTF-8
  bytes in hex);
- `%f` and `%e` through golang.org/x/text's en-US printer: `%.Nf` groups the integer digits by three
  (`1,234.500000`); `%.Ne` is width N, not precision: always six decimals, then the multiplication sign
  (U+00D7), 10 and the exponent in superscript digits (`10⁰⁰`), padded with spaces to N characters.
  Infinity prints as `∞`, NaN as `NaN`; the strings "NaN", "Infinity" and "-Infinity" are read as those doubles.

Anything else is an error, as kube-scheduler's is (the API server refuses a constant bad clause).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

from celpy import celtypes

DEFAULT_PRECISION = 6  # ext/strings.go defaultPrecision
TIMES = "\u00d7"  # x/text's scientific notation: mantissa, the multiplication sign, 10, the exponent
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
TYPE_NAMES = {
    celtypes.IntType: "int",
    celtypes.UintType: "uint",
    celtypes.DoubleType: "double",
    celtypes.StringType: "string",
    celtypes.BoolType: "bool",
    celtypes.BytesType: "bytes",
    celtypes.ListType: "list",
    celtypes.MapType: "map",
    celtypes.NullType: "null_type",
    type(None): "null_type",
    celtypes.TypeType: "type",
}
# what cel-python's arithmetic leaves as a plain Python value, as the CEL type it stands for
PLAIN = {
    bool: celtypes.BoolType,
    int: celtypes.IntType,
    float: celtypes.DoubleType,
    str: celtypes.StringType,
    bytes: celtypes.BytesType,
}


class Unsupported(Exception):
    """A value this evaluator does not format as Go does (timestamps, durations): the selector is said to be
    unreadable, never judged."""


def go_quote(text: str) -> str:
    """Go's strconv.Quote: printable characters kept, the rest escaped."""
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        elif char in GO_ESCAPES:
            out.append(GO_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def go_g(value: float) -> str:
    """Go's `%g` of a float64: its shortest digits, in exponent form from 1e+06 or below 1e-04."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0"
    digits_tuple = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, digits_tuple.digits))
    exponent = len(digits) + int(digits_tuple.exponent) - 1
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    whole, fraction = digits[: exponent + 1].ljust(exponent + 1, "0"), digits[exponent + 1 :]
    return f"{sign}{whole}{'.' + fraction if fraction else ''}"


def _go_fixed(value: float) -> str:
    """Go's `%.6f` (fmt): Inf signed, NaN bare."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.6f}"


def _cel(value: Any) -> Any:
    plain = PLAIN.get(type(value))
    return value if plain is None else plain(value)


def _text(value: Any) -> str:
    """FormatString: what `%s` makes of one value."""
    if isinstance(value, celtypes.BoolType):
        return "true" if value else "false"
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, celtypes.BytesType):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError("invalid UTF-8 in bytes, cannot convert to string") from error
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return str(int(value))
    if isinstance(value, celtypes.DoubleType):
        return go_g(float(value))
    if value is None or isinstance(value, celtypes.NullType):
        return "null"
    if isinstance(value, celtypes.ListType):
        return "[" + ", ".join(_nested(_cel(item)) for item in value) + "]"
    if isinstance(value, celtypes.MapType):
        pairs = sorted((_key(_cel(k)), _nested(_cel(v))) for k, v in value.items())
        return "{" + ", ".join(f"{k}:{v}" for k, v in pairs) + "}"
    if isinstance(value, type) and value in TYPE_NAMES:
        return TYPE_NAMES[value]
    if isinstance(value, celtypes.TimestampType):
        return _rfc3339_nano(value)
    if isinstance(value, celtypes.DurationType):
        return format(Decimal(repr(value.total_seconds())).normalize(), "f") + "s"
    raise TypeError(f"no formatting function for {type(value).__name__}")


def _rfc3339_nano(stamp: Any) -> str:
    """Go's time.RFC3339Nano (cel-go's string of a timestamp): the fraction without trailing zeros, Z for UTC."""
    fraction = f"{stamp.microsecond:06d}".rstrip("0")
    offset = stamp.utcoffset()
    zone = "Z"
    if offset:
        minutes = int(offset.total_seconds()) // 60
        zone = f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    return f"{stamp.year:04d}-{stamp:%m-%dT%H:%M:%S}{'.' + fraction if fraction else ''}{zone}"


def _nested(value: Any) -> str:
    """A list's element or a map's value (clauseForType, quoteForCEL)."""
    if isinstance(value, celtypes.DoubleType):
        made = _go_fixed(float(value))
        return made if math.isfinite(value) else go_quote(made)
    made = _text(value)
    if isinstance(value, celtypes.StringType):
        return go_quote(made)
    if isinstance(value, celtypes.TimestampType | celtypes.DurationType):  # as CEL literals
        return f"{'timestamp' if isinstance(value, celtypes.TimestampType) else 'duration'}({go_quote(made)})"
    if isinstance(value, celtypes.BytesType):
        return "b" + go_quote(made)
    return made


def _key(value: Any) -> str:
    if isinstance(value, celtypes.StringType):
        return go_quote(str(value))
    if isinstance(value, celtypes.BoolType | celtypes.IntType | celtypes.UintType):
        return _text(value)
    raise TypeError(f"no formatting function for map key of type {type(value).__name__}")


def _double(value: Any, clause: str) -> float:
    if isinstance(value, celtypes.StringType) and str(value) in SPECIAL_DOUBLES:
        return SPECIAL_DOUBLES[str(value)]
    if not isinstance(value, celtypes.DoubleType):
        raise TypeError(f"{clause} clause can only be used on doubles, was given {type(value).__name__}")
    return float(value)


def _grouped(whole: str) -> str:
    return f"{int(whole):,}" if whole else whole


def _fixed(value: Any, precision: int) -> str:
    """x/text's en-US `%.Nf`: at most N decimals rounded as strconv rounds (none when N wraps negative as an
    int16: the shortest digits), trailing zeros dropped down to N as a uint8 (message/print.go initDecimal
    takes both from the one precision), the integer digits grouped by three."""
    number = _double(value, "fixed-point")
    if math.isnan(number):
        return "NaN"
    sign = "-" if number < 0 else ""
    if math.isinf(number):
        return sign + "∞"
    least, most = precision % 256, (precision + 32768) % 65536 - 32768
    made = f"{abs(number):.{most}f}" if most >= 0 else format(Decimal(repr(abs(number))), "f")
    whole, _, fraction = made.partition(".")
    fraction = fraction.rstrip("0").ljust(least, "0")
    return sign + _grouped(whole) + ("." + fraction if fraction else "")


def _scientific(value: Any, width: int) -> str:
    """x/text's en-US `%Ne` (cel-go writes the precision as a width): six decimals, TIMES 10 and a superscript
    exponent of two digits or more, padded to the width."""
    number = _double(value, "scientific")
    if math.isnan(number):
        made = "NaN"
    elif math.isinf(number):
        made = ("-" if number < 0 else "") + "∞"
    else:
        mantissa, _, exponent = f"{abs(number):.6e}".partition("e")
        power = int(exponent)
        made = (
            ("-" if number < 0 else "")
            + f"{mantissa}{TIMES}10"
            + f"{'-' if power < 0 else ''}{abs(power):02d}".translate(SUPERSCRIPT)
        )
    return made.rjust(width % 65536)  # the width a uint16 (x/text's FormatWidth)


def _integer(value: Any, clause: str) -> int:
    if isinstance(value, celtypes.BoolType) or not isinstance(value, celtypes.IntType | celtypes.UintType):
        raise TypeError(f"{clause} clause can only be used on integers, was given {type(value).__name__}")
    return int(value)


def _binary(value: Any) -> str:
    if isinstance(value, celtypes.BoolType):
        return "1" if value else "0"
    number = _integer(value, "binary")
    return ("-" if number < 0 else "") + format(abs(number), "b")


def _hex(value: Any, upper: bool) -> str:
    if isinstance(value, celtypes.StringType | celtypes.BytesType):
        raw = str(value).encode("utf-8") if isinstance(value, celtypes.StringType) else bytes(value)
        made = raw.hex()
    else:
        number = _integer(value, "hex")
        made = ("-" if number < 0 else "") + format(abs(number), "x")
    return made.upper() if upper else made


def _clause(text: str, at: int, value: Any) -> tuple[int, str]:
    """The clause at text[at] (after its %): how many characters it takes, and the value formatted."""
    precision: int | None = None
    if text[at] == ".":
        end = at + 1
        while end < len(text) and text[end].isascii() and text[end].isdigit():
            end += 1
        if end >= len(text) or end == at + 1:
            raise ValueError("could not parse formatting clause: error while parsing precision")
        precision, at = int(text[at + 1 : end]), end
        if precision >= 2**63:
            raise ValueError("error while converting precision to integer: value out of range")
    verb, given, value = text[at], DEFAULT_PRECISION if precision is None else precision, _cel(value)
    if verb == "s":
        made = _text(value)
    elif verb == "d":
        made = str(_integer(value, "decimal"))
    elif verb == "f":
        made = _fixed(value, given)
    elif verb == "e":
        made = _scientific(value, given)
    elif verb == "b":
        made = _binary(value)
    elif verb in "xX":
        made = _hex(value, verb == "X")
    elif verb == "o":
        number = _integer(value, "octal")
        made = ("-" if number < 0 else "") + format(abs(number), "o")
    else:
        raise ValueError(f'could not parse formatting clause: unrecognized formatting clause "{verb}"')
    return at + 1, made


def string_format(text: Any, arguments: Any) -> celtypes.StringType:
    """`"...".format([args])` (parseFormatString)."""
    if not isinstance(text, str) or not isinstance(arguments, list):
        raise TypeError("no such overload: format takes a string and a list")
    out: list[str] = []
    at, used = 0, 0
    while at < len(text):
        if text[at] != "%":
            out.append(text[at])
            at += 1
        elif text[at + 1 : at + 2] == "%":
            out.append("%")
            at += 2
        else:
            if used >= len(arguments):
                raise ValueError(f"index {used} out of range")
            if at + 1 >= len(text):
                raise ValueError("unexpected end of string")
            at, made = _clause(text, at + 1, arguments[used])
            out.append(made)
            used += 1
    return celtypes.StringType("".join(out))


def to_string(value: Any) -> celtypes.StringType:
    """CEL's `string(x)` as cel-go converts: a bool is "true", a double Go's `%g` (common/types double.go
    ConvertToType), bytes that are not UTF-8 an error; cel-python writes Python's "True" and "1000000.0"."""
    value = _cel(value)
    if isinstance(value, celtypes.BoolType | celtypes.DoubleType | celtypes.BytesType):
        return celtypes.StringType(_text(value))
    if isinstance(value, celtypes.TimestampType | celtypes.DurationType):
        return celtypes.StringType(_text(value))
    return celtypes.StringType(value)


# digits past the microsecond that are not all zero: cel-python keeps time to the microsecond, cel-go to the
# nanosecond, so such a timestamp or duration is not read at all rather than read otherwise
FINER_THAN_MICROSECONDS = re.compile(r"\.[0-9]{6}[0-9]*[1-9]")


def _exact(convert: Any) -> Any:
    def converted(value: Any) -> Any:
        if isinstance(value, str) and FINER_THAN_MICROSECONDS.search(str(value)):
            raise Unsupported(f"{value!r} is finer than a microsecond")
        return convert(value)

    return converted


# `string(x)`, `timestamp(x)` and `duration(x)` calls are renamed (device_cel_rewrite.py): the names
# themselves stay the types
CONVERSIONS = {"string": "gk.string", "timestamp": "gk.timestamp", "duration": "gk.duration"}
FUNCTIONS: dict[str, Any] = {
    "format": string_format,
    CONVERSIONS["string"]: to_string,
    CONVERSIONS["timestamp"]: _exact(celtypes.TimestampType),
    CONVERSIONS["duration"]: _exact(celtypes.DurationType),
}
