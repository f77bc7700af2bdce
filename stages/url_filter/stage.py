"""The ``url_filter`` stage: drop documents by their URL's host and words.

In order, for each document's URL (``url_field``, a dotted path):

1. no URL (no such field, null, empty): kept and counted (``url_filter.missing_url``),
   or dropped as ``missing-url`` with ``missing_url = "drop"``;
2. a URL with no host to read: kept and counted (``url_filter.malformed_url``), or
   dropped as ``malformed-url`` with ``malformed_url = "drop"``;
3. the host or a parent domain of it in an ``allowlists`` file: kept, whatever else
   (``url_filter.allowlisted``);
4. the host or a parent domain in a ``blocklists`` file: ``blocklist``;
5. a word of a ``banned_words`` file among the URL's words (host and path split at
   non-alphanumerics; a line of several words matches them in a row): ``banned-word``.
   With ``substring = true`` an entry matches anywhere in the lowercase host and path
   (``xxx`` then finds ``maxxximus.com``).

The ledger's detail is a JSON object naming the list (its shortest distinguishing path
tail, ``adult/domains``) and the entry that matched, and the host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa

from pipeline.stage import Stage, StageOutput, register
from stages.url_filter.lists import checked_paths, load_domains, load_words, short_names
from stages.url_filter.urls import WORD_SPLIT, column_at, host_suffixes, split_url, url_strings, url_words

CHOICES = ("keep", "drop")


@register
class UrlFilter(Stage):
    name = "url_filter"

    @dataclass
    class Options:
        url_field: str = "url"  # dotted path into nested fields: meta.url, metadata.url
        blocklists: list[str] = field(default_factory=list)  # UT1 format: one domain per line
        allowlists: list[str] = field(default_factory=list)  # wins over every other rule
        banned_words: list[str] = field(default_factory=list)  # one word (or phrase) per line
        substring: bool = False  # banned words match inside words too
        missing_url: str = "keep"
        malformed_url: str = "keep"

        def __post_init__(self) -> None:
            if not self.url_field or any(not part for part in self.url_field.split(".")):
                raise ValueError(f"url_field must be a field name or a dotted path, not {self.url_field!r}")
            for key in ("missing_url", "malformed_url"):
                if getattr(self, key) not in CHOICES:
                    raise ValueError(f"{key} must be one of {', '.join(CHOICES)}, not {getattr(self, key)!r}")
            self.blocklists = checked_paths("blocklists", self.blocklists)
            self.allowlists = checked_paths("allowlists", self.allowlists)
            self.banned_words = checked_paths("banned_words", self.banned_words)

    def __init__(self, options: UrlFilter.Options):
        super().__init__(options)
        names = short_names([*options.blocklists, *options.allowlists, *options.banned_words])
        self._block_names = names[: len(options.blocklists)]
        self._allow_names = names[len(options.blocklists) : len(options.blocklists) + len(options.allowlists)]
        word_names = names[len(options.blocklists) + len(options.allowlists) :]
        self._block = load_domains(options.blocklists)
        self._allow = load_domains(options.allowlists)
        # entry -> list name; single words by set lookup, phrases as " a b " in " words ".
        self._words: dict[str, str] = {}
        self._phrases: dict[str, str] = {}
        self._needles: dict[str, str] = {}
        for path, list_name in zip(options.banned_words, word_names):
            for entry in load_words(path):
                if options.substring:
                    self._needles.setdefault(entry, list_name)
                    continue
                words = [w for w in WORD_SPLIT.split(entry) if w]
                if len(words) == 1:
                    self._words.setdefault(words[0], list_name)
                elif words:
                    self._phrases.setdefault(" " + " ".join(words) + " ", list_name)
        self._hosts: dict[str, tuple] = {}

    @classmethod
    def files(cls, options: UrlFilter.Options) -> list[str]:
        return [*options.blocklists, *options.allowlists, *options.banned_words]

    def process(self, batch: pa.RecordBatch, source: str) -> StageOutput:
        n = batch.num_rows
        urls = url_strings(column_at(batch, self.options.url_field), n)
        reasons: list[str | None] = [None] * n
        details: list[str | None] = [None] * n
        counts = {"missing_url": 0, "malformed_url": 0, "allowlisted": 0}
        for row, url in enumerate(urls):
            reason, detail = self._judge(url, counts)
            reasons[row], details[row] = reason, detail
        counters = {f"url_filter.{k}": v for k, v in counts.items() if v}
        return StageOutput(
            batch=batch,
            drop_reason=pa.array(reasons, pa.string()),
            detail=pa.array(details, pa.string()),
            counters=counters,
        )

    def _judge(self, url: str | None, counts: dict[str, int]) -> tuple[str | None, str | None]:
        if url is None or not url.strip():
            counts["missing_url"] += 1
            if self.options.missing_url == "drop":
                return "missing-url", json.dumps({"field": self.options.url_field}, ensure_ascii=False)
            return None, None
        host, raw_host, tail = split_url(url)
        if host is None:
            counts["malformed_url"] += 1
            if self.options.malformed_url == "drop":
                return "malformed-url", json.dumps({"url": url[:300]}, ensure_ascii=False)
            return None, None
        allowed, blocked = self._domain_verdict(host)
        if allowed is not None:
            counts["allowlisted"] += 1
            return None, None
        if blocked is not None:
            list_name, entry = blocked
            return "blocklist", json.dumps({"list": list_name, "entry": entry, "host": host}, ensure_ascii=False)
        matched = self._banned(raw_host, tail)
        if matched is not None:
            list_name, entry = matched
            return "banned-word", json.dumps({"list": list_name, "entry": entry, "host": host}, ensure_ascii=False)
        return None, None

    def _domain_verdict(self, host: str) -> tuple:
        """(allowlist match or None, blocklist match or None), each (list name, domain); a
        host's first, most specific, listed suffix is the one named."""
        verdict = self._hosts.get(host)
        if verdict is None:
            suffixes = host_suffixes(host)
            verdict = (
                _first(suffixes, self._allow, self._allow_names),
                _first(suffixes, self._block, self._block_names),
            )
            if len(self._hosts) > 1 << 20:
                self._hosts.clear()
            self._hosts[host] = verdict
        return verdict

    def _banned(self, raw_host: str, tail: str) -> tuple[str, str] | None:
        if self._needles:
            text = unquote(f"{raw_host} {tail}").lower()
            for needle, list_name in self._needles.items():
                if needle in text:
                    return list_name, needle
            return None
        if not self._words and not self._phrases:
            return None
        words = url_words(raw_host, tail)
        for word in words:
            list_name = self._words.get(word)
            if list_name is not None:
                return list_name, word
        if self._phrases:
            joined = " " + " ".join(words) + " "
            for phrase, list_name in self._phrases.items():
                if phrase in joined:
                    return list_name, phrase.strip()
        return None


def _first(suffixes: list[str], lists: list[frozenset[str]], names: list[str]) -> tuple[str, str] | None:
    for suffix in suffixes:
        for domains, name in zip(lists, names):
            if suffix in domains:
                return name, suffix
    return None
