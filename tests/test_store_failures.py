"""Runs whose inputs and --out are on an object store that fails in the ways a real one
does, each on a few hand-made JSON lines: credentials refused, a key deleted between its
listing and its read, reads cut short of their Content-Length, throttling and lost
answers to uploads, listings of more than a page, keys with odd characters, --force in a
prefix holding the user's objects, and a Ctrl-C in the middle of an upload. Each ends in
the bytes of a clean run, or in one line naming the key; never in a partial object under
a final key, nor a deletion outside what the run wrote.

The faults come from ``s3_faults``' proxy, told per request what to do (``Rules``); moto's
server is the store. Each test has buckets of its own: prep keeps one file system per
bucket in a process, which must be made while the proxy it is to reach is up."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pyarrow.fs as pafs
import pytest
from conftest import write_config
from s3_faults import FaultyProxy

from pipeline.commands.main import one_line
from pipeline.engine import retry
from pipeline.engine.config import ConfigError
from pipeline.engine.retry import upload
from pipeline.engine.run import run_pipeline
from pipeline.engine.storage import RunStore, filesystem, glob_remote

pytest.importorskip("moto.server")

# A chain with every kind of store traffic: per-unit uploads, dedup's ranged reads of band
# files and its rounds, and token shards.
CHAIN = """
[[stages]]
name = "length"
min_chars = 10
[[stages]]
name = "dedup"
partitions = 2
[[stages]]
name = "tokenize"
tokenizer = "gpt2"
"""
LIGHT = '[[stages]]\nname = "length"\nmin_chars = 10\n'


class Rules:
    """The proxy's schedule: the fate of each request (method, path, range) is what
    ``decide(method, path, attempt)`` says (None: pass it on), attempt counting from 0."""

    def __init__(self, decide=lambda method, path, attempt: None):
        self.decide, self.seen, self.served, self.lock = decide, Counter(), Counter(), threading.Lock()

    def fate(self, method: str, path: str, byte_range: str) -> str:
        with self.lock:
            attempt = self.seen[(method, path, byte_range)]
            self.seen[(method, path, byte_range)] += 1
        return self._count(self.decide(method, path, attempt) or "ok")

    def _count(self, what: str) -> str:
        with self.lock:
            self.served[what] += 1
        return what


@pytest.fixture
def rules(s3, monkeypatch) -> Rules:
    """The proxy in front of the test server, prep pointed at it; ``s3`` still reaches the
    server direct."""
    schedule = Rules()
    proxy = FaultyProxy(os.environ["AWS_ENDPOINT_URL"].removeprefix("http://"), schedule)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{proxy.endpoint}")
    yield schedule
    proxy.stop()


@pytest.fixture(autouse=True)
def scratch(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PREP_SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.setenv("PREP_STORE_ATTEMPTS", "4")  # past each test's faults, and fast
    return tmp_path / "scratch"


def put(s3: pafs.S3FileSystem, key: str, data: bytes) -> None:
    with s3.open_output_stream(key) as sink:
        sink.write(data)


def lines(name: str, n: int) -> bytes:
    return "".join(
        json.dumps({"id": f"{name}-{i}", "text": f"{name}, document {i}: " + "words " * 30}) + "\n" for i in range(n)
    ).encode()


def inputs(s3: pafs.S3FileSystem, bucket: str, names=("a", "b", "c"), n: int = 12) -> None:
    s3.create_dir(bucket)
    for name in names:
        put(s3, f"{bucket}/in/{name}.jsonl", lines(name, n))


def config(tmp_path: Path, pattern: str, stages: str = CHAIN, name: str = "run.toml") -> Path:
    return write_config(tmp_path / name, f'[run]\ngroup_bytes = 0\n[sources.web]\npaths = ["{pattern}"]\n{stages}')


def stored(s3: pafs.S3FileSystem, prefix: str) -> dict[str, bytes]:
    """The objects under ``prefix``, by key relative to it."""
    infos = s3.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
    return {
        i.path[len(prefix) + 1 :]: s3.open_input_stream(i.path).read() for i in infos if i.type == pafs.FileType.File
    }


def outputs(s3: pafs.S3FileSystem, prefix: str) -> dict[str, bytes]:
    """A run's outputs, which must be byte-identical between runs of one config: all but its
    record, timings and counts (which name its config file and count its retries)."""
    return {
        key: data
        for key, data in stored(s3, prefix).items()
        if not key.startswith((".prep/", "stats/cost/")) and key not in ("manifest.json", "cost.json")
    }


def test_credentials_refused_end_in_one_line_naming_the_key(s3, rules, tmp_path):
    """A 403 is not retried: reading denied names the input (pyarrow's words for a denied
    GET name no key); writing denied names --out."""
    inputs(s3, "denied")
    rules.decide = lambda method, path, attempt: "denied" if method == "GET" and "/in/" in path else None
    with pytest.raises(OSError) as raised:
        run_pipeline(config(tmp_path, "s3://denied/in/*.jsonl"), "s3://denied/run", workers=1, quiet=True)
    assert one_line(raised.value).startswith("s3://denied/in/a.jsonl: AWS Error ACCESS_DENIED during GetObject")
    assert rules.served["denied"] == 1  # tried once
    assert not [key for key in stored(s3, "denied/run") if key.startswith(("docs/", "stats/segment"))]

    rules.decide = lambda method, path, attempt: "denied" if method in ("PUT", "POST") else None
    with pytest.raises(ConfigError, match=r"^cannot write to --out s3://denied/other: .*ACCESS_DENIED"):
        run_pipeline(config(tmp_path, "s3://denied/in/*.jsonl"), "s3://denied/other", workers=1, quiet=True)
    assert stored(s3, "denied/other") == {}


def test_a_missing_bucket_is_named_as_one(s3, tmp_path):
    with pytest.raises(ConfigError, match=r"'s3://no-bucket-here/in/\*.jsonl': s3://no-bucket-here: no such bucket$"):
        run_pipeline(config(tmp_path, "s3://no-bucket-here/in/*.jsonl"), tmp_path / "out", workers=1, quiet=True)


def test_a_key_deleted_between_listing_and_reading_is_named_and_nothing_of_it_is_kept(s3, rules, tmp_path):
    inputs(s3, "vanish")

    def delete_before_read(method, path, attempt):
        if method == "GET" and path == "/vanish/in/b.jsonl" and attempt == 0:
            s3.delete_file("vanish/in/b.jsonl")

    rules.decide = delete_before_read
    with pytest.raises(OSError) as raised:
        run_pipeline(config(tmp_path, "s3://vanish/in/*.jsonl", LIGHT), "s3://vanish/run", workers=1, quiet=True)
    assert one_line(raised.value).startswith("s3://vanish/in/b.jsonl: AWS Error ")
    left = stored(s3, "vanish/run")
    assert [key for key in left if key.startswith("docs/")] == ["docs/web/00000-a.jsonl.parquet"]
    assert not [key for key in left if "b.jsonl" in key]


@pytest.mark.slow  # a minute on 2 busy cores: the proxy's cut answers are slow to be seen as cut
def test_cut_reads_throttling_and_lost_upload_answers_are_retried_to_the_same_bytes(s3, rules, tmp_path):
    """The first try of every request fails: a GET answers half its Content-Length and
    closes, or is throttled (503 SlowDown); a PUT or POST reaches the store and its
    answer is lost (the connection reset), or is answered 500. Retried, the run gives
    the bytes of a clean run and counts what it retried."""
    inputs(s3, "faults")
    run = config(tmp_path, "s3://faults/in/*.jsonl")
    run_pipeline(run, "s3://faults/clean", workers=1, quiet=True)
    faults = {"GET": ("short", "slowdown"), "PUT": ("reset-response", "server-error")}
    faults["POST"] = faults["PUT"]

    def first_tries_fail(method, path, attempt):
        if attempt == 0 and "/faults/failing/" in path and method in faults:
            return faults[method][len(path) % 2]

    rules.decide = first_tries_fail
    run_pipeline(run, "s3://faults/failing", workers=1, quiet=True)
    assert outputs(s3, "faults/failing") == outputs(s3, "faults/clean")
    assert min(rules.served[fault] for fault in ("short", "slowdown", "reset-response", "server-error")) > 0
    retried = json.loads(stored(s3, "faults/failing")["cost.json"])["store_retries"]
    assert retried["reset"] > 0 and retried["slowdown"] > 0 and retried["server-error"] > 0


def test_listings_of_more_than_a_page(s3):
    """S3 lists 1,000 keys a page: a glob and a run folder's listing see every key."""
    s3.create_dir("pages")
    names = [f"f{i:04d}.jsonl" for i in range(1003)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: put(s3, f"pages/run/stats/{name}", b"{}"), names))
    assert glob_remote("s3://pages/run/stats/*.jsonl") == [f"s3://pages/run/stats/{name}" for name in names]
    assert RunStore("s3://pages/run").sizes("stats", lambda rel: True) == {f"stats/{name}": 2 for name in names}


def test_keys_with_odd_characters(s3, rules, tmp_path):
    """Spaces, non-ASCII, dots, and characters URLs escape, in input keys and in --out;
    keys pyarrow cannot read (an empty folder name, a trailing "/") are refused by name."""
    names = ["a b", "ü-ñ 東京", ".", "x..y", "100%", "q?x=1", "h#1", "plus+"]
    inputs(s3, "odd", names=names, n=3)
    manifest = run_pipeline(config(tmp_path, "s3://odd/in/*.jsonl", LIGHT), "s3://odd/a run ü", workers=1, quiet=True)
    assert manifest["balance"]["input"] == 3 * len(names)
    files = stored(s3, "odd/a run ü")
    assert len([key for key in files if key.startswith("docs/web/")]) == len(names)  # a unit each
    listed = [entry["path"] for entry in json.loads(files["manifest.json"])["inputs"]]
    assert sorted(listed) == sorted(f"{name}.jsonl" for name in names)

    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])  # pyarrow cannot make these keys
    client.put_object(Bucket="odd", Key="in//double.jsonl", Body=lines("double", 1))
    with pytest.raises(ConfigError, match=r"s3://odd/in//double.jsonl: prep cannot read a key with an empty folder"):
        run_pipeline(config(tmp_path, "s3://odd/in/**", LIGHT), "s3://odd/b", workers=1, quiet=True)
    client.delete_object(Bucket="odd", Key="in//double.jsonl")
    client.put_object(Bucket="odd", Key="in/slash.jsonl/", Body=lines("slash", 1))
    with pytest.raises(
        ConfigError, match=r"s3://odd/in/slash.jsonl/: prep cannot read an object whose key ends in '/'"
    ):
        run_pipeline(config(tmp_path, "s3://odd/in/*.jsonl", LIGHT), "s3://odd/c", workers=1, quiet=True)


def test_force_deletes_only_what_the_run_wrote(s3, tmp_path):
    """--force into a prefix of the user's writes beside their objects; --force over a run
    of another config deletes that run, and nothing of the user's: not a sibling prefix
    that starts with the same letters, nor a file named like a run's folder."""
    inputs(s3, "beside")  # moto's buckets are the process's: test_s3.py has a "force"
    mine = ["run-old/docs/x.parquet", "run.txt", "run/notes.txt", "run/docs-backup/a.parquet", "run/docsx", "run/ü x/y"]
    for key in mine:
        put(s3, f"beside/{key}", b"the user's")
    first, second = (config(tmp_path, "s3://beside/in/*.jsonl", LIGHT.replace("10", n), f"{n}.toml") for n in "12")
    with pytest.raises(ConfigError, match="is not empty and was not made by prep run"):
        run_pipeline(first, "s3://beside/run", workers=1, quiet=True)
    run_pipeline(first, "s3://beside/run", workers=1, quiet=True, force=True)
    put(s3, "beside/run/docs/web/99999-stale.parquet", b"a file of the first run")
    run_pipeline(second, "s3://beside/run", workers=1, quiet=True, force=True)
    left = stored(s3, "beside")
    assert all(left[key] == b"the user's" for key in mine)
    assert "run/docs/web/99999-stale.parquet" not in left
    assert json.loads(left["run/manifest.json"])["config"]["stages"][0]["min_chars"] == 2


def test_a_ctrl_c_during_an_upload_leaves_no_partial_object(s3, monkeypatch, tmp_path):
    """pyarrow's output stream creates its object on close, which leaving it by an
    exception does too: a Ctrl-C landing inside an upload stored the part written so far
    under the final key. The upload now runs off the main thread, where no signal lands:
    the interrupt stops the caller, and the object is whole once the upload ends."""
    s3.create_dir("ctrlc")
    local = tmp_path / "marker.json"
    local.write_bytes(b"x" * 100_000)
    copy = retry.shutil.copyfileobj

    def copy_with_a_ctrl_c(source, sink, length):
        sink.write(source.read(10))
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # Python: KeyboardInterrupt
        copy(source, sink, length)

    monkeypatch.setattr(retry.shutil, "copyfileobj", copy_with_a_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        upload(local, *filesystem("s3://ctrlc/run/stats/marker.json"))
    for thread in threading.enumerate():
        if thread.name.startswith("prep-store-write"):
            thread.join()
    assert stored(s3, "ctrlc/run") == {"stats/marker.json": local.read_bytes()}
