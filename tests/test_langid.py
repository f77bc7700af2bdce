"""The ``langid`` stage: offline model, labels and drop reasons, hard input, accuracy floors."""

from __future__ import annotations

import socket

import pyarrow as pa
import pytest
from conftest import REPO

from benchmarks.langid import TOP20, UDHR_TOP20, lingua_sentences, pooled, udhr_accuracy
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
    _, _, reasons = run(text, languages=lang, min_score=threshold)
    assert reasons == ["lang:low-score"]
    _, _, reasons = run(text, languages=lang, min_score=0.0)
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
