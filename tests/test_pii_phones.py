"""Phone numbers as people write them, and the numbers beside them that are not."""

from __future__ import annotations

import pytest

from stages.pii import Pii

STAGE = Pii(Pii.Options())


def phones(text: str) -> list[str]:
    return [text[s:e] for s, e, kind in STAGE.find([text])[0] if kind == "phone"]


@pytest.mark.parametrize(
    "text, number",
    [
        ("Mobile: 723 813 266", "723 813 266"),
        ("How can we reach you? You can call 73 448 266", "73 448 266"),
        ("322 327 102 office", "322 327 102"),
        ("Telefon: 030 1234567", "030 1234567"),
        ("Tél. 06 12 34 56 78", "06 12 34 56 78"),
        ("teléfono 91 123 45 67", "91 123 45 67"),
        ("電話 03-1234-5678", "03-1234-5678"),
        ("Ring 020 7946 0958 any time", "020 7946 0958"),
        ("the office line is (415) 555-2671 ext. 12", "(415) 555-2671 ext. 12"),
        ("dial +44 20 7946 0958", "+44 20 7946 0958"),
        ("or 0044 20 7946 0958", "0044 20 7946 0958"),
        ("US: 415-555-2671 or 415.555.2671", "415-555-2671"),
        ("fax 0212 555 12 34", "0212 555 12 34"),
    ],
)
def test_numbers_written_the_ways_people_write_them(text, number):
    assert number in phones(text)


@pytest.mark.parametrize(
    "text",
    [
        "Miss Ashley Kvamme Apt. 722 20 40 rue Victor Hugo",
        "Mrs. Karen Thorkildsen Suite 680 36 4022 Oakridge Lane",
        "Mrs. Brittany Voronov Apt. 338 32 216 Menzies Street",
        "Cite De L'Interieur 13 70486",
        "Rua das Flores, 75534-030 Goiânia",
        "Rua Direita 12, 3610-114 Tarouca",
        "Washington, DC 20500-0003",
        "London SW1A 1AA, 10 Downing Street",
        "born 1990-05-17, released 2019-2020",
        "version 2.14.1, build 4.8.12",
        "population 1 234 567 and 12.345.678 euros",
        "Add 02-687535-fix-missing-ldflags.patch",
        "the price is $1 299 999",
        "3 + 415 555 2671 = x",
    ],
)
def test_look_alikes_are_not_phones(text):
    assert phones(text) == []
