"""Phone numbers the way people write them, told from the numbers beside them.

A digit group is a phone number when its shape says so on its own (an international
prefix, an area code in brackets, North America's 3-3-4, a national trunk "0" with nine
digits or more), or when the text around it says so: a label before it ("tel", "call",
"Mobile:", "Telefon", "teléfono", "電話"...) or after it ("office", "mobile"). A label lets
national groupings through that no shape would (Norway's "723 813 266", "73 448 266").

Never a phone number, whatever its shape: a house or flat number in a street address
("Apt. 722 20 40 rue Victor Hugo"), a postal code (Brazil's 75534-030, Portugal's
3610-114, US ZIP+4), a date, a version, a price or an operand (``context``), an IPv4
address or a number with thousands separators.
"""

from __future__ import annotations

import re

from stages.pii import context
from stages.pii.candidates import Candidate

_EXTENSION = re.compile(r"\s?(?:x|ext\.?|extension)\s?\d{1,6}$", re.IGNORECASE)
_GROUPS = re.compile(r"\d+")

_LABEL_BEFORE = re.compile(
    r"(?i)(?:\b(?:tel|tél|tlf|tfn|telephone|téléphone|telefon|telefono|teléfono|telefone|telephon|phone|ph|mob"
    r"|mobile|mobil|móvil|movil|cell|cellphone|cellulare|celular|handy|portable|call|ring|fax|whatsapp|hotline"
    r"|sms|reach|dial|dialing|answer|answering|contact)\b|телефон|тел|電話|电话|전화|هاتف|फ़ोन|फोन)[^\n\d]{0,24}$"
)
_LABEL_AFTER = re.compile(r"^[\s-]*[(\[]?(?i:office|mobile|cell|home|work|fax|tel|phone|direct)\b")
_ADDRESS_BEFORE = re.compile(
    r"(?i)(?:\b(?:apt|apartment|suite|ste|unit|flat|house|bldg|building|floor|fl|box|no|nr|n[º°o])\.?|#)\s*$"
)
_ADDRESS_AFTER = re.compile(
    r"^\s*(?i:rue|street|st|avenue|ave|road|rd|lane|ln|drive|dr|blvd|boulevard|way|place|pl|court|ct|quai"
    r"|straße|strasse|str|via|calle|rua|avenida|allee|gasse|weg|platz|plaza|square|sq)\b"
)

# Every label and address word above has a letter (or is "#"): text around a candidate
# without one, as in a table of numbers, needs none of those searches.
_WORDY = re.compile(r"[^\W\d_]|#")


def is_phone(m: Candidate) -> bool:
    shape = phone_shape(m.group())
    if shape == NOT_A_PHONE:
        return False
    before, after = context.line_before(m, 40), m.string[m.end() : m.end() + 24]
    wordy = bool(_WORDY.search(before) or _WORDY.search(after))
    if shape == IF_LABELLED and not wordy:
        return False  # only a label could make it one, and there is no word beside it
    if context.arithmetic(m) or context.quoted_digits(m) or context.section_number(m, code=False):
        return False
    if wordy and (_ADDRESS_BEFORE.search(before) or _ADDRESS_AFTER.match(after)):
        return False
    return shape == PHONE or bool(_LABEL_BEFORE.search(before) or _LABEL_AFTER.match(after))


NOT_A_PHONE, IF_LABELLED, PHONE = 0, 1, 2


def phone_shape(text: str) -> int:
    """What the digits say on their own. PHONE: international (+CC / 00CC) or national
    numbers of 6-15 digits in phone-like groups, of a shape a numbering plan uses.
    IF_LABELLED: such groups of no telling shape, a phone number under a phone label.
    NOT_A_PHONE, label or not: a date, a year range, a version, an IPv4 address or a
    number with thousands separators."""
    main = _EXTENSION.sub("", text)
    groups = _GROUPS.findall(main)
    lengths = [len(g) for g in groups]
    digits = sum(lengths)
    if main.startswith("+") or (main.startswith("00") and main[2:3] != "0" and len(groups) > 1):
        return PHONE if 8 <= digits <= 15 else NOT_A_PHONE
    if len(groups) == 1:
        # An unbroken run is an id, a count or a timestamp ("GID 2147483648") unless a label
        # says phone, or a national trunk 0 leads 10-11 digits.
        run = groups[0]
        if len(run) in (10, 11) and run[0] == "0":
            return PHONE
        return IF_LABELLED if 7 <= len(run) <= 12 else NOT_A_PHONE
    if digits > 13 or digits < 6 or (digits == 6 and len(groups) < 3) or any(n == 1 for n in lengths[1:]):
        return NOT_A_PHONE
    separators = set(re.findall(r"[ .-]", main.replace("(", "").replace(")", "")))
    if "." in separators and (digits < 9 or (len(groups) == 4 and all(n <= 3 for n in lengths))):
        return NOT_A_PHONE  # dotted quad (a private IP address, left as it is) or clause number 52.227.19
    if lengths in ([5, 4], [3, 2, 4]) and separators == {"-"}:
        return NOT_A_PHONE  # US ZIP+4 code, or SSN-shaped (the ssn type had its say)
    if _is_date(groups, main) or ("(" not in main and lengths[0] == 4 and groups[0][:2] in ("19", "20")):
        return NOT_A_PHONE  # a date or a year-led number ("binutils 2003 0523", "2019-2020")
    if "." in separators and len(separators) > 1:
        return IF_LABELLED  # dots mixed with dashes: a clause number ("DFARS 252.227-7014"), not a dialled one
    thousands = len(separators) == 1 and separators <= {" ", "."} and lengths[0] <= 3 and set(lengths[1:]) == {3}
    if thousands and not groups[0].startswith("0"):
        return IF_LABELLED  # 1 000 000 / 1.000.000
    if "(" in main or lengths in ([3, 3, 4], [1, 3, 3, 4]) or (groups[0].startswith("0") and digits >= 9):
        return PHONE
    return IF_LABELLED


def _is_date(groups: list[str], text: str) -> bool:
    if len(groups) != 3 or "(" in text:
        return False
    nums = [int(g) for g in groups]
    lens = [len(g) for g in groups]
    if lens[0] == 4 and lens[1] <= 2 and lens[2] <= 2:
        return 1 <= nums[1] <= 12 and 1 <= nums[2] <= 31
    if lens[2] == 4 and lens[0] <= 2 and lens[1] <= 2:
        return 1 <= min(nums[0], nums[1]) <= 12 and max(nums[0], nums[1]) <= 31
    return False
