"""Which digit strings can be payment card numbers: the card networks' issuer (IIN) table.

A number is a card number when a network that issues its leading digits (its IIN prefix)
issues numbers of its length, and its Luhn check digit is right (``patterns`` checks
Luhn). Everything else that passes Luhn (order numbers, ISBN-13s, 13-digit epoch
milliseconds, long ids) is no card: no network issues a 13-digit number starting with 1 or
a 13-digit number starting with 978/979.

The table is looked up through a flat array over every 6-digit prefix (one bit per
allowed length), so a whole batch of candidates is checked with one numpy index.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Source: Wikipedia, "Payment card number", section "Issuer identification number (IIN)",
# the table of current (active) networks, as of 2024; written from that table, with JCB's
# 15-digit 1800/2131 numbers and Diners Club's 300-305 and 38 at 14 digits (the classic
# Carte Blanche and International numbers) added. Networks marked inactive there (Bankcard,
# Diners Club enRoute, Laser, Solo, Switch) are left out; their numbers are either gone or
# inside a live range.
#
# (network, IIN prefixes or "low-high" ranges of equally long prefixes, allowed lengths)
_16_19 = (16, 17, 18, 19)
CARD_NETWORKS: tuple[tuple[str, tuple[str, ...], tuple[int, ...]], ...] = (
    ("American Express", ("34", "37"), (15,)),
    ("BC Global", ("6541", "6556"), (16,)),
    ("BORICA", ("2205",), (16,)),
    ("China T-Union", ("31",), (19,)),
    ("China UnionPay", ("62", "81"), _16_19),
    ("Dankort", ("5019",), (16,)),
    ("Diners Club International", ("36",), tuple(range(14, 20))),
    ("Diners Club International", ("300-305", "3095", "38-39"), (14, *_16_19)),
    ("Discover", ("6011", "644-649", "65", "622126-622925"), _16_19),
    # Elo (Brazil); its 4xxxxx and 65xxxx ranges lie inside Visa's and Discover's anyway
    ("Elo", ("401178-401179", "431274", "438935", "451416", "457393", "457631-457632", "504175"), (16,)),
    ("Elo", ("506699-506778", "509000-509999", "627780", "636297", "636368", "650031-650033"), (16,)),
    ("Elo", ("650035-650051", "650405-650439", "650485-650538", "650541-650598", "650700-650718"), (16,)),
    ("Elo", ("650720-650727", "650901-650978", "651652-651679", "655000-655019", "655021-655058"), (16,)),
    ("GPN (Indonesia)", ("1946", "50", "56", "58", "60-63"), (16, 18, 19)),
    ("Hipercard", ("606282", "384100", "384140", "384160"), (16, 19)),
    ("Humo", ("9860",), (16,)),
    ("InstaPayment", ("637-639",), (16,)),
    ("InterPayment", ("636",), _16_19),
    ("JCB", ("3528-3589",), _16_19),
    ("JCB (15 digits)", ("1800", "2131"), (15,)),
    ("LankaPay", ("357111",), (16,)),
    ("Maestro", ("5018", "5020", "5038", "5893", "6304", "6759", "6761-6763"), tuple(range(12, 20))),
    ("Maestro UK", ("6759", "676770", "676774"), tuple(range(12, 20))),
    ("Mastercard", ("51-55", "2221-2720"), (16,)),
    ("Mir", ("2200-2204",), _16_19),
    ("Napas", ("9704",), (16, 19)),
    ("NPS Pridnestrovie", ("605474",), (16,)),  # 6054740-6054744, to six digits
    ("RuPay", ("60", "65", "81", "82", "508", "353", "356"), (16,)),
    ("Troy", ("65", "9792"), (16,)),
    ("UATP", ("1",), (15,)),
    ("UkrCard", ("604001-604200",), _16_19),  # 60400100-60420099, to six digits
    ("Uzcard", ("8600",), (16,)),
    ("Verve", ("506099-506198", "650002-650027", "507865-507964"), (16, 18, 19)),
    ("Visa", ("4",), (13, 16, 19)),
)

PREFIX_DIGITS = 6  # the longest prefix in the table
MIN_LENGTH, MAX_LENGTH = 12, 19


def _length_masks() -> np.ndarray:
    """For every 6-digit prefix, a bit mask of the lengths some network issues under it."""
    masks = np.zeros(10**PREFIX_DIGITS, dtype=np.uint32)
    for _, prefixes, lengths in CARD_NETWORKS:
        bits = sum(1 << n for n in lengths)
        for prefix in prefixes:
            low, _, high = prefix.partition("-")
            high = high or low
            assert len(low) == len(high) <= PREFIX_DIGITS and int(low) <= int(high), prefix
            scale = 10 ** (PREFIX_DIGITS - len(low))
            masks[int(low) * scale : (int(high) + 1) * scale] |= bits
    return masks


_MASKS = _length_masks()


def issued(numbers: Sequence[str]) -> np.ndarray:
    """Whether a network issues card numbers of each digit string's prefix and length."""
    if not numbers:
        return np.zeros(0, dtype=bool)
    lengths = np.fromiter((len(n) for n in numbers), dtype=np.int64, count=len(numbers))
    heads = "".join(n[:PREFIX_DIGITS].ljust(PREFIX_DIGITS, "0") for n in numbers).encode("ascii")
    digits = (np.frombuffer(heads, dtype=np.uint8).reshape(len(numbers), PREFIX_DIGITS) - ord("0")).astype(np.int64)
    index = digits @ (10 ** np.arange(PREFIX_DIGITS - 1, -1, -1, dtype=np.int64))
    in_range = (lengths >= MIN_LENGTH) & (lengths <= MAX_LENGTH)
    return in_range & ((_MASKS[index] >> np.minimum(lengths, 31).astype(np.uint32)) & 1).astype(bool)
