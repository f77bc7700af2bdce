"""What the ``pii`` stage looks for: one ``PiiType`` per kind of personal data or secret.

Each type has three parts, used in this order:

``scan``      an RE2 pattern with two groups, (left boundary)(candidate). pyarrow runs it
              natively over the Arrow buffers, first to flag documents, then to mark every
              candidate in the flagged ones; RE2 runs in linear time, so a 10 MB line of
              digits or letters costs one pass, never n^2. RE2 has no look-arounds: the left
              boundary is consumed as group 1 and the right one is ``after``.
``after``     a Python pattern that must match right after a candidate (e.g. "not followed by
              another digit or a version suffix"); it is tried once per candidate.
``validate``  all candidates of a batch at once -> how many characters of each to replace
              (0 keeps it): checksums are vectorised in numpy (Luhn and the networks' issuer
              table in ``cards`` for cards, ISO 7064 mod-97 for IBANs); addresses go
              through ``ipaddress``; phone numbers and IPv4 through rules that tell them from
              dates, versions and plain numbers.

Types are applied in ``TYPES`` order, most specific first; a candidate overlapping a span
an earlier type took is dropped.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from stages.pii import context, phones
from stages.pii.candidates import Candidate
from stages.pii.cards import issued

Validator = Callable[..., np.ndarray]


@dataclass(frozen=True)
class PiiType:
    name: str
    placeholder: str
    scan: str
    validate: Validator
    after: re.Pattern = re.compile("")
    # Whether its scan flags a good share of ordinary documents (any run of digits may be
    # a phone number): such a type scans the column alone, the rare ones share a first pass.
    common: bool = False


def _not_after(chars: str) -> str:
    """RE2 left boundary: start of text, or a character that is no letter, digit, _ or ``chars``."""
    return rf"(^|[^\pL\pN_{chars}])"


def _full(matches: Sequence[Candidate], ok: np.ndarray | Sequence[bool]) -> np.ndarray:
    """Replace whole matches where ``ok``, nothing elsewhere."""
    lengths = np.fromiter((m.end() - m.start() for m in matches), dtype=np.int64, count=len(matches))
    return np.where(np.asarray(ok, dtype=bool), lengths, 0)


def digit_matrix(numbers: Sequence[str], width: int) -> np.ndarray:
    """ASCII digit strings right-aligned into an (n, width) uint8 matrix, zeros on the left."""
    if not numbers:
        return np.zeros((0, width), dtype=np.uint8)
    joined = "".join(s.rjust(width, "0")[-width:] for s in numbers).encode("ascii")
    return (np.frombuffer(joined, dtype=np.uint8).reshape(len(numbers), width) - ord("0")).astype(np.uint8)


def luhn_valid(numbers: Sequence[str]) -> np.ndarray:
    """Luhn checksum of many digit strings at once (leading zeros do not change it)."""
    digits = digit_matrix(numbers, 20).astype(np.int64)
    doubled = digits[:, -2::-2] * 2  # every second digit from the right, check digit excluded
    digits[:, -2::-2] = np.where(doubled > 9, doubled - 9, doubled)
    return digits.sum(axis=1) % 10 == 0


def mod97(numbers: Sequence[str]) -> np.ndarray:
    """Each decimal string modulo 97, column by column over all strings at once."""
    width = max((len(s) for s in numbers), default=1)
    digits = digit_matrix(numbers, width).astype(np.int64)
    rest = np.zeros(len(numbers), dtype=np.int64)
    for col in range(width):
        rest = (rest * 10 + digits[:, col]) % 97
    return rest


# ---------------------------------------------------------------- e-mail

_FILE_SUFFIXES = {"png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp", "css", "js", "pdf", "mp4"}


def _validate_email(matches: Sequence[Candidate], kind: str = "web", **_) -> np.ndarray:
    # "icon@2x.png" and friends are asset names, not addresses.
    ok = [m.group().rsplit(".", 1)[-1].lower() not in _FILE_SUFFIXES and not context.message_id(m) for m in matches]
    if kind == "code":
        ok = [keep and not context.not_an_address_in_code(m) for keep, m in zip(ok, matches)]
    lengths = _full(matches, ok)
    # Perl's POD writes "<" and ">" as E<lt> and E<gt>: "foo@cpan.orgE<gt>" ends at "org".
    for i, m in enumerate(matches):
        if lengths[i] and m.group().endswith("E") and m.string.startswith(("<gt>", "<lt>"), m.end()):
            lengths[i] -= 1
    return lengths


EMAIL = PiiType(
    name="email",
    placeholder="<EMAIL>",
    # ASCII boundaries: in Chinese or Japanese text an address sits right between letters
    scan=r"(^|[^A-Za-z0-9_.%+-])((?i)[a-z0-9][a-z0-9._%+-]*@(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24})",
    after=re.compile(r"(?![A-Za-z0-9_@-])"),  # "star@a.star@example.com" is no address
    validate=_validate_email,
)

# ---------------------------------------------------------------- IP addresses

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# A version string, not an address: said after these words ("Standards-Version to
# 3.9.1.0", "Policy 4.4.1.1", "bump to 2.5.0.0") ...
_VERSION_BEFORE = re.compile(
    r"(?i)\b(?:v|ver|version|versions|release[sd]?|policy|standards(?:-version)?|bump(?:ed|s)?|"
    r"upgrade[sd]?|update[sd]?|patch(?:ed|es)?|build|firmware|kernel|package|dep|deps|depends|requires?)\b"
    r"[^\n\w]{0,4}(?:(?:to|from|is|at)\b[^\n\w]{0,3})?$"
    # ... or compared ("(>= 1:1.0.99.4)"), or the second of a pair ("from 1.2.99.2 to 1.2.99.4")
    r"|(?:[<>=]=?|~)\s*(?:\d+:)?$|\d+(?:\.\d+)+\S*\s+(?:to|and|or|->|=>)\s+$"
)
# ... or as the version of a Debian changelog entry: "pkg (2.12.90.0.1) unstable; urgency=".
_VERSION_AFTER = re.compile(r"\)\s+[\w-]+(?:\s+[\w-]+)*;\s*urgency=")


# Only 2000::/3 is handed out as global unicast; ipaddress calls most unassigned space global,
# which would make "a::b" in C++ or Perl text an address.
_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")


def _validate_ip(matches: Sequence[Candidate], public_only: bool = True, kind: str = "web", **_) -> np.ndarray:
    ok = []
    for m in matches:
        text = m.group()
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            ok.append(False)
            continue
        if public_only and not (address.is_global and (address.version == 4 or address in _GLOBAL_UNICAST)):
            ok.append(False)
        elif address.is_multicast:
            ok.append(False)  # a group any host may join: nobody's address
        elif address.version == 4 and (
            _looks_like_version(m)
            or context.section_number(m, code=kind == "code")
            or (kind == "code" and (context.object_identifier(text) or not context.address_in_code(m)))
        ):
            ok.append(False)
        else:
            ok.append(True)
    return _full(matches, ok)


def _looks_like_version(m: Candidate) -> bool:
    if all(len(part) == 1 for part in m.group().split(".")):
        return True  # 1.2.3.4: user addresses with four one-digit parts are vanishingly rare
    before = m.string[max(0, m.start() - 40) : m.start()]
    after = m.string[m.end() : m.end() + 60]
    return bool(_VERSION_BEFORE.search(before) or _VERSION_AFTER.match(after))


IP = PiiType(
    name="ip",
    placeholder="<IP_ADDRESS>",
    scan=_not_after(".-")
    + rf"({_OCTET}(?:\.{_OCTET}){{3}}"  # IPv4
    # IPv6 candidates (ipaddress decides): hex groups and colons, maybe an IPv4 tail
    + r"|(?i:[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){1,6}:(?:\d{1,3}\.){3}\d{1,3})"
    + r"|(?i:[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}))",
    # not glued to a longer dotted number or a version suffix (-1, ~rc1, +dfsg)
    after=re.compile(r"(?![\w~+-]|\.\d)"),
    validate=_validate_ip,
)

# ---------------------------------------------------------------- secrets

SECRET = PiiType(
    name="secret",
    placeholder="<SECRET>",
    scan=r"(^|[^A-Za-z0-9_])("
    r"A(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|ROA|PKA|SCA)[A-Z0-9]{16}"
    # an AWS secret key is 40 base64 characters with nothing to tell it from a hash, so only
    # its assignment is recognised (and replaced whole, name included)
    r"|(?i:aws_?secret_?(?:access_?)?key)[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9/+]{40}"
    r"|gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{82}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|https://hooks\.slack\.com/services/[A-Za-z0-9_]+/[A-Za-z0-9_]+/[A-Za-z0-9_]+"
    r"|-----BEGIN (?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----(?s:.)*?"
    r"-----END (?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}"
    r"|AIza[0-9A-Za-z_-]{35}"
    r"|(?:sk|rk)_live_[0-9A-Za-z]{24,})",
    after=re.compile(r"(?![A-Za-z0-9/+_-])"),
    validate=lambda matches, **_: _full(matches, [True] * len(matches)),
)

# ---------------------------------------------------------------- IBAN

# ISO 13616 lengths by country (SWIFT IBAN registry).
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22,
    "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32,
    "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24, "SC": 31,
    "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28, "TL": 23,
    "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip


def _validate_iban(matches: Sequence[Candidate], **_) -> np.ndarray:
    """Country length, then mod-97 == 1 on the rearranged number; a match that runs into the
    next word ("BE68 5390 0754 7034 2021") is cut back to the country's length if that cut
    falls on a group boundary."""
    keep = np.zeros(len(matches), dtype=np.int64)
    numeric, rows, spans = [], [], []
    for i, m in enumerate(matches):
        text = m.group()
        compact = text.replace(" ", "").upper()
        length = IBAN_LENGTHS.get(compact[:2])
        if length is None or len(compact) < length:
            continue
        end = _char_end(text, length)
        if end is None:
            continue
        iban = compact[:length]
        numeric.append("".join(str(int(c, 36)) for c in iban[4:] + iban[:4]))
        rows.append(i)
        spans.append(end)
    if rows:
        valid = mod97(numeric) == 1
        keep[np.asarray(rows)[valid]] = np.asarray(spans)[valid]
    return keep


def _char_end(text: str, compact_length: int) -> int | None:
    """Index in ``text`` just after its ``compact_length``-th non-space character, if the text
    ends there or a space follows (a group boundary)."""
    seen = 0
    for pos, char in enumerate(text):
        if char != " ":
            seen += 1
            if seen == compact_length:
                end = pos + 1
                return end if end == len(text) or text[end] == " " else None
    return None


IBAN = PiiType(
    name="iban",
    placeholder="<IBAN>",
    scan=_not_after("") + r"([A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?|[a-z]{2}\d{2}[a-z0-9]{11,30})",
    after=re.compile(r"(?!\w)"),
    validate=_validate_iban,
)

# ---------------------------------------------------------------- payment cards


def _validate_card(matches: Sequence[Candidate], **_) -> np.ndarray:
    """Luhn-valid numbers whose prefix and length some network issues (``cards``)."""
    numbers = [m.group().replace(" ", "").replace("-", "") for m in matches]
    return _full(matches, issued(numbers) & luhn_valid(numbers))


# One run of 12-19 digits, or the groupings printed on cards, one separator throughout:
# 4-4-4 (12-digit Maestro), 4-4-4-1..4, 4-4-4-4-1..4, and 4-6-4 / 4-6-5 (Diners, Amex, JCB 15),
# 4-5-6 (UATP). A fifth group of four is taken too, so a 20-digit id is seen whole (and kept).
_CARD_GROUPS = r"\d{4}S\d{4}S\d{4}(?:S\d{4}(?:S\d{1,4})?|S\d{1,4})?|\d{4}S\d{6}S\d{4,5}|\d{4}S\d{5}S\d{6}"

CREDIT_CARD = PiiType(
    name="credit_card",
    placeholder="<CREDIT_CARD>",
    # not the digits of a decimal fraction (0.5382691050147506) or of a URL path
    scan=_not_after("./-") + rf"(\d{{12,19}}|{_CARD_GROUPS.replace('S', ' ')}|{_CARD_GROUPS.replace('S', '-')})",
    after=re.compile(r"(?!\w|[-.,]\d)"),
    validate=_validate_card,
)

# ---------------------------------------------------------------- US SSN


def _validate_ssn(matches: Sequence[Candidate], **_) -> np.ndarray:
    # Area 000, 666 and 900-999, group 00 and serial 0000 are never issued.
    parts = [m.group().split("-") for m in matches]
    return _full(matches, [a not in ("000", "666") and a[0] != "9" and g != "00" and s != "0000" for a, g, s in parts])


SSN = PiiType(
    name="ssn",
    placeholder="<SSN>",
    scan=_not_after("-") + r"(\d{3}-\d{2}-\d{4})",
    after=re.compile(r"(?![\w-])"),
    validate=_validate_ssn,
)

# ---------------------------------------------------------------- phone numbers

PHONE = PiiType(
    name="phone",
    placeholder="<PHONE>",
    scan=_not_after("@/.+:-") + r"("
    r"(?:\+\d{1,3}[ .-]?|00\d{1,3}[ .-]?)?"  # +CC or 00CC
    r"(?:\(\d{1,5}\)[ .-]?)?"  # (area)
    r"(?:\d{1,5}(?:[ .-]\d{1,8}){1,5}|\d{6,11})"  # grouped, or one run
    r"(?: ?(?i:x|ext\.?|extension) ?\d{1,6})?)",
    after=re.compile(r"(?!\w|[-.:/]\d)"),
    validate=lambda matches, **_: _full(matches, [phones.is_phone(m) for m in matches]),
    common=True,
)

# Most specific first: a secret or an IBAN holds digit runs that looser types would take.
TYPES: tuple[PiiType, ...] = (SECRET, EMAIL, IBAN, CREDIT_CARD, SSN, IP, PHONE)
BY_NAME = {t.name: t for t in TYPES}
