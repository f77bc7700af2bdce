"""What the text around a candidate says about it: code and math are full of numbers and
addresses shaped like personal data that are not.

Seen in the shared code and math corpora and the bundled sample before these rules:
GSM8K's calculator notes (``<<24-63-25=148>>``) and column arithmetic taken for phone
numbers, the C++ standard's and the HTML spec's section numbers (``[27.4.2.2]``,
``// 12.2.4.44 Bogus comment state``) and X.509 object identifiers (``"2.5.4.44"``) taken
for IP addresses, ``git@github.com:`` in a JavaScript regex taken for an e-mail address.
Each rule reads a few characters either side of the candidate and never the whole text.
"""

from __future__ import annotations

import re

from stages.pii.candidates import Candidate


def line_before(m: Candidate, width: int) -> str:
    """Up to ``width`` characters before the candidate, on its line. Bounded on purpose: a
    10 MB line without a newline would make an unbounded search quadratic."""
    start = max(0, m.start() - width)
    newline = m.string.rfind("\n", start, m.start())
    return m.string[newline + 1 if newline >= 0 else start : m.start()]


# Digits that are operands: an operator or "=" right before or after, or a calculator
# note's "<<". A phone number is written beside words, not beside "=" or "*".
_OPERATOR_BEFORE = re.compile(r"(?:[=*/×÷+<]|[-−–]\s|\$)\s*\$?$")
_OPERATOR_AFTER = re.compile(r"^\s*(?:[=*/×÷+>]|[-−–]\s*\$?\d)")


def arithmetic(m: Candidate) -> bool:
    before = m.string[max(0, m.start() - 3) : m.start()]
    after = m.string[m.end() : m.end() + 4]
    return bool(_OPERATOR_BEFORE.search(before) or _OPERATOR_AFTER.match(after))


def quoted_digits(m: Candidate) -> bool:
    """An unbroken run of digits in quotes: a string literal of digits, not a number to dial."""
    text = m.group()
    if not text.isdigit() or m.start() == 0 or m.end() >= len(m.string):
        return False
    opening, closing = m.string[m.start() - 1], m.string[m.end()]
    return opening == closing and opening in "'\"`"


# A dotted number cited as a section of a standard: in brackets, or after a word that
# says so ("part 15.5.4.11", "§ 4.2.1.1", "clause 5.3.2.1").
_SECTION_WORD = re.compile(
    r"(?i)(?:\[|§\s*|\b(?:section|sections|sect|sec|part|clause|chapter|chap|annex|appendix|paragraph|para"
    r"|table|figure|fig|step|item|rule|note|see|cf|corollary|lemma|theorem|proposition|definition"
    r"|remark|example|exercise|equation|eq)\.?\s+)$"
)
# ... and, in code, the first thing on a comment line ("// 20.11.5.3 arithmetic").
_COMMENT_START = re.compile(r"(?:^|\n)[ \t]*(?://+|/?\*+|#+|--|;+|%+)[ \t]*\[?$")


def section_number(m: Candidate, code: bool) -> bool:
    before = m.string[max(0, m.start() - 16) : m.start()]
    if _SECTION_WORD.search(before) or m.string[m.end() : m.end() + 1] == "]":
        return True
    return code and bool(_COMMENT_START.search(before))


# In code an IPv4 address is a value: quoted, a URL's host, or named so on its line. A
# dotted quad anywhere else in code (comments, mostly) cites a section of a standard
# ("// C++14 20.8.2.3", "802.11-2012 8.4.2.29") or is a version.
_ADDRESS_WORD = re.compile(
    r"(?i)(?:\bip|addr|host|server|dns|gateway|proxy|route|subnet|netmask|connect|ping|listen|bind|inet|://|@)"
)
_VERSION_WORD = re.compile(r"(?i)(?:version|release|\bv|\brev)")


def address_in_code(m: Candidate) -> bool:
    before = line_before(m, 40)
    if _VERSION_WORD.search(before):
        return False
    quoted = (
        m.start() > 0
        and m.string[m.start() - 1] in "'\"`"
        and m.string[m.end() : m.end() + 1] in ("'", '"', "`", ":", "/")
    )
    return quoted or bool(_ADDRESS_WORD.search(before))


def object_identifier(text: str) -> bool:
    """ASN.1 object identifiers start with arc 0, 1 or 2 ("2.5.4.44", "1.2.840.113549"); in
    code a dotted quad that does is one, or a test value, far more often than an address."""
    return text.split(".", 1)[0] in ("0", "1", "2")


# Addresses no person owns: RFC 2606 / 6761 example and test names.
_EXAMPLE_DOMAIN = re.compile(r"(?i)(?:^|\.)(?:example\.(?:com|org|net)|example|test|invalid|localhost)$")
# Source file names look like addresses ("foo@baz.py"): these endings are files in code.
_CODE_FILE_ENDINGS = frozenset(
    "py pyc pl pm pod js mjs ts jsx tsx c h cc cpp hpp cxx java kt rb go rs php sh bash txt md rst "
    "json yaml yml toml xml html htm ini cfg conf log".split()
)


# Accounts of services, not of people: "git@github.com", "hg@bitbucket.org".
_SERVICE_USERS = frozenset(("git", "hg", "svn", "cvs", "anonymous", "anoncvs"))


def not_an_address_in_code(m: Candidate) -> bool:
    """``git@github.com:org/repo`` (an SSH remote) and ``user:pass@host:port`` (a URL's
    credentials) are followed by ":", ``ssh://git@host/repo`` follows "://"; service
    accounts, example domains and file names belong to nobody."""
    user, domain = m.group().rsplit("@", 1)
    return (
        m.string[m.end() : m.end() + 1] == ":"
        or m.string[max(0, m.start() - 3) : m.start()] == "://"
        or user.lower() in _SERVICE_USERS
        or bool(_EXAMPLE_DOMAIN.search(domain))
        or domain.rsplit(".", 1)[-1].lower() in _CODE_FILE_ENDINGS
    )


# A Message-ID names a message, not a mailbox: said so by its header, or made of digits,
# dots and hex (a timestamp, a UUID) as mail software generates them.
_MESSAGE_HEADER = re.compile(r"(?i)(?:message-id|references|in-reply-to|content-id|received-\d+)\s*:[^\n]*$")
_GENERATED_LOCAL_PART = re.compile(r"(?i)^[0-9a-f][0-9a-f.\-]{11,}$")


def message_id(m: Candidate) -> bool:
    local = m.group().rsplit("@", 1)[0]
    if _GENERATED_LOCAL_PART.match(local) and sum(c.isdigit() for c in local) >= 6:
        return True
    return bool(_MESSAGE_HEADER.search(line_before(m, 200)))
