"""The ready-made configs run as they are on real shards, with only the input paths changed."""

from __future__ import annotations

import gzip
import re

import pyarrow.parquet as pq
import pytest
from conftest import REPO
from test_compressed_jsonl import zstd_frames

from pipeline.engine.config import load_config
from pipeline.engine.run import run_pipeline

INPUTS = {
    "c4.toml": {
        "web": ["web/olmo_paloma_c4_100_domains_guardian_val.jsonl.gz", "web/dolma_ccmain_20190717_00140.jsonl.gz"]
    },
    "redpajama.toml": {
        "web": ["web/datajuicer_redpajama_pile_samples.jsonl.gz", "web/dolma_cc_en_head_and_provided.jsonl.gz"],
        "code": ["code/js_usr_lib_node_modules.jsonl.gz"],
        "math": ["math/datajuicer_arxiv_sample.jsonl.gz", "math/gsm8k.jsonl.gz"],
    },
}


def with_paths(text: str, inputs: dict[str, list[str]], data) -> str:
    """The config with each source's `paths = [...]` pointed at shared files."""
    for source, files in inputs.items():
        listed = ", ".join(f'"{data / f}"' for f in files)
        text, count = re.subn(rf"(\[sources\.{source}\][^\[]*?)paths = \[[^\]]*\]", rf"\1paths = [{listed}]", text)
        assert count == 1, source
    return text


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_config_runs_on_real_shards(name, shared_data, tmp_path):
    config = tmp_path / name
    config.write_text(with_paths((REPO / "configs" / name).read_text(), INPUTS[name], shared_data))
    loaded = load_config(config)
    assert [s.name for s in loaded.stages][-1] == "tokenize"
    manifest = run_pipeline(config, tmp_path / "out", workers=2, quiet=True)
    balance = manifest["balance"]
    assert balance["input"] == balance["output"] + balance["rejected"] and balance["output"] > 0
    stages = manifest["stages"]
    assert sum(stages["quality"]["rejected"].values()) > 0  # real web pages fail real rules
    assert stages["tokenize"]["counters"]["tokens"] > 0
    assert set(manifest["sources"]) == set(INPUTS[name])
    kept = pq.read_table(tmp_path / "out" / "docs").column("source").to_pylist()
    assert set(kept) == set(INPUTS[name])
    if name == "redpajama.toml":
        assert stages["langid"]["by_source"].keys() == {"web"}  # English filter on web only


def test_a_zstd_shard_gives_what_its_gzip_twin_gives(shared_data, tmp_path):
    """DCLM-baseline, SlimPajama and proof-pile-2 ship ``.jsonl.zst`` (several frames per
    file): configs/c4.toml keeps, cuts, drops and tokenizes exactly as on the gzip copy."""
    text = b"".join(gzip.decompress((shared_data / f).read_bytes()) for f in INPUTS["c4.toml"]["web"])
    outputs = {}
    for suffix, data in {"gz": gzip.compress(text), "zst": zstd_frames(text, 5)}.items():
        shard = tmp_path / suffix / f"shard.jsonl.{suffix}"
        shard.parent.mkdir()
        shard.write_bytes(data)
        config = tmp_path / suffix / "c4.toml"
        config.write_text(with_paths((REPO / "configs" / "c4.toml").read_text(), {"web": [shard.name]}, shard.parent))
        manifest = run_pipeline(config, tmp_path / suffix / "out", workers=2, quiet=True)
        docs = pq.read_table(tmp_path / suffix / "out" / "docs").sort_by("id")
        rejects = pq.read_table(tmp_path / suffix / "out" / "rejects").sort_by("id")
        tokens = sorted((tmp_path / suffix / "out" / "tokens").rglob("*.bin"))
        outputs[suffix] = (
            docs.select(["id", "text"]).to_pylist(),
            rejects.select(["id", "stage", "reason"]).to_pylist(),
            [p.read_bytes() for p in tokens],
            manifest["balance"],
        )
    assert outputs["zst"] == outputs["gz"]
    assert outputs["gz"][3]["output"] > 0 and outputs["gz"][3]["rejected"] > 0
