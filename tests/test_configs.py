"""The ready-made configs run as they are on real shards, with only the input paths changed."""

from __future__ import annotations

import re

import pyarrow.parquet as pq
import pytest
from conftest import REPO

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
