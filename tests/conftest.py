"""Shared fixtures: where the real corpora are, and small helpers to run prep."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"
# README's sample config (the whole chain), and the light one the engine's tests run often.
SAMPLE_CONFIG = REPO / "configs" / "sample.toml"
LIGHT_SAMPLE_CONFIG = REPO / "tests" / "data" / "light_sample.toml"


def _shared_data() -> Path | None:
    for candidate in (REPO.parent / "shared" / "data", Path("/work/shared/data")):
        if candidate.is_dir():
            return candidate
    return None


SHARED_DATA = _shared_data()


@pytest.fixture
def shared_data() -> Path:
    """The real corpora beside the repo (../shared/data); tests needing them skip without."""
    if SHARED_DATA is None:
        pytest.skip("../shared/data is not present")
    return SHARED_DATA


@pytest.fixture(scope="module")
def s3():
    """An S3 server on loopback; the AWS settings point pyarrow (here and in worker
    processes) at it. Yields a pyarrow S3 file system that may create buckets."""
    from pipeline.engine import storage

    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    settings = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
    }
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    # prep keeps one file system per bucket per process, holding the endpoint it was made
    # with: a bucket name an earlier module's server served would reach that dead server.
    storage._filesystem.cache_clear()
    try:
        yield pafs.S3FileSystem(
            endpoint_override=f"{host}:{port}",
            scheme="http",
            allow_bucket_creation=True,
            access_key="test",
            secret_key="test",
            region="us-east-1",
        )
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        storage._filesystem.cache_clear()
        server.stop()


def write_jsonl(path: Path, records: list[dict], gz: bool | None = None) -> Path:
    """Write records as JSON lines (gzipped when the name ends in .gz)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
    gz = path.name.endswith(".gz") if gz is None else gz
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


# Every kind of phase: per-document stages, the global dedup (map, reduce, finalize,
# filter) and the terminal tokenize.
EVERY_PHASE_STAGES = """
[[stages]]
name = "normalize"
[[stages]]
name = "length"
min_chars = 100
[[stages]]
name = "dedup"
partitions = 4
[[stages]]
name = "tokenize"
tokenizer = "gpt2"
"""


# A stage's input by hand: the text column as either string type readers produce.
TEXT_TYPES = [pa.string(), pa.large_string()]


def make_batch(texts: list[str], text_type: pa.DataType = pa.string()) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "id": [f"doc-{i}" for i in range(len(texts))],
            "text": pa.array(texts, text_type),
            "source": ["web"] * len(texts),
        }
    )


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def remove_shards(folder: Path, removed: str) -> None:
    """Damage a run's ``tokens/<source>/`` as a user might after the run: "one shard"
    deletes its first shard's files, anything else the whole folder."""
    import shutil

    from pipeline.formats.token_shards import list_shards

    if removed == "one shard":
        for path in folder.glob(f"{Path(list_shards(folder)[0]).name}.*"):
            path.unlink()
    else:
        shutil.rmtree(folder)
