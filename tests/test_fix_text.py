"""The ``fix_text`` stage: mojibake and HTML entities repaired by ftfy, on the documents
its numba check flags.

What it promises (stages/fix_text.py): real text broken the common ways (UTF-8 read as
Windows-1252 once or twice, or as Latin-1; escaped as HTML once or twice; both) comes back
as it was; clean text, in any script, comes back byte for byte and is rarely even flagged;
the result is what ftfy on every document gives (with the stage's settings), which is the
check's recall; no document is dropped, ``changed`` counts the repaired ones.
"""

from __future__ import annotations

import gzip
import html
import itertools
import json

import ftfy
import ftfy.bad_codecs
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import SHARED_DATA, TEXT_TYPES, make_batch, write_config, write_jsonl

from pipeline.commands.main import main
from pipeline.engine.config import ConfigError, load_config
from stages.fix_text import HTML, MOJIBAKE, FixText, flag, ftfy_config

needs_data = pytest.mark.skipif(SHARED_DATA is None, reason="../shared/data is not present")


def fix(texts: list[str], text_type: pa.DataType = pa.string(), **options):
    return FixText(FixText.Options(**options)).process(make_batch(texts, text_type), "web")


def texts_of(out) -> list[str]:
    return out.batch.column("text").to_pylist()


def flags(texts: list[str], unescape_html: bool | str = "auto") -> list[int]:
    return flag(pa.array(texts), unescape_html).tolist()


def as_cp1252(text: str) -> str:
    """UTF-8 read as Windows-1252: strictly where every byte is defined, else as browsers do
    (the five undefined bytes become C1 controls)."""
    data = text.encode("utf-8")
    try:
        return data.decode("windows-1252")
    except UnicodeDecodeError:
        return data.decode("sloppy-windows-1252")


def as_entities(text: str) -> str:
    """Escaped for HTML, every non-ASCII character as a numeric reference (``&#233;``)."""
    return html.escape(text).replace("&#x27;", "&#39;").encode("ascii", "xmlcharrefreplace").decode("ascii")


def mixed(text: str) -> str:
    """Mixed damage in one document: the text read as Windows-1252 on one line, as HTML
    entities on the next, and both on the third. (Within one line, ftfy does not always
    undo mojibake beside correct text of the same script: "ZWAÅ»YWSZY, że".)"""
    return "\n".join([as_cp1252(text), as_entities(text), html.escape(as_cp1252(text))])


BREAKS = {
    "cp1252-once": as_cp1252,
    "cp1252-twice": lambda t: as_cp1252(as_cp1252(t)),
    "latin-1": lambda t: t.encode("utf-8").decode("latin-1"),
    "html-once": as_entities,  # &#39;, &quot;, &amp;, &#233;
    "html-twice": lambda t: html.escape(as_entities(t)),  # &amp;amp;, &amp;#39;
    "cp1252-then-html": lambda t: html.escape(as_cp1252(t)),
    "mixed": mixed,
}
ORIGINAL = {"mixed": lambda t: "\n".join([t] * 3)}


def read_texts(name: str, limit: int | None = None) -> list[dict]:
    with gzip.open(SHARED_DATA / name, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in itertools.islice(f, limit)]


# --- the check, on the signatures -----------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "caf\u00c3\u00a9",  # é once
        "it\u00e2\u20ac\u2122s",  # ’ once
        "\u00f0\u0178\u02dc\u20ac",  # 😀 once
        "it\u00c3\u00a2\u00e2\u201a\u00ac\u00e2\u201e\u00a2s",  # ’ twice
        "na\u00c3\u00afve\u00e2\u20ac\x9d",  # ” with its undefined last byte kept as a C1 control
        "quote\u00e2\u20ac\ufffd lost",  # the last byte lost
        "voil\u00c3 le travail",  # à whose no-break space became a space
        "a C1 control \x92 alone",
    ],
)
def test_mojibake_signatures_are_flagged(text):
    assert flags([text]) == [MOJIBAKE]


@pytest.mark.parametrize("text", ["Tom &amp; Jerry", "it&#39;s", "&quot;q&quot;", "x &#x2019; y", "a &amp;amp; b"])
def test_entities_are_flagged(text):
    assert flags([text]) == [HTML]


@pytest.mark.parametrize(
    "text",
    [
        "caf\u00e9\u201d, she said",  # an accented letter before a closing quote
        "pak\u00e1\u017e\u201c, a\u010dkoli",  # Czech: a letter-like Windows-1252 character in the middle
        "automatis\u00e9\u00a0\u00bb",  # French spacing before a guillemet
        "DECLARATSIA UNIVERSAL\u00c3 TI",  # capitals, then a space
        "AT&T, R&D, a & b; &nbsp without semicolon",
        "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u4e2d\u6587 \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    ],
)
def test_clean_lookalikes_are_not_flagged(text):
    assert flags([text]) == [0]


def test_html_auto_follows_ftfy_no_entities_from_the_first_line_with_markup_on():
    text = "first &amp; line\n<b>bold</b> &amp;\nlater &amp;"
    assert flags([text]) == [HTML]  # the first line still counts
    assert texts_of(fix([text])) == ["first & line\n<b>bold</b> &amp;\nlater &amp;"]
    markup_first = "<p>a &amp; b</p>\nc &amp; d"
    assert flags([markup_first]) == [0]
    assert texts_of(fix([markup_first])) == [markup_first]
    assert flags([markup_first], unescape_html=True) == [HTML]
    assert texts_of(fix([markup_first], unescape_html=True)) == ["<p>a & b</p>\nc & d"]
    assert flags(["a &amp; b"], unescape_html=False) == [0]


# --- the stage, on hand-made cases ----------------------------------------------------


@pytest.mark.parametrize("text_type", TEXT_TYPES, ids=str)
def test_repairs_rewrite_only_the_broken_rows_and_count_them(text_type):
    clean = ["plain ASCII", "caf\u00e9 \u201cna\u00efve\u201d \u2014 \U0001f600", "\u4e2d\u6587\r\nline"]
    broken = [as_cp1252("It\u2019s a caf\u00e9\r\nsecond line"), "Tom &amp;amp; Jerry&#39;s"]
    out = fix(clean + broken, text_type)
    assert texts_of(out) == [*clean, "It\u2019s a caf\u00e9\r\nsecond line", "Tom & Jerry's"]
    assert out.changed == 2 and out.drop_reason is None
    assert out.batch.column("text").type == text_type
    assert out.counters == {"fix_text.flagged": 2, "fix_text.flagged_mojibake": 1, "fix_text.flagged_html": 1}


def test_flagged_but_nothing_to_fix_is_not_changed():
    out = fix(["&notanentity; here"])
    assert texts_of(out) == ["&notanentity; here"]
    assert (out.changed, out.counters["fix_text.flagged"]) == (0, 1)


def test_formatting_that_normalize_or_the_writer_owns_is_kept():
    # Curly quotes, ligatures, full-width forms, decomposed accents, controls, \r\n: all kept.
    text = "\u201cq\u201d \ufb01 \uff21 e\u0301 \x01 \u001b[31m\r\n" + as_cp1252("caf\u00e9")
    assert texts_of(fix([text])) == ["\u201cq\u201d \ufb01 \uff21 e\u0301 \x01 \u001b[31m\r\ncaf\u00e9"]


def test_fix_encoding_off_leaves_mojibake_and_still_unescapes():
    out = fix([as_cp1252("caf\u00e9") + " &amp;"], fix_encoding=False)
    assert texts_of(out) == ["caf\u00c3\u00a9 &"]
    assert out.counters["fix_text.flagged_mojibake"] == 0


def test_sliced_and_empty_batches():
    batch = make_batch(["x", as_cp1252("\u00e9t\u00e9"), "&amp;", "y"]).slice(1, 2)
    out = FixText(FixText.Options()).process(batch, "web")
    assert texts_of(out) == ["\u00e9t\u00e9", "&"]
    empty = fix([])
    assert (empty.batch.num_rows, empty.changed) == (0, 0)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="unescape_html"):
        FixText.Options(unescape_html="yes")
    with pytest.raises(ValueError, match="nothing"):
        FixText.Options(unescape_html=False, fix_encoding=False)


def test_config_checks_the_options(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [{"id": "1", "text": "x"}])
    config = write_config(
        tmp_path / "c.toml", '[sources.web]\npaths = ["*.jsonl"]\n[[stages]]\nname = "fix_text"\nunescap_html = true\n'
    )
    with pytest.raises(ConfigError, match="unescape_html"):
        load_config(config)


# --- real text --------------------------------------------------------------------------

LANGS = ["fra", "deu", "pol", "ces", "tur", "vie", "rus", "ukr", "ell", "heb", "arb", "hin", "tha", "amh", "kat"]
LANGS += ["cmn", "jpn", "kor", "spa", "por"]


@pytest.fixture(scope="module")
def real_passages() -> list[str]:
    """Three paragraphs of the Declaration in each of 20 languages and scripts, and 40
    web passages that hold quotes, apostrophes or ampersands (what HTML escapes)."""
    by_lang: dict[str, list[str]] = {}
    for record in read_texts("langid/udhr2_paragraphs.jsonl.gz"):
        by_lang.setdefault(record["iso639_3"], []).append(record["text"])
    web = [line for r in read_texts("web/dolma_ccmain_20190717_00140.jsonl.gz", 200) for line in r["text"].split("\n")]
    web = [line for line in web if 80 < len(line) < 2000 and any(ch in line for ch in "'\"&")]
    web = [line for line in web if ftfy.fix_text(line, ftfy_config()) == line][:40]  # not already broken
    return [text for lang in LANGS for text in by_lang[lang][1:4]] + web


@needs_data
@pytest.mark.parametrize("how", list(BREAKS))
def test_real_text_broken_the_common_ways_is_repaired_to_the_original(real_passages, how):
    broken = [BREAKS[how](t) for t in real_passages]
    originals = [ORIGINAL.get(how, str)(t) for t in real_passages]
    assert sum(b != t for b, t in zip(broken, originals)) >= 60
    out = fix(broken)
    assert texts_of(out) == originals
    assert out.changed == sum(b != t for b, t in zip(broken, originals))


@pytest.fixture(scope="module")
def web_sample() -> list[str]:
    """300 CommonCrawl documents and 300 extracted web pages, as they come."""
    return [r["text"] for r in read_texts("web/dolma_ccmain_20190717_00140.jsonl.gz", 300)] + [
        r["text"] for r in read_texts("web/web_gold.jsonl.gz", 300)
    ]


@pytest.fixture(scope="module")
def ftfy_everywhere(web_sample) -> list[str]:
    config = ftfy_config()
    return [ftfy.fix_text(t, config) for t in web_sample]


@needs_data
def test_real_web_documents_come_out_as_ftfy_on_every_document_makes_them(web_sample, ftfy_everywhere):
    out = fix(web_sample)
    assert texts_of(out) == ftfy_everywhere  # the check misses nothing ftfy would repair here
    assert out.changed == sum(a != b for a, b in zip(web_sample, ftfy_everywhere)) > 0  # some are broken


@needs_data
def test_clean_real_web_documents_pass_unchanged_and_mostly_unflagged(web_sample, ftfy_everywhere):
    clean = [t for t, fixed in zip(web_sample, ftfy_everywhere) if t == fixed]
    assert len(clean) > 550
    assert texts_of(fix(clean)) == clean
    assert sum(f != 0 for f in flags(clean)) <= 0.01 * len(clean)  # 2 of 573 when written


@needs_data
def test_real_web_documents_broken_by_hand_are_repaired(web_sample, ftfy_everywhere):
    clean = [t for t, fixed in zip(web_sample[:300], ftfy_everywhere) if t == fixed and not t.isascii()][:60]
    broken = [as_cp1252(t) for t in clean]
    assert all(f == MOJIBAKE for f in flags(broken))
    repaired = texts_of(fix(broken))
    # ftfy works line by line and leaves a line whose damage it finds too faint ("piÄ…tek",
    # "â—‹" alone); the stage does exactly what ftfy does on them.
    assert sum(r == t for r, t in zip(repaired, clean)) >= 0.9 * len(clean)
    assert repaired == [ftfy.fix_text(b, ftfy_config()) for b in broken]


@needs_data
def test_clean_documents_in_other_scripts_pass_unchanged():
    docs = [r["text"][:4000] for r in read_texts("langid/udhr2_docs.jsonl.gz")]
    out = fix(docs)
    after = texts_of(out)
    rewritten = [i for i, (a, b) in enumerate(zip(docs, after)) if a != b]
    # Three translations carry Windows-1252 punctuation read as Latin-1 (C1 controls U+0091,
    # U+0092): those are real damage, and the only documents the stage changes.
    assert len(rewritten) == 3
    assert all(any("\x80" <= ch <= "\x9f" for ch in docs[i]) for i in rewritten)
    assert all(not any("\x80" <= ch <= "\x9f" for ch in after[i]) for i in rewritten)
    assert sum(f != 0 for f in flags(docs)) == 3  # no clean one is even flagged


# --- in a run ---------------------------------------------------------------------------


def test_the_stage_runs_in_prep_run(tmp_path):
    originals = ["It\u2019s a caf\u00e9 \u2014 \u201cna\u00efve\u201d", "Tom & Jerry's \u00e9t\u00e9"]
    records = [
        {"id": "broken-1", "text": as_cp1252(originals[0])},
        {"id": "broken-2", "text": "Tom &amp;amp; Jerry&#39;s " + as_cp1252("\u00e9t\u00e9")},
        {"id": "clean", "text": "Nothing to see here. \u0420\u0443\u0441\u0441\u043a\u0438\u0439."},
    ]
    write_jsonl(tmp_path / "in" / "a.jsonl", records)
    config = write_config(
        tmp_path / "run.toml",
        '[sources.web]\npaths = ["in/*.jsonl"]\n\n[[stages]]\nname = "fix_text"\n\n[[stages]]\nname = "normalize"\n',
    )
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(tmp_path / "out"), "-w", "1"])
    assert result.exit_code == 0, result.output
    docs = pq.read_table(tmp_path / "out" / "docs").to_pylist()
    assert {d["id"]: d["text"] for d in docs} == {
        "broken-1": originals[0],
        "broken-2": originals[1],
        "clean": records[2]["text"],
    }
    stage = json.loads((tmp_path / "out" / "manifest.json").read_text())["stages"]["fix_text"]
    assert (stage["input"], stage["output"], stage["changed"]) == (3, 3, 2)
    assert stage["counters"]["fix_text.flagged"] == 2
