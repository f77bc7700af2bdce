"""The ``url_filter`` and ``bad_words`` stages: hosts and sub-domains, allowlists, whole-word
matching, IDN hosts, ports and userinfo, missing and malformed URLs, nested fields, C4's
bad-words rule against its own regex, and both through a full ``prep run``."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import write_config, write_jsonl

from pipeline.commands.main import main
from pipeline.engine.config import ConfigError, load_config
from stages.url_filter.bad_words import BadWords
from stages.url_filter.lists import bundled_ldnoobw_en
from stages.url_filter.stage import UrlFilter
from stages.url_filter.urls import split_url


def lists(tmp_path: Path, **files: list[str]) -> dict[str, str]:
    out = {}
    for name, lines in files.items():
        path = tmp_path / f"{name}.txt"
        path.write_text("\n".join(lines) + "\n")
        out[name] = str(path)
    return out


def url_batch(urls: list, **extra) -> pa.RecordBatch:
    n = len(urls)
    return pa.record_batch(
        {
            "id": [str(i) for i in range(n)],
            "text": ["x"] * n,
            "source": ["web"] * n,
            "url": pa.array(urls, pa.string()),
            **extra,
        }
    )


def judge(urls: list, **options) -> tuple[list, list, dict]:
    out = UrlFilter(UrlFilter.Options(**options)).process(url_batch(urls), "web")
    details = [json.loads(d) if d else None for d in out.detail.to_pylist()]
    return out.drop_reason.to_pylist(), details, out.counters


def test_a_listed_domain_blocks_itself_and_its_sub_domains_not_look_alikes(tmp_path):
    f = lists(tmp_path, block=["# UT1 style", "", "example.com", "bad.example.org"])
    urls = [
        "http://example.com/",
        "https://www.shop.example.com/a",
        "http://notexample.com/",
        "http://example.com.evil.net/",
        "http://bad.example.org/x",
        "http://x.bad.example.org/",
        "http://example.org/",
    ]
    reasons, details, _ = judge(urls, blocklists=[f["block"]])
    assert reasons == ["blocklist", "blocklist", None, None, "blocklist", "blocklist", None]
    assert details[1] == {"list": "block.txt", "entry": "example.com", "host": "www.shop.example.com"}
    assert details[5]["entry"] == "bad.example.org"


def test_allowlist_wins_and_several_lists_are_named_apart(tmp_path):
    (tmp_path / "adult").mkdir()
    (tmp_path / "gambling").mkdir()
    (tmp_path / "adult" / "domains").write_text("example.com\n")
    (tmp_path / "gambling" / "domains").write_text("casino.test\n")
    f = lists(tmp_path, allow=["news.example.com"], words=["xxx"])
    blocks = [str(tmp_path / "adult" / "domains"), str(tmp_path / "gambling" / "domains")]
    urls = [
        "http://news.example.com/xxx",
        "http://a.news.example.com/",
        "http://shop.example.com/",
        "http://casino.test/",
    ]
    reasons, details, counters = judge(urls, blocklists=blocks, allowlists=[f["allow"]], banned_words=[f["words"]])
    assert reasons == [None, None, "blocklist", "blocklist"]
    assert [d["list"] for d in details[2:]] == ["adult/domains", "gambling/domains"]
    assert counters["url_filter.allowlisted"] == 2


def test_banned_words_match_whole_url_words_unless_substring(tmp_path):
    f = lists(tmp_path, words=["XXX", "live cams"])
    urls = [
        "http://maxxximus.com/",
        "http://www.xxx-videos.test/",
        "http://shop.test/Products/XXX_large",
        "http://shop.test/a%20xxx%20b",
        "http://cams.test/live-cams/",
        "http://cams.test/live/other/cams",
    ]
    reasons, details, _ = judge(urls, banned_words=[f["words"]])
    assert reasons == [None, "banned-word", "banned-word", "banned-word", "banned-word", None]
    assert details[1] == {"list": "words.txt", "entry": "xxx", "host": "www.xxx-videos.test"}
    assert details[4]["entry"] == "live cams"
    reasons, details, _ = judge(urls[:1], banned_words=[f["words"]], substring=True)
    assert reasons == ["banned-word"] and details[0]["entry"] == "xxx"


def test_hosts_are_normalized_idn_ports_userinfo_case_trailing_dot(tmp_path):
    f = lists(tmp_path, block=["bücher.example", "xn--fsqu00a.xn--0zwm56d", "Example.NET."])
    urls = [
        "http://xn--bcher-kva.example/",
        "https://BÜCHER.example./buch",
        "http://user:secret@www.example.net:8080/path",
        "http://例子.测试/",
        "http://example.net@good.test/",  # the host is good.test: example.net is userinfo
        "HTTP://EXAMPLE.NET:443",
        "//cdn.example.net/x.js",
        "example.net/no-scheme",
    ]
    reasons, details, _ = judge(urls, blocklists=[f["block"]])
    assert reasons == ["blocklist", "blocklist", "blocklist", "blocklist", None, "blocklist", "blocklist", "blocklist"]
    assert details[1]["host"] == "xn--bcher-kva.example"
    assert split_url("http://user:pw@WWW.Example.COM.:8080/a?b")[0] == "www.example.com"
    assert split_url("http://[2001:db8::1]:80/")[0] == "2001:db8::1"


@pytest.mark.parametrize("missing, malformed", [("keep", "keep"), ("drop", "drop")])
def test_missing_and_malformed_urls_pass_counted_or_drop_as_configured(tmp_path, missing, malformed):
    f = lists(tmp_path, block=["example.com"])
    urls = [None, "", "  ", "mailto:someone@example.com", "http://exa mple.com/", "http://host:port/", "http://a..b/"]
    reasons, details, counters = judge(urls, blocklists=[f["block"]], missing_url=missing, malformed_url=malformed)
    assert counters == {"url_filter.missing_url": 3, "url_filter.malformed_url": 4}
    if missing == "keep":
        assert reasons == [None] * 7
    else:
        assert reasons == ["missing-url"] * 3 + ["malformed-url"] * 4
        assert details[0] == {"field": "url"} and details[3] == {"url": "mailto:someone@example.com"}


def test_nested_field_path_and_a_batch_without_the_field(tmp_path):
    f = lists(tmp_path, block=["example.com"])
    meta = pa.array([{"url": "http://example.com/"}, {"url": None}, None, {"url": "http://ok.test/"}])
    batch = pa.record_batch({"id": list("abcd"), "text": ["x"] * 4, "source": ["web"] * 4, "meta": meta})
    stage = UrlFilter(UrlFilter.Options(url_field="meta.url", blocklists=[f["block"]]))
    out = stage.process(batch, "web")
    assert out.drop_reason.to_pylist() == ["blocklist", None, None, None]
    assert out.counters == {"url_filter.missing_url": 2}
    out = UrlFilter(UrlFilter.Options(url_field="meta.link", blocklists=[f["block"]])).process(batch, "web")
    assert out.drop_reason.null_count == 4 and out.counters == {"url_filter.missing_url": 4}


def test_real_documents_with_real_urls(shared_data, tmp_path):
    records = [json.loads(line) for line in gzip.open(shared_data / "web" / "web_gold.jsonl.gz", "rt")]
    records = [r for r in records if r.get("url")]
    hosts = [split_url(r["url"])[0] for r in records]
    assert all(hosts), [r["url"] for r, h in zip(records, hosts) if not h][:3]
    target = "bbc.co.uk"
    f = lists(tmp_path, block=[target])
    expected = [h == target or h.endswith("." + target) for h in hosts]
    assert 0 < sum(expected) < len(records)
    batch = url_batch([r["url"] for r in records])
    out = UrlFilter(UrlFilter.Options(blocklists=[f["block"]])).process(batch, "web")
    assert out.drop_reason.is_valid().to_pylist() == expected


def ldnoobw_regex() -> re.Pattern:
    """C4's rule as C4 and datatrove write it."""
    words = [re.escape(w.strip()) for w in open(bundled_ldnoobw_en(), encoding="utf-8") if w.strip()]
    return re.compile(r"(?:\W|^)({})(?:\W|$)".format("|".join(words)))


def bad_words(texts: list[str], **options) -> tuple[list, list]:
    batch = pa.record_batch({"id": [str(i) for i in range(len(texts))], "text": texts, "source": ["web"] * len(texts)})
    out = BadWords(BadWords.Options(**options)).process(batch, "web")
    return out.drop_reason.to_pylist(), [json.loads(d)["entry"] if d else None for d in out.detail.to_pylist()]


def test_bad_words_match_whole_words_case_insensitively_and_phrases():
    texts = [
        "Scunthorpe United won at home.",
        "Penistone and Middlesex are places; so is Shitterton.",
        "The analysis of assassins.",
        "What a CUNT.",
        "Ask about the G-Spot",
        "2 girls 1 cup",
        "2 girls 1 cups",
        "anal",
        "x 🖕 y",
        "a🖕",
        "",
    ]
    reasons, entries = bad_words(texts)
    assert reasons == [None, None, None, "bad-word", "bad-word", "bad-word", None, "bad-word", "bad-word", None, None]
    assert entries[3:6] == ["cunt", "g-spot", "2 girls 1 cup"]
    regex = ldnoobw_regex()
    assert [r is not None for r in reasons] == [regex.search(t.lower()) is not None for t in texts]


def test_bad_words_agree_with_c4s_regex_on_real_documents(shared_data):
    texts = []
    for name in ("web_gold.jsonl.gz", "dolma_ccmain_20190717_00140.jsonl.gz"):
        with gzip.open(shared_data / "web" / name, "rt") as f:
            texts += [json.loads(line)["text"] for _, line in zip(range(300), f)]
    reasons, _ = bad_words(texts)
    regex = ldnoobw_regex()
    expected = [regex.search(t.lower()) is not None for t in texts]
    assert [r is not None for r in reasons] == expected
    assert 0 < sum(expected) < len(texts)


def test_files_are_the_lists_and_a_missing_list_is_one_line(tmp_path):
    f = lists(tmp_path, block=["a.test"], allow=["b.test"], words=["w"])
    options = UrlFilter.Options(blocklists=[f["block"]], allowlists=[f["allow"]], banned_words=[f["words"]])
    assert UrlFilter.files(options) == [f["block"], f["allow"], f["words"]]
    assert BadWords.files(BadWords.Options()) == [bundled_ldnoobw_en()]
    assert BadWords.files(BadWords.Options(words_file=f["words"])) == [f["words"]]
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"id": "1", "text": "hi", "url": "http://a.test/"}])
    for stage in ('name = "url_filter"\nblocklists = ["nope/domains"]', 'name = "bad_words"\nwords_file = "nope.txt"'):
        config = write_config(tmp_path / "c.toml", f'[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\n{stage}\n')
        with pytest.raises(ConfigError, match=r"list file nope.* does not exist"):
            load_config(config)


def test_full_run_with_a_toml_config(tmp_path):
    f = lists(tmp_path, block=["blocked.test"], allow=["ok.blocked.test"])
    docs = [
        {"id": "keep", "text": "News from Scunthorpe today.", "meta": {"url": "http://news.test/a"}},
        {"id": "sub", "text": "Fine text.", "meta": {"url": "https://www.blocked.test:8443/x"}},
        {"id": "allowed", "text": "Fine text.", "meta": {"url": "http://ok.blocked.test/"}},
        {"id": "nourl", "text": "No URL here at all."},
        {"id": "bad", "text": "Well, shit happens.", "meta": {"url": "http://news.test/b"}},
    ]
    write_jsonl(tmp_path / "in" / "a.jsonl", docs)
    config = write_config(
        tmp_path / "c.toml",
        f'[sources.web]\npaths = ["in/*.jsonl"]\n[[stages]]\nname = "url_filter"\nurl_field = "meta.url"\n'
        f'blocklists = ["{f["block"]}"]\nallowlists = ["{f["allow"]}"]\n[[stages]]\nname = "bad_words"\n',
    )
    result = CliRunner().invoke(main, ["run", str(config), "--out", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 0, result.output
    kept = sorted(pq.read_table(tmp_path / "out" / "docs").column("id").to_pylist())
    assert kept == ["allowed", "keep", "nourl"]
    ledger = {r["id"]: r for r in pq.read_table(tmp_path / "out" / "rejects").to_pylist()}
    assert (ledger["sub"]["stage"], ledger["sub"]["reason"]) == ("url_filter", "blocklist")
    assert json.loads(ledger["sub"]["detail"]) == {
        "list": "block.txt",
        "entry": "blocked.test",
        "host": "www.blocked.test",
    }
    assert (ledger["bad"]["stage"], ledger["bad"]["reason"]) == ("bad_words", "bad-word")
    assert json.loads(ledger["bad"]["detail"]) == {"list": "ldnoobw_en.txt", "entry": "shit"}
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    stages = manifest["stages"]
    url_stage = next(v for k, v in stages.items() if k.startswith("url_filter"))
    assert url_stage["counters"] == {"url_filter.allowlisted": 1, "url_filter.missing_url": 1}
