"""Kernels compile once per machine, before the run, spread over the workers, each step
waiting only for the steps it needs: the steps the kernels' modules declare, found by the
engine for the stages a config names."""

from __future__ import annotations

import functools
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, write_config, write_jsonl

from pipeline.compile import warm_steps
from pipeline.engine import warmup
from pipeline.engine.config import load_config
from pipeline.engine.executor import LocalExecutor
from pipeline.engine.progress import ProgressBar
from pipeline.engine.run import _planned_units
from pipeline.engine.stage_registry import registry
from pipeline.engine.warmup import warmup_plan
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
    return config, _planned_units(config)


def _names(steps) -> list[str]:
    return [getattr(step, "func", step).__name__ for step in steps]


def test_each_step_waits_only_for_the_steps_it_declares(tmp_path):
    config, units = _config(tmp_path)
    steps, after = warmup_plan(config, units)
    names = _names(steps)
    assert sorted(names) == [
        "code",
        "compile_bytecode",
        "compile_scan",
        "engine_kernels",
        "rehearse",
        "web",
        "web_rules",
        "words",
    ]
    waits = {names[i]: sorted(names[j] for j in after[i]) for i in range(len(steps))}
    assert waits == {
        "web": ["web_rules", "words"],  # quality's web kernel links the helpers they compile
        **{
            name: []
            for name in ("code", "compile_bytecode", "compile_scan", "engine_kernels", "rehearse", "web_rules", "words")
        },
    }
    assert all(j < i for i, before in enumerate(after) for j in before)  # the list is an order


def test_the_longest_chain_starts_first_and_short_steps_fill_in(tmp_path, monkeypatch):
    config, units = _config(tmp_path)
    for step, seconds in ((quality_warmup.words, 7.0), (quality_warmup.web_rules, 10.0), (quality_warmup.web, 4.5)):
        monkeypatch.setattr(step, "compile_seconds", seconds)
    names = _names(warmup_plan(config, units)[0])
    assert names[:2] == ["web_rules", "words"]  # 14.5 and 11.5 s to the end of the warm-up
    assert names.index("rehearse") < names.index("code") < names.index("engine_kernels")
    monkeypatch.setattr(quality_warmup.words, "compile_seconds", 12.0)
    assert _names(warmup_plan(config, units)[0])[:2] == ["words", "web_rules"]


def test_a_step_two_uses_share_runs_once_and_gates_both():
    def step(name):
        return functools.partial(_named, name)

    shared, a2, b2 = step("shared"), step("a2"), step("b2")
    steps, after = warm_steps.plan([[(shared, []), (a2, [shared])], [(step("shared"), []), (b2, [shared])]])
    assert steps == [shared, a2, b2] and after == [[], [0], [0]]
    waits = [set(), {0}, {0}]
    paths = warm_steps._critical_paths(steps, waits)
    assert paths[0] == 2 * warm_steps.DEFAULT_SECONDS and paths[1] == paths[2] == warm_steps.DEFAULT_SECONDS
    waits[0].add(1)
    with pytest.raises(ValueError, match="circle"):
        warm_steps._critical_paths(steps, waits)


def test_a_step_declared_waits_only_for_steps_declared_before_it_and_used():
    """``after`` names steps declared earlier; one that this use does not take is not
    waited for, and a use that takes none of a stage's steps gets none."""

    def first():
        pass

    with pytest.raises(ValueError, match="not declared before it"):
        warm_steps.warms("a test stage", seconds=1.0, after=(first,))(_named)
    warm_steps.warms("a test stage", seconds=2.0, uses=lambda options, source, size: () if size else None)(first)
    warm_steps.warms("a test stage", seconds=1.0, after=(first,), uses=lambda o, source, size: (source,))(_named)
    try:
        assert first.compile_seconds == 2.0
        [(only, before)] = warm_steps.steps_for("a test stage", None, "web", 0.0)
        assert only.func is _named and only.args == ("web",) and before == []
        (step, none), (_, waits) = warm_steps.steps_for("a test stage", None, "web", 1.0)
        assert step is first and none == [] and waits == [first]
        assert warm_steps.steps_for("a stage that declared nothing", None, "web", 1.0) == []
    finally:
        del warm_steps._DECLARED["a test stage"]


def test_every_declared_step_is_for_a_stage_a_config_may_name():
    registry()
    assert warm_steps.declared_stages() - {warm_steps.EVERY_RUN} <= set(registry())
    assert {"quality", "dedup", "extract", "tokenize"} <= warm_steps.declared_stages()


def _named(name):
    return name


def _await(path: str, wanted: str, progress=None) -> str:
    """Finishes once ``wanted`` exists (another task made it), writing ``path``."""
    deadline = time.monotonic() + 60
    while not os.path.exists(wanted):
        if time.monotonic() > deadline:
            raise AssertionError(f"{wanted} never appeared: a ready task was held back")
        time.sleep(0.01)
    Path(path).write_text("done")
    return path


def _touch(path: str, must_exist: str = "", progress=None) -> str:
    if must_exist and not os.path.exists(must_exist):
        raise AssertionError(f"ran before {must_exist} was written")
    Path(path).write_text("done")
    return path


def test_a_free_worker_takes_the_next_ready_task_while_an_earlier_one_waits(tmp_path):
    """No barrier: with two workers, task 0 runs until task 3 has run; task 2 waits for
    task 0 and must not start before it ends, and task 3 (ready, later in the list) must
    not wait for task 2."""
    a, b, c, d = (str(tmp_path / name) for name in "abcd")
    tasks = [(_await, (a, d)), (_touch, (b,)), (_touch, (c, a)), (_touch, (d,))]
    executor = LocalExecutor(2)
    try:
        results = executor.run(tasks, ProgressBar("t", 0, 4, mode="none"), after=[[], [], [0], []])
    finally:
        executor.close()
    assert results == [a, b, c, d]


class _CountingExecutor:
    """Ticks the bar once a step, as the workers' results would, without compiling."""

    same_machine = False

    def run(self, tasks, bar, after):
        for _ in tasks:
            bar.unit_done()


def _bar_to(stream, *args, **kwargs) -> ProgressBar:
    return ProgressBar(*args, **{**kwargs, "stream": stream, "quiet_for": 0.0})


@pytest.mark.parametrize("mode", ["bar", "json"])
def test_the_compile_line_gives_no_eta(tmp_path, monkeypatch, mode):
    # Steps take 0.1 s to 20 s, so steps done did not foretell the rest ("ETA 76s" for a 38 s compile).
    config, units = _config(tmp_path)
    stream = io.StringIO()
    monkeypatch.setattr(warmup, "ProgressBar", functools.partial(_bar_to, stream))
    warmup.warm_up(config, units, _CountingExecutor(), mode, {})
    lines = stream.getvalue().splitlines()
    steps = len(warmup_plan(config, units)[0])
    assert lines and all("compile kernels" in line for line in lines)
    if mode == "json":
        assert [json.loads(line)["eta_s"] for line in lines] == [None] * len(lines)
    else:
        assert f"units {steps}/{steps}" in lines[-1] and not any("ETA" in line for line in lines), lines
    other = io.StringIO()  # a phase of like units (after dedup) keeps its ETA
    after_dedup = ProgressBar("stages after dedup", 0, 2, stream=other)
    after_dedup.unit_done()
    after_dedup.close()  # in a log, a phase's last line comes when it ends
    assert "| ETA " in other.getvalue()


def test_one_source_kind_warms_only_its_kernels(tmp_path):
    config, units = _config(tmp_path)
    code_only = [u for u in units if u.source == "code"]
    steps = warmup_plan(config, code_only)[0]
    functions = [getattr(step, "func", step) for step in steps]
    assert quality_warmup.words not in functions and quality_warmup.code in functions


# In a fresh process: the steps ``web`` waits for, then every jitted function's signatures;
# then the ``web`` step, and which functions gained a signature (compiled, or loaded from
# the cache). Only the two kernels ``web`` is for may: any other means a
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
warmup.words(); warmup.web_rules()
before = {name: set(d.signatures) for name, d in dispatchers().items()}
warmup.web()
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


def test_a_cached_web_kernel_is_not_typed_again(monkeypatch):
    """With ``web_batch`` in numba's cache, ``web_rules`` has nothing to prepare: ``web``
    loads the kernel whole. Typing its source cost every warm run half a second."""
    quality_warmup.web()  # compiles web_batch into the cache, or loads it from there

    def typed(*args, **kwargs):
        raise AssertionError("web_rules typed the source of a kernel the cache holds")

    monkeypatch.setattr(quality_warmup, "typed", typed)
    quality_warmup.web_rules()


# A helper first compiled for a jitted caller has no Python entry point: calling it from
# Python compiles it again with one, in the process that compiled it and in the next one,
# which finds it in numba's cache without one.
KERNELS = """
from pipeline.compile.jit import njit
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
from pipeline.compile.jit import _KernelDispatcher
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


def test_fix_text_and_paragraph_dedup_compile_in_the_warm_up(tmp_path):
    """Their kernels compile once per machine in a step, not in every worker's first unit."""
    write_jsonl(tmp_path / "web" / "a.jsonl", [{"text": "a page of text"}])
    chain = '[sources.web]\npaths = ["web/*.jsonl"]\n'
    chain += '[[stages]]\nname = "fix_text"\n[[stages]]\nname = "paragraph_dedup"\n'
    config = load_config(write_config(tmp_path / "run.toml", chain))
    names = _names(warmup_plan(config, _planned_units(config))[0])
    assert {"compile_check", "compile_kernels"} <= set(names)
