"""Kernels compile once per machine, before the run, in rounds spread over the workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO, write_config, write_jsonl

from pipeline.engine.config import load_config
from pipeline.engine.plan import plan_units
from pipeline.engine.warmup import compile_seconds, round_seconds, warmup_rounds
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


def _names(steps) -> list[str]:
    return [getattr(step, "func", step).__name__ for step in steps]


def test_rounds_follow_each_stage_and_take_longest_steps_first(tmp_path):
    config, units = _config(tmp_path)
    first, last = warmup_rounds(config, units)
    # quality's web rounds: its helpers side by side, then the kernel that calls them; the
    # one-round stages (quality's code step, dedup and the reader) go where they fit.
    assert {quality_warmup.words, quality_warmup.web_rules} <= {getattr(step, "func", step) for step in first}
    assert "web" in _names(last)
    steps = sum((first, last), [])
    assert sorted(_names(steps)) == ["code", "reader_kernels", "rehearse", "web", "web_rules", "words"]
    for steps in (first, last):
        assert [compile_seconds(s) for s in steps] == sorted(map(compile_seconds, steps), reverse=True)


def test_two_workers_take_short_steps_into_the_helpers_round_where_that_is_sooner(tmp_path, monkeypatch):
    config, units = _config(tmp_path)
    # the helpers' round leaves a worker idle for long when one helper is quick
    monkeypatch.setattr(quality_warmup.web_rules, "compile_seconds", 1.0)
    balanced = warmup_rounds(config, units, workers=2)
    helpers = [s for s in balanced[0] if _names([s])[0] in ("words", "web_rules")]
    aligned = [helpers, [s for s in sum(balanced, []) if s not in helpers]]  # the rest waits for web
    assert _names(balanced[0])[:1] == ["words"] and "web_rules" in _names(balanced[0])
    assert _names(balanced[1])[0] in ("web", "rehearse") and "web" in _names(balanced[1])
    assert len(balanced[0]) > 2
    assert sum(round_seconds(r, 2) for r in balanced) < sum(round_seconds(r, 2) for r in aligned)


def test_a_round_takes_its_longest_steps_first_on_each_free_worker():
    def step(seconds):
        def run():
            return None

        run.compile_seconds = seconds
        return run

    steps = [step(s) for s in (1.0, 4.0, 2.0, 3.0)]
    assert round_seconds(steps, 2) == 5.0  # 4 + 1 beside 3 + 2
    assert round_seconds(steps, 0) == round_seconds(steps, 4) == 4.0
    assert round_seconds(steps, 1) == 10.0


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
