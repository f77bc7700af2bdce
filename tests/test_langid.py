"""The ``langid`` stage: offline model, labels and drop reasons, hard input, accuracy floors."""

from __future__ import annotations

import socket

import pyarrow as pa
import pytest
from conftest import REPO, SHARED_DATA, write_config, write_jsonl

from benchmarks.langid import TOP20, UDHR_TOP20, lingua_sentences, pooled, udhr_accuracy
from pipeline.engine.config import ConfigError, load_config
from stages.langid import LangId, bundled_model_path, load_model


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any attempt to open a socket fails the test: the model must be local."""

    def refuse(*args, **kwargs):
        raise AssertionError("langid tried to use the network")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def run(texts, source="web", **options):
    batch = pa.record_batch(
        {
            "id": pa.array([str(i) for i in range(len(texts))]),
            "text": pa.array(texts, pa.string()),
            "source": pa.array([source] * len(texts)),
        }  # fmt: skip
    )
    out = LangId(LangId.Options(**options)).process(batch, source)
    return out.batch.column("lang").to_pylist(), out.batch.column("lang_score"), out.drop_reason.to_pylist()


def test_model_loads_offline_from_the_bundled_file():
    load_model.cache_clear()
    path = bundled_model_path()
    assert path.name == "lid.176.ftz" and path.parent == REPO / "stages" / "models"
    model = load_model(str(path))
    assert model.predict("this is plainly an english sentence\n", 1, 0.0, "replace")[0][1] == "__label__en"


def test_keeps_wanted_languages_and_names_the_others():
    texts = [
        "The committee published its annual report on the state of public libraries today.",
        "Der Ausschuss hat heute seinen Jahresbericht über die öffentlichen Bibliotheken veröffentlicht.",
        "Le comité a publié aujourd'hui son rapport annuel sur l'état des bibliothèques publiques.",
    ]
    lang, score, reasons = run(texts)
    assert lang == ["en", "de", "fr"]
    assert score.type == pa.float32()
    assert all(0.65 <= s <= 1.0 for s in score.to_pylist())
    assert reasons == [None, "lang:de", "lang:fr"]
    _, _, reasons = run(texts, languages=["en", "fr"])
    assert reasons == [None, "lang:de", None]


def test_low_score_is_its_own_reason():
    text = ["Hotel Taxi Bar Restaurant"]
    lang, score, _ = run(text, languages=[])
    threshold = min(1.0, float(score.to_pylist()[0]) + 0.01)
    _, _, reasons = run(text, languages=lang, min_score=threshold, groups={})
    assert reasons == ["lang:low-score"]
    _, _, reasons = run(text, languages=lang, min_score=0.0, groups={})
    assert reasons == [None]


def test_empty_language_list_labels_but_keeps_everything():
    lang, _, reasons = run(["Ceci est une phrase en français.", "Dies ist ein deutscher Satz."], languages=[])
    assert lang == ["fr", "de"] and reasons == [None, None]


def test_code_is_skipped_by_default_and_on_request():
    lang, score, reasons = run(["def f(x):\n    return x + 1\n"], source="code")
    assert lang == [None] and score.to_pylist() == [None] and reasons == [None]
    lang, _, reasons = run(
        ["Der Ausschuss hat heute seinen Bericht veröffentlicht."], source="web", skip_sources=["web"]
    )
    assert lang == [None] and reasons == [None]
    lang, _, _ = run(["This is an English comment in a code file."], source="code", skip_sources=[])
    assert lang == ["en"]


def test_text_without_letters_gets_no_label():
    lang, score, reasons = run(["", "   \n\t  ", "😀🎉👍", "12345 678", None])
    assert lang == [None] * 5
    assert score.to_pylist() == [0.0] * 5
    assert reasons == ["lang:low-score"] * 5


def test_scripts_without_spaces():
    lang, _, _ = run(
        [
            "这是一个关于中国城市发展的新闻报道，记者采访了很多当地居民。",
            "传统中医治高血压必须辨证论治。",  # Han only: the raw model says Japanese
            "これは日本の都市の発展についてのニュース記事です。",
            "นี่คือข่าวเกี่ยวกับการพัฒนาเมืองในประเทศไทยและผู้คนที่อาศัยอยู่ที่นั่น",
        ],
        languages=[],
    )
    assert lang == ["zh", "zh", "ja", "th"]


def test_newlines_do_not_cut_the_text():
    # fastText reads one line: without newline handling only "Title" would be seen
    lang, _, _ = run(["Titel\n" + "Der Ausschuss hat heute seinen Jahresbericht veröffentlicht. " * 5], languages=[])
    assert lang == ["de"]


def test_ten_megabyte_single_line():
    lang, score, _ = run(["The quick brown fox jumps over the lazy dog. " * 230_000])
    assert lang == ["en"] and score.to_pylist()[0] > 0.65


def test_options_are_checked():
    with pytest.raises(ValueError):
        LangId.Options(min_score=1.5)
    with pytest.raises(FileNotFoundError):
        LangId.Options(model_path="/nonexistent/lid.bin")


@pytest.mark.parametrize(
    "toml, message",
    [
        ('languages = ["english"]', "languages: 'english' is not a language label of lid.176.ftz; did you mean 'en'?"),
        ('languages = ["en", "Deutsch", "hbs"]', "languages: 'Deutsch' is not a language label"),
        ('languages = ["en", "frnch"]', "did you mean 'fr'?"),
        ("min_scores = {hbs = 0.3}", "min_scores: 'hbs' is not a language label"),
        ('groups = {nordic = ["no", "nn", "swedish"]}', "groups: 'swedish' is not a language label"),
    ],
)
def test_a_label_no_model_gives_is_refused_when_the_config_is_read(tmp_path, toml, message):
    """A label nothing gives kept nothing (languages) or changed nothing (min_scores, groups)."""
    write_jsonl(tmp_path / "in.jsonl", [{"id": "1", "text": "The quick brown fox jumps over the lazy dog."}])
    config = write_config(
        tmp_path / "c.toml", f'[sources.web]\npaths = ["in.jsonl"]\n[[stages]]\nname = "langid"\n{toml}\n'
    )
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_labels_the_second_opinion_gives_are_valid_and_all_names_no_label():
    assert LangId.Options(languages=["zu", "en"]).languages == ["zu", "en"]  # CLD2 labels Zulu; lid.176 does not
    with pytest.raises(ValueError, match="'zu' is not a language label"):
        LangId.Options(languages=["zu"], second_opinion="")
    assert LangId.Options(languages="all", groups={}).languages == "all"


def test_sentence_accuracy_fast_slice(shared_data):
    acc = lingua_sentences(shared_data, per_lang=40)
    assert pooled(acc, TOP20) >= 0.97


@pytest.mark.slow
def test_sentence_accuracy_top20(shared_data):
    acc = lingua_sentences(shared_data, per_lang=None)
    assert pooled(acc, TOP20) >= 0.98
    # measured: cs 0.904, id 0.929 (vs ms), sv 0.962; the other 17 are >= 0.985
    assert all(acc[k][0] / acc[k][1] >= 0.89 for k in TOP20)
    assert sum(acc[k][0] / acc[k][1] >= 0.97 for k in TOP20) >= 17


@pytest.mark.slow
def test_document_accuracy_udhr(shared_data):
    docs = udhr_accuracy(shared_data, "udhr2_docs.jsonl.gz")
    assert pooled(docs, UDHR_TOP20) >= 0.99
    paragraphs = udhr_accuracy(shared_data, "udhr2_paragraphs.jsonl.gz")
    assert pooled(paragraphs, UDHR_TOP20) >= 0.99


def test_the_runner_up_is_kept_as_columns():
    batch = pa.record_batch(
        {"id": ["0"], "text": ["Ovo je rečenica na hrvatskom jeziku o gradu i moru."], "source": ["web"]}
    )
    out = LangId(LangId.Options(languages=[])).process(batch, "web").batch
    first, second = out.column("lang")[0].as_py(), out.column("lang_2")[0].as_py()
    assert {first, second} <= {"hr", "sr", "bs", "sh", "sl"} and first != second
    assert out.column("lang_score")[0].as_py() >= out.column("lang_2_score")[0].as_py() > 0


def test_options_name_all_and_per_language():
    assert LangId.Options().min_score == "per-language"
    for bad in ({"languages": "every"}, {"min_score": "auto"}, {"min_scores": {"hr": 2.0}}):
        with pytest.raises(ValueError):
            LangId.Options(**bad)


def test_english_keeps_finewebs_threshold_and_behaviour():
    stage = LangId(LangId.Options())
    assert stage.thresholds["en"] == 0.65 and stage.options.languages == ["en"]
    text = ["Hotel Taxi Bar Restaurant"]  # a low-scoring label, never English at 0.65
    assert run(text)[2] == run(text, min_score=0.65, groups={})[2]


@pytest.fixture(scope="module")
def croatian_and_norwegian():
    from benchmarks.langid import lingua_documents

    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    documents = lingua_documents(SHARED_DATA, half=1)
    return {lang: documents[lang] for lang in ("hr", "no", "nn", "sl", "en", "de")}


def test_close_languages_are_no_longer_dropped_whole(croatian_and_norwegian):
    """The single 0.65 drops nearly every 1-2 KB Croatian document (the model splits its
    probability with Serbian and Bosnian); per-language thresholds and groups keep them."""
    for lang, texts in croatian_and_norwegian.items():
        old_lang, _, old = run(texts, languages="all", min_score=0.65, groups={}, second_opinion="")
        new_lang, _, new = run(texts, languages="all")
        right_old = sum(r is None and got == lang for r, got in zip(old, old_lang)) / len(texts)
        right_new = sum(r is None and got == lang for r, got in zip(new, new_lang)) / len(texts)
        assert right_new >= right_old, lang
        assert right_new >= 0.9, (lang, right_new)
        if lang == "hr":
            assert right_old < 0.2


def test_a_group_named_in_languages_keeps_its_members(croatian_and_norwegian):
    texts = croatian_and_norwegian["hr"][:10] + croatian_and_norwegian["de"][:5]
    _, _, reasons = run(texts, languages=["hbs"])
    assert reasons[:10] == [None] * 10 and reasons[10:] == ["lang:de"] * 5


@pytest.mark.parametrize("content", ["", "{not json", '{"thresholds": {"hr": {"threshold": 7}}}', '{"rule": 1}'])
def test_a_damaged_threshold_table_is_a_clear_error(tmp_path, content):
    from stages.langid.thresholds import per_language

    table = tmp_path / "lid.176.thresholds.json"
    table.write_text(content)
    with pytest.raises(ValueError, match="reinstall prep"):
        per_language(table)


def test_second_opinion_names_unsure_documents_and_picks_close_members():
    from stages.langid.second_opinion import settle

    labels = ["en", "de", "hr", "hr", "ms", None, "fr"]
    below = [True, True, False, False, False, False, False]
    asked: list[str] = []
    answers = {"t0": "so", "t1": "en", "t2": "bs", "t3": "sl", "t4": "id"}
    final, vouched = settle(labels, below, pa.array([f"t{i}" for i in range(7)]), 0, lambda t: [answers[x] for x in t])
    # unsure and not English: the second label, kept; unsure but English to both: FineWeb's rule;
    # a confusable set: the member, never a label outside the set; no letter or sure: not asked
    assert final == ["so", "de", "bs", "hr", "id", None, "fr"]
    assert vouched == [True, False, False, False, False, False, False]
    final, vouched = settle(labels, below, pa.array(["x"] * 7), 0, lambda t: asked.extend(t) or [None] * len(t))
    assert final == labels and not any(vouched) and len(asked) == 5


def test_cld2_reads_control_characters_and_says_when_it_is_unsure():
    from stages.langid.second_opinion import cld2_labels

    french = "Aujourd\x92hui nous sommes allés au marché acheter du pain, du fromage et des légumes frais."
    assert cld2_labels([french, "zz qq xx 123"]) == ["fr", None]


def test_unknown_second_opinion_is_an_option_error():
    with pytest.raises(ValueError, match="second_opinion"):
        LangId.Options(second_opinion="lingua")


@pytest.fixture(scope="module")
def lid176_misses():
    from benchmarks.langid import lingua_documents

    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    documents = lingua_documents(SHARED_DATA, half=1)
    return {lang: documents[lang] for lang in ("so", "yo", "bs", "hr", "en")}


def test_second_opinion_recovers_what_lid176_misses_and_leaves_english(lid176_misses):
    """lid.176 calls 1-2 KB Somali documents English or Finnish and Yoruba ones Irish, all
    unsure: CLD2 names them. English decisions do not change, with every language kept or English only."""
    right = {}
    for choice in ("", "cld2"):
        for lang, texts in lid176_misses.items():
            labels, _, reasons = run(texts, languages="all", second_opinion=choice)
            right[choice, lang] = sum(r is None and got == lang for r, got in zip(reasons, labels)) / len(texts)
    for lang in ("so", "yo"):
        assert right["", lang] < 0.2 and right["cld2", lang] >= 0.9, lang
    assert right["cld2", "bs"] > right["", "bs"] and right["cld2", "hr"] >= 0.97
    assert right["cld2", "en"] == right["", "en"] == 1.0
    texts = lid176_misses["en"] + lid176_misses["so"]
    kept = [[r is None for r in run(texts, second_opinion=c)[2]] for c in ("", "cld2")]
    assert kept[0] == kept[1] and sum(kept[0]) == len(lid176_misses["en"])
