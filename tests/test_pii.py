"""The ``pii`` stage: each type's positives and look-alike negatives, counters, hard input,
and precision/recall floors on presidio's generated set."""

from __future__ import annotations

import gzip
import json
import random
import socket

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.pii import score
from stages.pii import Pii
from stages.pii.patterns import luhn_valid, mod97


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("pii tried to use the network")

    monkeypatch.setattr(socket, "socket", refuse)


def scrub(texts, **options):
    batch = pa.record_batch(
        {
            "id": pa.array([str(i) for i in range(len(texts))]),
            "text": pa.array(texts, pa.string()),
            "source": pa.array(["web"] * len(texts)),
        }  # fmt: skip
    )
    out = Pii(Pii.Options(**options)).process(batch, "web")
    assert out.drop_reason.null_count == len(texts)  # the stage never drops
    return out.batch.column("text").to_pylist(), out


@pytest.mark.parametrize(
    "text, expected",
    [
        ("write to Jane.Doe+news@Mail.Example.co.uk today", "write to <EMAIL> today"),
        ("WRITE TO JOHN@EXAMPLE.COM", "WRITE TO <EMAIL>"),
        ("server 93.184.216.34:443 answered", "server <IP_ADDRESS>:443 answered"),
        ("dns 2001:4860:4860::8888 is up", "dns <IP_ADDRESS> is up"),
        ("call +1 (415) 555-2671 or +44 20 7946 0958", "call <PHONE> or <PHONE>"),
        ("Phone: 040 898 9331", "Phone: <PHONE>"),
        ("card 4111 1111 1111 1111 exp", "card <CREDIT_CARD> exp"),
        ("amex 3782-822463-10005.", "amex <CREDIT_CARD>."),
        ("ssn 536-32-3065 on file", "ssn <SSN> on file"),
        ("IBAN DE89 3704 0044 0532 0130 00.", "IBAN <IBAN>."),
        ("iban gb12spfc66723974480868 ok", "iban <IBAN> ok"),
        ("key=AKIAIOSFODNN7EXAMPLE", "key=<SECRET>"),
        ("token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "token <SECRET>"),
        ("slack xoxb-123456789012-abcdefABCDEF", "slack <SECRET>"),
        (
            "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "Bearer <SECRET>",
        ),
        ("a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK\n-----END RSA PRIVATE KEY-----\nb", "a\n<SECRET>\nb"),
    ],
)
def test_each_type_is_replaced(text, expected):
    assert scrub([text])[0] == [expected]


@pytest.mark.parametrize(
    "text",
    [
        "Standards-Version: bump to 3.9.1.0.",  # version, not an address
        "binutils (2.12.90.0.1-3) unstable; urgency=low",
        "needs libfoo (>= 1:1.0.99.4) and update from 1.2.99.2 to 1.2.99.4",
        "released 4.2.16.1 and 1.2.3.4 yesterday",
        "lan 192.168.1.20, 10.0.0.1, loopback 127.0.0.1 and ::1, docs 2001:db8::1",
        "std::vector<int> and a::b and 12:30:45",
        "card 4111 1111 1111 1112 fails Luhn, 1234567812345678 too",
        "ssn 000-12-3456, 666-12-3456, 912-34-5678 are never issued",
        "IBAN GB82 WEST 1234 5698 7654 33 has a bad checksum",
        "on 2019-03-23 and 23.03.2019, 1 000 000 people, years 2019-2020, zip 02110-1301",
        "icon@2x.png and user@localhost",
        "timestamp 1700000000 and order 4432",
    ],
)
def test_look_alikes_are_kept(text):
    assert scrub([text])[0] == [text]


def _luhn(body: str) -> str:
    """``body`` with the Luhn check digit appended."""
    total = sum(int(d) if i % 2 else (2 * int(d) - 9 if int(d) > 4 else 2 * int(d)) for i, d in enumerate(body[::-1]))
    return body + str(-total % 10)


def _card(prefix: str, length: int, rng: random.Random) -> str:
    return _luhn(prefix + "".join(rng.choice("0123456789") for _ in range(length - 1 - len(prefix))))


def _grouped(number: str, sep: str) -> str:
    """As printed: 4-6-4 (14 digits), 4-6-5 (15), otherwise fours and a shorter last group."""
    sizes = {14: (4, 6, 4), 15: (4, 6, 5)}.get(len(number), (4,) * 5)
    parts, at = [], 0
    for size in sizes:
        if at < len(number):
            parts.append(number[at : at + size])
            at += size
    return sep.join(parts)


# (network, IIN prefixes to try, lengths it issues), from the networks' published IIN ranges
CARD_NETWORKS = [
    ("Visa", ["4"], [13, 16, 19]),
    ("Mastercard", ["51", "55", "2221", "2720"], [16]),
    ("American Express", ["34", "37"], [15]),
    ("Discover", ["6011", "644", "649", "65", "622126", "622925"], [16, 17, 18, 19]),
    ("JCB", ["3528", "3589"], [16, 17, 18, 19]),
    ("JCB 15", ["1800", "2131"], [15]),
    ("Diners Club", ["36"], [14, 15, 16, 17, 18, 19]),
    ("Diners Club", ["300", "305", "3095", "38", "39"], [14, 16, 17, 18, 19]),
    ("UnionPay", ["62", "81"], [16, 17, 18, 19]),
    ("Maestro", ["5018", "5020", "5038", "5893", "6304", "6759", "6761", "6763"], list(range(12, 20))),
    ("Mir", ["2200", "2204"], [16, 17, 18, 19]),
    ("RuPay", ["60", "82", "508", "353", "356"], [16]),
    ("Verve", ["506099", "506198", "650002", "650027", "507865", "507964"], [16, 18, 19]),
    ("Troy", ["9792"], [16]),
    ("UATP", ["1"], [15]),
    ("Dankort", ["5019"], [16]),
    ("InstaPayment", ["637", "639"], [16]),
    ("InterPayment", ["636"], [16, 17, 18, 19]),
]


def test_every_network_at_every_length_grouped_or_not():
    rng = random.Random(19)
    numbers = [_card(p, n, rng) for _, prefixes, lengths in CARD_NETWORKS for p in prefixes for n in lengths]
    forms = [form for n in numbers for form in (n, _grouped(n, " "), _grouped(n, "-"))]
    texts, out = scrub([f"Card no. {form}, exp 09/27." for form in forms], types=["credit_card"])
    missed = [form for form, text in zip(forms, texts) if text != "Card no. <CREDIT_CARD>, exp 09/27."]
    assert not missed
    assert out.counters["pii.credit_card"] == len(forms) > 300


def test_broken_check_digit_wrong_length_or_unassigned_prefix_is_no_card():
    rng = random.Random(20)
    valid = [_card(p, n, rng) for _, prefixes, lengths in CARD_NETWORKS for p in prefixes for n in lengths]
    broken = [n[:-1] + str((int(n[-1]) + 1) % 10) for n in valid]
    wrong_length = [("4", 14), ("4", 15), ("4", 17), ("4", 18), ("51", 15), ("2720", 17), ("34", 14), ("37", 16)]
    wrong_length += [("3528", 15), ("1800", 16), ("2131", 14), ("17", 13), ("17", 16), ("2200", 15), ("9792", 15)]
    wrong_length += [("5019", 15), ("300", 15), ("506099", 17), ("637", 17), ("508", 17), ("6011", 15)]
    unassigned = [(p, n) for p in ("0", "7", "57", "59", "33", "83", "99", "2100", "978", "979") for n in (13, 16)]
    numbers = broken + [_card(p, n, rng) for p, n in wrong_length + unassigned]
    forms = [form for n in numbers for form in (n, _grouped(n, " "), _grouped(n, "-"))]
    texts = [f"Card no. {form}, exp 09/27." for form in forms]
    assert scrub(texts, types=["credit_card"])[0] == texts


def test_card_look_alikes_in_sentences_are_kept():
    # each passes Luhn: the issuer table (fractions and URL paths: the boundaries) keeps them
    epoch_ms, order, invoice = _luhn("170000000000"), _luhn("70012345678901"), _luhn("200012345678901")
    isbns, fractions = ["9783161480027", "9791090630000"], ["5382691050147506", "4114080550460080"]
    page = "388213067901331"
    assert luhn_valid([epoch_ms, order, invoice, *isbns, *fractions, page]).all()
    texts = [
        f"ISBN 978-3-16-148002-7 (ISBN-13 {isbns[0]}) and {isbns[1]} are in stock.",
        f'{{"created_at": {epoch_ms}, "updated_at": 1700000000000}}',
        f"Your order {order} shipped; tracking 9400111899223197428490.",
        f"Invoice {invoice} was paid on 2023-11-14.",
        f"p = 1.{fractions[0]} and 3.{fractions[1]} in the table",
        f"see www.facebook.com/pages/p/{page} for more",
    ]
    assert scrub(texts)[0] == texts


def test_private_ips_can_be_replaced_on_request():
    assert scrub(["lan 192.168.1.20 here"], public_ips_only=False)[0] == ["lan <IP_ADDRESS> here"]


def test_counters_changed_and_placeholders():
    texts, out = scrub(
        ["a@b.com and c@d.org", "nothing here", "call +1 415 555 2671", "4111111111111111 x@y.de"],
        placeholders={"email": "[email]"},
    )
    assert texts == ["[email] and [email]", "nothing here", "call <PHONE>", "<CREDIT_CARD> [email]"]
    assert out.changed == 3
    assert out.counters["pii.email"] == 3
    assert out.counters["pii.phone"] == 1
    assert out.counters["pii.credit_card"] == 1
    assert out.counters["pii.ssn"] == 0


def test_only_configured_types():
    texts, out = scrub(["a@b.com 93.184.216.34"], types=["ip"])
    assert texts == ["a@b.com <IP_ADDRESS>"] and set(out.counters) == {"pii.ip"}


def test_unknown_type_names_the_nearest():
    with pytest.raises(ValueError, match="did you mean 'email'"):
        Pii.Options(types=["emial"])
    with pytest.raises(ValueError, match="phone"):
        Pii.Options(placeholders={"phon": "x"})


def test_hard_input():
    emoji = "😀 " * 1000 + "mail me: a@b.com 😀"
    texts, out = scrub(
        ["", None, "   \n\t ", emoji, "中文没有空格联系邮箱test@example.cn谢谢", "\ufdd0odd\ufdd1 a@b.com"]
    )
    assert texts[:3] == ["", None, "   \n\t "]
    assert texts[3].endswith("mail me: <EMAIL> 😀")
    assert texts[4] == "中文没有空格联系邮箱<EMAIL>谢谢"
    assert texts[5] == "\ufffdodd\ufffd <EMAIL>"  # the stage's own marks cannot be faked
    assert out.changed == 3


def test_ten_megabyte_lines_do_not_blow_up():
    digits = "1234567890 " * 950_000  # ~10 MB of number groups; a 10-digit run led by 1 is no phone
    letters = "a" * 10_000_000
    texts, _ = scrub([digits, letters + "@example.com", letters])
    assert texts == [digits, "<EMAIL>", letters]


def test_luhn_and_mod97_vectorised():
    assert luhn_valid(["4111111111111111", "4111111111111112", "79927398713", "0"]).tolist() == [
        True,
        False,
        True,
        True,
    ]
    assert mod97(["3214282912345698765432161182", "97", "0", "12345"]).tolist() == [1, 0, 0, 12345 % 97]
    assert isinstance(luhn_valid([]), np.ndarray)


def _presidio(shared_data, limit=None):
    rows = []
    with gzip.open(shared_data / "pii" / "presidio_tests_generated_large.jsonl.gz", "rt") as f:
        for line in f:
            rows.append(json.loads(line))
            if limit and len(rows) >= limit:
                break
    return rows


def _assert_floors(table, floor):
    for name, c in table.items():
        if c["gold"]:
            assert c["tp_gold"] / c["gold"] >= floor, (name, c)
        if c["pred"]:
            assert c["tp_pred"] / c["pred"] >= floor, (name, c)


def test_presidio_fast_slice(shared_data):
    table = score(_presidio(shared_data, limit=600), Pii(Pii.Options(public_ips_only=False)))
    assert sum(c["gold"] for c in table.values()) > 100
    _assert_floors(table, 0.93)


@pytest.mark.slow
def test_presidio_full(shared_data):
    _assert_floors(score(_presidio(shared_data), Pii(Pii.Options(public_ips_only=False))), 0.95)


@pytest.mark.slow
def test_debian_changelogs_have_no_ip_false_positives(shared_data):
    with gzip.open(shared_data / "pii" / "debian_changelog_copyright.jsonl.gz", "rt") as f:
        texts = [json.loads(line)["text"] for line in f]
    found = Pii(Pii.Options(types=["ip"])).find(texts)
    hits = [t[s:e] for t, spans in zip(texts, found) for s, e, _ in spans]
    assert len(hits) <= 2, hits


def _texts(path, limit):
    with gzip.open(path, "rt") as f:
        return [json.loads(line)["text"] for _, line in zip(range(limit), f)]


@pytest.mark.parametrize(
    "kind, corpus",
    [
        ("web", "pii/web_pii_candidates.jsonl.gz"),
        ("web", "pii/presidio_tests_generated_small.jsonl.gz"),
        ("web", "web/dolma_ccmain_20190717_00140.jsonl.gz"),
        ("code", "code/js_usr_lib_node_modules.jsonl.gz"),
        ("code", "pii/presidio_tests_generated_small.jsonl.gz"),
        ("math", "pii/presidio_tests_generated_small.jsonl.gz"),
    ],
)
def test_the_rare_types_first_pass_finds_what_each_types_own_pass_finds(shared_data, kind, corpus):
    """The rare types scan only the documents one shared pass flags: the same spans as
    when each scans every document, on real text that holds every type."""
    from stages.pii import stage as pii_stage

    pii = Pii(Pii.Options())
    assert pii.rare_scan[kind] is not None
    texts = _texts(shared_data / corpus, 1500)
    with_pass = pii.find(texts, kind)
    own_passes = Pii(Pii.Options())
    own_passes.rare_scan = dict.fromkeys(own_passes.rare_scan)  # every type scans every row
    assert own_passes.find(texts, kind) == with_pass
    column = pa.array(texts, pa.large_string())
    union = set()
    for pii_type in pii.types_by_kind[kind]:
        if not pii_type.common:
            union |= set(pii_stage._flagged(column, pii_type.scan).tolist())
    assert set(pii_stage._flagged(column, pii.rare_scan[kind]).tolist()) == union
    assert sum(map(len, with_pass)) > 0
