"""The base install runs the main job: no optional package is imported on its path.

README's first command is ``pip install -e .``, which installs none of the extras. Here the
extras' packages are made unimportable (a ``sitecustomize`` on PYTHONPATH, so the run's
worker processes are blocked too, whatever this environment has installed): ``prep run``,
``prep report`` and ``prep mix`` on the sample must still work, and a command that needs an
extra must say which one in a single line, with no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Every package an extra (or only the dev extra) installs that prep imports somewhere.
OPTIONAL = (
    "torch",
    "ray",
    "datasets",
    "huggingface_hub",
    "sklearn",
    "resiliparse",
    "fastwarc",
    "trafilatura",
    "spacy",
    "datatrove",
    "moto",
    "megatron",
    "tokenizers",
)

BLOCKER = f"""
import sys

BLOCKED = {OPTIONAL!r}


class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the lean-install test)", name=name)
        return None


sys.meta_path.insert(0, Blocked())
"""


@pytest.fixture(scope="module")
def lean_env(tmp_path_factory) -> dict[str, str]:
    site = tmp_path_factory.mktemp("lean_site")
    (site / "sitecustomize.py").write_text(BLOCKER)
    path = os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "PREP_DEBUG": ""}


def prep(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_blocker_blocks(lean_env):
    done = subprocess.run([sys.executable, "-c", "import torch"], env=lean_env, capture_output=True, text=True)
    assert done.returncode != 0 and "blocked by the lean-install test" in done.stderr


def test_run_report_and_mix_need_no_extra(lean_env, tmp_path):
    run = tmp_path / "sample"
    done = prep(lean_env, "run", "configs/sample.toml", "--out", str(run))
    assert done.returncode == 0, done.stderr
    assert any((run / "tokens").iterdir())
    done = prep(lean_env, "mix", str(run), "--out", str(tmp_path / "mix"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "mix" / "mix.json").is_file()
    done = prep(lean_env, "report", str(run), str(tmp_path / "mix"), "-o", str(tmp_path / "report.html"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "report.html").stat().st_size > 0
    for output in (done.stdout, done.stderr):
        assert "blocked by the lean-install test" not in output


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("ablate", "configs", "--out", "{tmp}/ablation"),
            'Error: prep ablate needs torch: pip install -e ".[ablate]"',
        ),
        (
            ("mix", "search", "configs", "--eval", "README.md", "--out", "{tmp}/search"),
            'Error: prep mix search needs torch and sklearn: pip install -e ".[ablate]"',
        ),
        (
            ("run", "configs/sample.toml", "--out", "{tmp}/ray", "--executor", "ray"),
            'Error: --executor ray needs ray: pip install -e ".[ray]"',
        ),
    ],
)
def test_a_command_needing_an_extra_names_it_in_one_line(lean_env, tmp_path, args, line):
    done = prep(lean_env, *(arg.format(tmp=tmp_path) for arg in args))
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == line, done.stderr


def test_the_loader_names_its_extra(lean_env):
    script = "from pipeline.loader import TokenDataset"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=lean_env, capture_output=True, text=True)
    assert done.returncode != 0
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith('pipeline.loader.TokenDataset needs torch: pip install -e ".[loader]"')
    ), done.stderr
