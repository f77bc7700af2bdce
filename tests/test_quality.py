"""Unit tests of the ``quality`` stage on small hand-made documents: each rule fires on
the case built for it (and names itself), good prose passes, C4 rewrites lines, code and
math get their own rules, and hard inputs (empty, blank, emoji, CJK, Thai, a 10 MB line)
neither crash nor misfire."""

from __future__ import annotations

import gzip
import itertools
import json
import string

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipeline.text.char_tables import SP_DOT_AFTER, SP_ICON, SP_PREFIX, SP_SUFFIX, kernel_tables, tables
from stages.quality import QualityStage
from stages.quality.chunk_memo import chunk_memo
from stages.quality.early_stop import rejected
from stages.quality.rules import GREATER, LESS, Rule, rule_table
from stages.quality.signals import TEXT_CHARS
from stages.quality.word_splitter import split_words

GROUPS = ("gopher_repetition", "gopher_quality", "c4", "fineweb")

PROSE = (
    "The committee met on Tuesday to discuss the budget for the coming year. "
    "Members agreed that the library should have longer opening hours, and that the "
    "park near the river needs new benches. The chair thanked everyone for their work "
    "and said that the town would publish the full minutes with the final figures. "
    "Several residents asked questions about parking, and the clerk promised to answer "
    "them in writing before the next meeting of the council."
)
PROSE2 = (
    "After the vote, a small group of volunteers stayed behind to plan the autumn fair. "
    "They want to invite local bakers, a brass band and the primary school choir, which "
    "won a regional prize in spring. Tickets will be cheap so that families can come, and "
    "any profit goes to repairing the roof of the old chapel on the hill."
)
GOOD = PROSE + "\n" + PROSE2


def run(texts, source="web", **options):
    return run_with(QualityStage(QualityStage.Options(**options)), texts, source)


def judging_everything(**options):
    """A stage whose web kernel computes every signal of a page, also past the Gopher rule
    that drops it (no early stop: an empty rule table)."""
    stage = QualityStage(QualityStage.Options(**options))
    stage._gopher_rules = rule_table([])
    return stage


def run_with(stage, texts, source="web"):
    batch = pa.RecordBatch.from_pydict(
        {"id": [str(i) for i in range(len(texts))], "text": texts, "source": [source] * len(texts)}
    )
    return stage.process(batch, source)


def only(group, **options):
    return {**{g: g == group for g in GROUPS}, **options}


def reasons(texts, source="web", **options):
    return run(texts, source, **options).drop_reason.to_pylist()


def words(text, memo=None):
    """spaCy's words of ``text``; ``memo``: a ``chunk_memo`` to share between calls (else a fresh one)."""
    T = kernel_tables(tables())
    buf = np.frombuffer(text.encode(), np.uint8)
    n = len(buf) + 1
    s, e, a, b = (np.empty(n, np.int32) for _ in range(4))
    k = split_words(T, buf, 0, len(buf), s, e, a, b, chunk_memo() if memo is None else memo)
    return [bytes(buf[s[i] : e[i]]).decode() for i in range(k)]


# ---------------------------------------------------------------- word splitting (spaCy English)


def test_words_follow_spacy_english():
    # Expected lists are what spacy.blank("en") (3.8) gives, as datatrove uses it.
    assert words("Hello, world! Don't you think it's 3.5 dollars... e-mail me at a@b.com #tag") == [
        "Hello", ",", "world", "!", "Do", "n't", "you", "think", "it", "'s", "3.5", "dollars", "...",
        "e", "-", "mail", "me", "at", "a@b.com", "#", "tag",
    ]  # fmt: skip
    assert words('(see http://x.com/a). "quoted" 5km US$5 end.The U.S. Mr. wed a--b') == [
        "(", "see", "http://x.com/a", ")", ".", '"', "quoted", '"', "5", "km", "US$", "5",
        "end", ".", "The", "U.S.", "Mr.", "we", "d", "a", "--", "b",
    ]  # fmt: skip
    # spaCy's second pass re-merges special cases inside a chunk.
    assert words("Co.Co a): b x [: y") == ["Co.", "Co", "a", "):", "b", "x", "[:", "y"]
    assert words("") == [] and words(" \n\t ") == []


def test_letters_then_a_mark_split_as_spacy_does():
    # The splitter's fast path for letters + one of , ; : ! ? ) " . (spaCy 3.8's answers).
    assert words('Id, it. Mr. Yeah, US. AB. ok.) a:b cannot. Cannot, wed! x) "x" end.') == [
        "I", "d", ",", "it", ".", "Mr.", "Yeah", ",", "US", ".", "AB", ".", "ok", ".", ")", "a", ":", "b",
        "can", "not", ".", "Can", "not", ",", "we", "d", "!", "x", ")", '"', "x", '"', "end", ".",
    ]  # fmt: skip
    # What the fast path relies on in spaCy's character classes.
    flags = tables().flags
    letters = [ord(c) for c in string.ascii_letters]
    assert not any(flags[c] & (SP_PREFIX | SP_SUFFIX | SP_ICON) for c in letters)
    assert all(flags[ord(c)] & SP_SUFFIX for c in ',;:!?)"')
    assert all(flags[ord(c)] & SP_DOT_AFTER for c in string.ascii_lowercase)


def test_a_lone_character_is_one_word_and_two_go_the_long_way():
    # The splitter's fast path for chunks of one character, ASCII or not; a chunk of two
    # (spaCy 3.8's answers) is split by the rules.
    assert words("= { ( . \u2212 \u00e9 \U0001f600 ;) .) (a ,, \u2212\u2212 \u00e9!") == [
        "=", "{", "(", ".", "\u2212", "\u00e9", "\U0001f600", ";)", ".", ")", "(", "a", ",", ",",
        "\u2212\u2212", "\u00e9", "!",
    ]  # fmt: skip


def test_every_space_python_knows_ends_a_word_and_a_slice_splits_as_its_text_alone():
    # The splitter reads a chunk's leading ASCII letters in a loop of their own; what ends
    # them is any str.isspace character, one byte or several, or the slice's end.
    assert words("ab\u00a0cd\u2003ef\u3000gh\x1cij\x85kl \t\nmn") == ["ab", "cd", "ef", "gh", "ij", "kl", "mn"]
    assert words("caf\u00e9\u00a0x") == ["caf\u00e9", "x"]
    text = "Hello, wor\u00a0ld"
    T = kernel_tables(tables())
    buf = np.frombuffer(("xx" + text + "yy").encode(), np.uint8)  # letters on both sides of the slice
    s, e, a, b = (np.empty(len(buf) + 1, np.int32) for _ in range(4))
    k = split_words(T, buf, 2, 2 + len(text.encode()), s, e, a, b, chunk_memo())
    assert [bytes(buf[s[i] : e[i]]).decode() for i in range(k)] == words(text) == ["Hello", ",", "wor", "ld"]


# ---------------------------------------------------------------- Gopher quality


def test_good_prose_passes_every_web_rule():
    out = run([GOOD])
    assert out.drop_reason.to_pylist() == [None]
    for column in ("gq_words", "gr_top_2gram", "c4_sentences", "fw_list_ratio", "no_space_frac"):
        assert column in out.batch.schema.names


@pytest.mark.parametrize(
    "text, reason",
    [
        ("the cat sat on the mat.", "word_count"),
        (" ".join(["incomprehensibilities"] * 60) + " the and", "mean_word_length"),
        (PROSE + " " + "#tag " * 12, "hash_ratio"),
        (PROSE + " " + "wait... " * 12, "ellipsis_ratio"),
        ("\n".join(f"- item {w} of the list" for w in PROSE.split()[:40]), "bullet_lines"),
        ("\n".join([f"{x}..." for x in PROSE.split(". ")[:4]] + PROSE2.split(". ")), "ellipsis_lines"),
        (PROSE + " " + " ".join(str(i) for i in range(200)), "alpha_words"),
        (" ".join(f"word{i}" for i in range(80)) + ".", "stop_words"),
    ],
)  # fmt: skip
def test_gopher_quality_rules(text, reason):
    out = run([text], **only("gopher_quality"))
    assert out.drop_reason.to_pylist() == [f"gopher_quality:{reason}"]


def test_gopher_quality_threshold_is_configurable():
    short = "the cat sat on the mat with the dog and that was that."
    assert reasons([short], **only("gopher_quality")) == ["gopher_quality:word_count"]
    assert reasons([short], **only("gopher_quality", gopher_min_doc_words=5)) == [None]


# ---------------------------------------------------------------- Gopher repetition


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty"),
        ("\n\n".join([PROSE[:80]] * 5 + [PROSE]), "dup_para_frac"),
        ("\n".join(["Same line here."] * 4 + [PROSE[:200], PROSE[200:]]), "dup_line_frac"),
        (PROSE + " " + "buy now " * 60, "top_2gram"),
        (PROSE + " " + PROSE, "dup_5gram"),
    ],
)
def test_gopher_repetition_rules(text, reason):
    assert reasons([text], **only("gopher_repetition")) == [f"gopher_repetition:{reason}"]


def test_repetition_signals_are_fractions_of_the_text():
    text = "a b\n\na b\n\nc d"
    out = run([text], **only("gopher_repetition"))
    assert out.batch.column("gr_dup_para_frac")[0].as_py() == pytest.approx(1 / 3)
    assert out.batch.column("gr_dup_para_char_frac")[0].as_py() == pytest.approx(3 / len(text))


def _ngram_reference(text, n):
    """datatrove's two n-gram measures, in plain Python, on our words: the top n-gram's
    characters times its count, and the greedy walk's repeated characters (words joined
    without a separator)."""
    w = words(text)
    grams = [" ".join(w[i : i + n]) for i in range(len(w) - n + 1)]
    counts = {}
    for gram in grams:
        counts[gram] = counts.get(gram, 0) + 1
    top = max(counts.items(), key=lambda item: item[1], default=("", 0))  # first among equals
    seen, repeated, i = set(), 0, 0
    while i < len(w) - n + 1:
        joined = "".join(w[i : i + n])
        if joined in seen:
            repeated, i = repeated + len(joined), i + n
        else:
            seen.add(joined)
            i += 1
    return len(top[0]) * top[1] / len(text), repeated / len(text)


@pytest.mark.parametrize(
    "text",
    [
        "one two three four five six seven eight nine ten",  # all unique: the first n-gram
        "a b a b c a b a b c d e f a b",  # ties and overlapping repeats
        "x ab c yy a bc yy ab c zz a b c",  # equal when joined, different as words
        # 2-grams that repeat followed by ones that do not (the 3- and 4-gram counts skip
        # those places), and the top n-grams at the last places
        "a b c a b d a b c e f a b c e q e f a b c e",
        "p q r s p x p q r s q r s t q r s t",
        # code: repeats inside and across lines, words over and under 16 bytes
        "def f(self):\n    self.assertEqual(value_one, 1)\n    self.assertEqual(value_two, 2)\n"
        "    self.assertEqual(value_one, 1)\n    return self.assertEqual(x, y) or f(self)\n" * 3,
        PROSE + " " + PROSE[:150] + " and " + PROSE[100:300],
    ],
)
def test_ngram_signals_match_a_plain_count(text):
    out = run_with(judging_everything(**only("gopher_repetition")), [text])
    for n in (2, 3, 4):
        top, _ = _ngram_reference(text, n)
        assert out.batch.column(f"gr_top_{n}gram")[0].as_py() == pytest.approx(top, rel=1e-6), n
    for n in (5, 6, 7):
        _, dup = _ngram_reference(text, n)
        assert out.batch.column(f"gr_dup_{n}gram")[0].as_py() == pytest.approx(dup, rel=1e-6), n


# ---------------------------------------------------------------- C4


def test_c4_removes_lines_and_reports_changed():
    lines = [
        "Menu Home About",  # no terminal punctuation
        PROSE,
        "Please enable JavaScript to view the comments.",  # javascript
        "Read our privacy policy before you sign up.",  # policy
        "Too short.",  # fewer than three words
        "The study was published last year.[1] It found that the effect was real.[citation needed]",
    ]
    out = run(["\n".join(lines)], **only("c4"))
    assert out.drop_reason.to_pylist() == [None]
    assert out.changed == 1
    assert out.batch.column("text")[0].as_py() == PROSE + "\n" + (
        "The study was published last year. It found that the effect was real."
    )
    assert out.batch.column("c4_lines_removed")[0].as_py() == 4


@pytest.mark.parametrize(
    "text, reason",
    [
        (PROSE + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.", "lorem_ipsum"),
        (PROSE + "\nThe function returns {a: 1} to the caller.", "curly_bracket"),
        ("One sentence here. Two sentences here.\nNo more than that, really.", "too_few_sentences"),
    ],
)
def test_c4_document_rules(text, reason):
    out = run([text], **only("c4"))
    assert out.drop_reason.to_pylist() == [f"c4:{reason}"]
    assert out.batch.column("text")[0].as_py() == text  # rejected rows keep their text
    assert out.changed == 0


def test_c4_phrases_fold_ascii_case_and_may_be_one_character():
    lines = [GOOD, "See the Terms Of Use below, they apply.", "Costs are 5 % higher this time, sadly."]
    out = run(["\n".join(lines)], **only("c4"), c4_policy_substrings=["terms of use", "%"])
    assert out.drop_reason.to_pylist() == [None]
    assert out.batch.column("text")[0].as_py() == GOOD
    assert out.batch.column("c4_lines_removed")[0].as_py() == 2


def test_c4_sentence_count_follows_sentencizer():
    out = run(["Mr. Smith went home. He slept!\nU.S. troops left. It rained... Then it stopped."], **only("c4"))
    # "Mr." and "U.S." do not end sentences; "..." is not a sentence-ending token.
    assert out.batch.column("c4_sentences")[0].as_py() == 4


# ---------------------------------------------------------------- FineWeb


@pytest.mark.parametrize(
    "text, reason",
    [
        ("\n".join(["A line without a stop"] * 1 + [f"Item number {i} in the list" for i in range(9)]),
         "line_punct_ratio"),
        ("\n".join([f"Short line {i}." for i in range(10)]), "short_line_ratio"),
        (PROSE + "\n" + "This is a repeated line of some length.\n" * 2, "char_dup_ratio"),
        ("\n".join(f"Incomprehensibilities notwithstanding{i}." for i in range(20)), "list_ratio"),
        (" \n\n \t", "empty"),
    ],
)  # fmt: skip
def test_fineweb_rules(text, reason):
    assert reasons([text], **only("fineweb")) == [f"fineweb:{reason}"]


def test_fineweb_judges_the_text_c4_leaves():
    # The nav lines would make FineWeb's line-punctuation ratio fail; C4 removes them first.
    nav = "\n".join(f"Menu item {i}" for i in range(30))
    text = nav + "\n" + GOOD
    assert reasons([text], **only("fineweb")) == ["fineweb:line_punct_ratio"]
    assert reasons([text], gopher_repetition=False, gopher_quality=False) == [None]


# ---------------------------------------------------------------- code and math


def test_code_rules():
    good = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"
    texts = [
        good,
        "x = 1\n" + "y = " + "1 + " * 400 + "1\n",  # a 1,600-character line
        "\n".join(["z = [" + ", ".join(["1"] * 60) + "]"] * 5),  # mean line length > 100
        "(){}[];:\n" * 40,  # few alphanumerics
        "# This file is auto-generated. Do not edit.\n" + good,
        'ICON = "' + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk" * 20 + '"\n',
        "   \n\t\n",
    ]
    got = reasons(texts, source="code")
    assert got == [
        None,
        "code:max_line_length",
        "code:mean_line_length",
        "code:alnum_frac",
        "code:auto_generated",
        "code:encoded_blob",
        "code:empty",
    ]


def test_code_sources_are_configurable():
    text = "# generated automatically\nx = 1\n"
    assert reasons([text], source="scripts") != ["code:auto_generated"]  # web rules
    assert reasons([text], source="scripts", code_sources=["scripts"]) == ["code:auto_generated"]


def test_math_gets_light_rules():
    gsm = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nShe sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
    latex = "\\begin{lemma}\nLet $X$ be a scheme.\n\\end{lemma}\n\\begin{proof}\nOmitted.\n\\end{proof}"
    texts = [gsm, latex, "", "data:image/png;base64," + "A" * 2000, "\n".join(["\\hline"] * 20 + ["x"])]
    assert reasons(texts, source="math") == [None, None, "math:empty", "math:encoded_blob", "math:dup_line_char_frac"]


# ---------------------------------------------------------------- hard input


def test_hard_inputs_do_not_crash():
    texts = ["", " ", "\n\n\n", "\t \u3000 \u2028", "😀😀😀 🎉🎉", "😀" * 500, "\x00\x01", "a" * 5000]
    out = run(texts)
    got = out.drop_reason.to_pylist()
    assert len(got) == len(texts) and all(r is not None for r in got)
    assert got[0] == "gopher_repetition:empty"


def test_text_without_spaces_is_exempt_from_word_rules():
    chinese = (
        "北京是中华人民共和国的首都，也是全国的政治、文化和国际交往中心。\n"
        "这座城市有三千多年的建城史和八百多年的建都史，拥有众多的名胜古迹。\n"
        "故宫、天坛和颐和园每年吸引大量游客前来参观，其中不少人来自海外。\n"
        "城市交通便利，地铁网络覆盖各个城区，公共汽车线路也非常密集。\n"
    )
    thai = (
        "กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทยและเป็นศูนย์กลางทางเศรษฐกิจ\nมีประชากรจำนวนมากและมีสถานที่ท่องเที่ยวที่มีชื่อเสียงหลายแห่ง\n"
    )
    out = run([chinese, thai])
    assert out.drop_reason.to_pylist() == [None, None]
    assert out.batch.column("no_space_frac")[0].as_py() > 0.9
    assert out.batch.column("text")[0].as_py() == chinese  # C4 leaves such text alone
    # datatrove's behaviour (a run of Han characters is one "word") when asked for it:
    assert reasons([chinese], no_space_script_min_frac=2.0) == ["gopher_repetition:top_2gram"]
    assert reasons([chinese], no_space_script_min_frac=2.0, gopher_repetition=False) == ["gopher_quality:word_count"]


def test_sliced_batches_read_the_right_documents():
    texts = ["", GOOD, "the cat."]
    batch = pa.RecordBatch.from_pydict({"id": ["0", "1", "2"], "text": texts, "source": ["web"] * 3})
    stage = QualityStage(QualityStage.Options())
    whole = stage.process(batch, "web").drop_reason.to_pylist()
    parts = [stage.process(batch.slice(i, 1), "web").drop_reason.to_pylist()[0] for i in range(3)]
    assert parts == whole
    large = pa.RecordBatch.from_pydict(
        {"id": ["0"], "text": pa.array(texts[1:2], pa.large_string()), "source": ["web"]}
    )
    out = stage.process(large, "web")
    assert out.drop_reason.to_pylist() == [None] and out.batch.column("text").type == pa.large_string()


def test_ten_megabyte_single_line():
    # A quadratic step anywhere (n-gram tables, line scans, the word splitter) would
    # make this take hours; every pass is linear, so it takes about a second.
    big = ("word " * 2_000_000)[:-1] + "."
    out = run([big])
    assert out.drop_reason.to_pylist() == ["gopher_repetition:top_2gram"]
    # "word word" 1,999,999 times (the last word splits off its "."), 9 characters each
    assert out.batch.column("gr_top_2gram")[0].as_py() == pytest.approx(9 * 1_999_999 / len(big), rel=1e-6)


@pytest.mark.parametrize("source", ["web", "code", "math"])
def test_empty_batch_keeps_the_schema(source):
    out = run([], source=source)
    assert out.batch.num_rows == 0 and len(out.drop_reason) == 0
    assert out.batch.schema.names == run(["x"], source=source).batch.schema.names


def test_pages_a_gopher_rule_drops_are_not_judged_further(shared_data):
    """The web kernel stops at the first Gopher rule that fires: the same reasons, and the
    same signals and rewritten text for every page kept, as judging every page in full
    (an empty rule table); the pages dropped early have no FineWeb signals."""
    texts = []
    for name in ("web/web_gold.jsonl.gz", "code/python_stdlib.jsonl.gz", "math/gsm8k.jsonl.gz"):
        with gzip.open(shared_data / name, "rt") as f:
            texts += [json.loads(line)["text"] for line in itertools.islice(f, 300)]
    batch = pa.RecordBatch.from_pydict({"id": [str(i) for i in range(len(texts))], "text": texts})
    a, b = QualityStage(QualityStage.Options()).process(batch, "web"), judging_everything().process(batch, "web")
    assert a.drop_reason.equals(b.drop_reason) and a.changed == b.changed and a.counters == b.counters
    kept = pc.is_null(a.drop_reason)
    assert a.batch.filter(kept).equals(b.batch.filter(kept))
    dropped_early = pc.and_(pc.is_null(a.batch.column("fw_line_punct_ratio")), pc.is_valid(a.drop_reason))
    assert pc.sum(dropped_early).as_py() > len(texts) // 2
    assert pc.all(pc.starts_with(a.drop_reason.filter(dropped_early), "gopher_")).as_py()


def _symbol_page(head, n_numbers, share):
    """``head``, then distinct numbers (too few words with a letter: gopher_quality drops
    the page) until the characters of ``head`` are just above ``share`` of the page's."""
    numbers = [str(i) for i in range(1000, 1000 + n_numbers)]
    while len(head) / len(" ".join([head] + numbers)) <= share:
        numbers.pop()
    return " ".join([head] + numbers)


@pytest.mark.parametrize(
    "text",
    [
        # all n-grams unique: the top one is the first, just over the top_2gram threshold
        _symbol_page("a" * 30 + " " + "b" * 30, 60, 0.20),
        # and the top 4-gram
        _symbol_page(" ".join(c * 9 for c in "pqrs"), 60, 0.16),
        # a 2-gram of long words three times, the rest unique
        _symbol_page(" ".join(["x" * 25 + " " + "y" * 25] * 3), 200, 0.20),
    ],
)
def test_a_top_ngram_rule_names_the_reason_before_a_later_rule_that_fires_too(text):
    """The kernel judges the rules after the top n-grams first only where a bound shows
    that none of them fires (``word_counts``): on these pages one fires, just, and a later
    rule too, so the reason is the top n-gram's, as when every signal is computed."""
    expected = run_with(judging_everything(), [text]).drop_reason.to_pylist()
    assert expected[0].startswith("gopher_repetition:top_")
    assert reasons([text]) == expected


def test_a_page_the_kernel_stopped_judging_must_be_dropped_by_a_gopher_rule():
    stage = QualityStage(QualityStage.Options())
    # A table that stops at every page, while the stage's own rules keep good prose.
    stage._gopher_rules = rule_table([Rule("everything", TEXT_CHARS, GREATER, 0)])
    with pytest.raises(RuntimeError, match="stopped judging a page that no Gopher rule drops"):
        run_with(stage, [GOOD])


def test_the_early_stop_never_jumps_a_rule_not_computed_yet():
    rules = rule_table([Rule("a", 0, GREATER, 0.5), Rule("b", 1, LESS, 0.5, words_only=True)])
    assert not rejected(np.array([np.nan, 0.1]), rules, True, 0, 0)  # "a" may still fire, and name the reason
    assert rejected(np.array([0.1, 0.1]), rules, True, 0, 0)
    assert not rejected(np.array([0.1, 0.1]), rules, False, 0, 0)  # "b" is a word rule
    assert rejected(np.array([0.9, np.nan]), rules, True, 0, 0)
    assert rejected(np.array([np.nan, 0.1]), rules, True, 0, 1)  # "a" is known not to fire
    assert not rejected(np.array([0.9, 0.9]), rules, True, 0, 1)
