"""Kernels compile once per machine, before the run, in rounds spread over the workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO, write_config, write_jsonl

from pipeline.engine.config import load_config
from pipeline.engine.plan import plan_units
from pipeline.engine.warmup import reader_kernels, warmup_rounds
from stages.quality import warmup as quality_warmup

CHAIN = """
[sources.web]
paths = ["web/*.jsonl"]
[sources.code]
paths = ["code/*.jsonl"]
[[stages]]
name = "normalize"
[[stages]]
name = "quality"
code_sources = ["code"]
[[stages]]
name = "dedup"
[[stages]]
name = "tokenize"
tokenizer = "gpt2"
"""


def _config(tmp_path: Path):
    for source in ("web", "code"):
        write_jsonl(tmp_path / source / "a.jsonl", [{"text": "a page of text"}])
    config = load_config(write_config(tmp_path / "run.toml", CHAIN))
    return config, plan_units(config)


def test_rounds_follow_each_stage_and_align_short_chains_at_the_end(tmp_path):
    config, units = _config(tmp_path)
    first, last = warmup_rounds(config, units)
    # quality's web rounds: its helpers side by side, then the kernel that calls them, first
    # in its round; quality's code step, dedup and the reader (one round each) fill the rest.
    assert [step.func for step in first] == [quality_warmup.words, quality_warmup.web_rules]
    names = [getattr(step, "func", step).__name__ for step in last]
    assert names == ["web", "reader_kernels", "code", "rehearse"]
    assert last[1] is reader_kernels


def test_one_source_kind_warms_only_its_kernels(tmp_path):
    config, units = _config(tmp_path)
    code_only = [u for u in units if u.source == "code"]
    steps = [step for steps in warmup_rounds(config, code_only) for step in steps]
    functions = [getattr(step, "func", step) for step in steps]
    assert quality_warmup.words not in functions and quality_warmup.code in functions


# In a fresh process: the first round's steps, then every jitted function's signatures;
# then the last round's web step, and which functions gained a signature (compiled, or
# loaded from the cache). Only the two kernels round 1 is for may: any other means a
# helper was prepared at other types than web_batch calls it with, and compiles twice.
CHECK = """
import importlib, pkgutil, sys
import stages.quality, pipeline.kernels
from numba.core.dispatcher import Dispatcher
from stages.quality import warmup
def dispatchers():
    found = {}
    for package in (stages.quality, pipeline.kernels):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if isinstance(value, Dispatcher) and value.py_func.__module__ == info.name:
                    found[f"{info.name}.{name}"] = value
    return found
from stages.quality.stage import QualityStage
warmup.words(QualityStage); warmup.web_rules(QualityStage)
before = {name: set(d.signatures) for name, d in dispatchers().items()}
warmup.web(QualityStage)
after = {name: set(d.signatures) for name, d in dispatchers().items()}
print(sorted(name for name in after if after[name] != before[name]))
"""


def test_the_web_kernel_finds_every_helper_prepared():
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    gained = set(eval(done.stdout.strip().split("\n")[-1]))
    # c4_rewrite only on a cold cache: a cached web_batch loads without resolving its callees
    assert "stages.quality.kernels.web_batch" in gained
    assert gained <= {"stages.quality.kernels.web_batch", "stages.quality.c4.c4_rewrite"}


# A helper first compiled for a jitted caller has no Python entry point: calling it from
# Python compiles it again with one, in the process that compiled it and in the next one,
# which finds it in numba's cache without one.
KERNELS = """
from pipeline.kernels.jit import njit
@njit
def inner(x):
    return x + 1
@njit
def outer(x):
    return inner(x) * 2
"""
CALLS = """
import sys
sys.path.insert(0, sys.argv[1])
import kernels
from pipeline.kernels.jit import _KernelDispatcher
for call in sys.argv[2:]:
    print(call, eval(call, vars(kernels)))
(cres,) = kernels.inner.overloads.values()
print("wrapper", _KernelDispatcher._has_wrapper(cres))
"""


def test_a_helper_compiled_for_jitted_code_is_callable_from_python(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNELS)
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run(*calls):
        done = subprocess.run(
            [sys.executable, "-c", CALLS, str(tmp_path), *calls],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, **env},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split("\n")[:-1]

    assert run("outer(3)") == ["outer(3) 8", "wrapper False"]
    assert run("outer(3)", "inner(3)") == ["outer(3) 8", "inner(3) 4", "wrapper True"]
    assert run("inner(3)", "outer(3)") == ["inner(3) 4", "outer(3) 8", "wrapper True"]
