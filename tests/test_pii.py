"""The ``pii`` stage: each type's positives and look-alike negatives, counters, hard input,
and precision/recall floors on presidio's generated set."""

from __future__ import annotations

import gzip
import json
import socket

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.pii import score
from stages.pii import Pii
from stages.pii_patterns import luhn_valid, mod97


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
