"""One trial: train the small model on one DATA with one seed, through prep's own loader.

The batches come from ``build_dataloader`` over a ``TokenDataset`` (the real training
path: packed windows, position ids that restart at each document, which the model turns
into a document mask), in the DATA's own order without its held-out documents. The model
starts from ``torch.manual_seed(seed)``, so every DATA of a seed starts from the same
weights. AdamW, a linear warmup over the first 5% of steps, then a cosine decay to a tenth
of the peak; gradients clipped at norm 1.

Evaluation reports nats per token and, for a set made from text, bits per byte
(``evaluate``), and for a multiple-choice set its accuracy and the right answer's nats per
character (``evaluate_choices``); the trial's record keeps every curve.

Timing: a step's time runs from asking the loader for a batch to the optimizer step done
(``loss.item()`` waits for the device); its data wait is the part spent in the loader. The
first step (workers starting, kernels compiling) is left out of both. Evaluation runs at
``eval_points`` evenly spaced steps (and before the first), outside the step times.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from pipeline.ablate.data import AblationData
from pipeline.ablate.evalsets import EvalSet, Vocabulary
from pipeline.ablate.health import HealthMonitor, NonFiniteLoss
from pipeline.ablate.model import TinyGPT
from pipeline.ablate.multiple_choice import MultipleChoiceSet, score
from pipeline.ablate.presets import Preset
from pipeline.loader import TokenDataset, build_dataloader

CURVE_POINTS = 200
EVAL_BATCH = 16


class TrialError(ValueError):
    """A trial that cannot run as asked (too little data for one batch, say)."""


@dataclass
class TrialPlan:
    data: AblationData
    seed: int
    tokens: int  # the token budget; whole steps of batch_size x seq_len are trained
    preset: Preset
    seq_len: int
    batch_size: int
    lr: float
    eval_points: int
    workers: int

    @property
    def steps(self) -> int:
        return self.tokens // (self.batch_size * self.seq_len)


def choose_device(name: str, threads: int | None = None) -> torch.device:
    """The device to train on (``auto``: CUDA when present); ``threads`` caps torch's CPU threads."""
    if threads:
        torch.set_num_threads(threads)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise TrialError("--device cuda: no CUDA device is available")
    return torch.device(name)


def describe_device(device: torch.device) -> dict:
    if device.type == "cuda":
        return {"device": torch.cuda.get_device_name(device), "dtype": "bf16", "kind": "cuda", "threads": 1}
    threads = torch.get_num_threads()
    return {"device": f"cpu ({threads} threads)", "dtype": "fp32", "kind": "cpu", "threads": threads}


def build_model(plan: TrialPlan, vocab: Vocabulary, device: torch.device) -> TinyGPT:
    torch.manual_seed(plan.seed)
    return TinyGPT(plan.preset, vocab.size, plan.seq_len).to(device)


def run_trial(
    plan: TrialPlan,
    vocab: Vocabulary,
    eval_sets: list[EvalSet | MultipleChoiceSet],
    device: torch.device,
    progress: Callable[[str], None] = print,
) -> dict:
    """Train and evaluate; the record's measurements (the caller adds what the trial was)."""
    if plan.steps < 1:
        raise TrialError(f"--tokens {plan.tokens:,} is less than one batch of {plan.batch_size} x {plan.seq_len}")
    dataset = TokenDataset(
        plan.data.path,
        plan.seq_len,
        seed=plan.seed,
        order=plan.data.train_order(plan.seed, plan.tokens),
        cache_dir=plan.data.corpus.cache_dir,
    )
    if len(dataset) < plan.batch_size:
        raise TrialError(f"{plan.data.name}: {len(dataset)} windows of {plan.seq_len}, fewer than one batch")
    loader = build_dataloader(dataset, plan.batch_size, num_workers=plan.workers, persistent_workers=plan.workers > 0)
    model = build_model(plan, vocab, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=plan.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    table = torch.from_numpy(vocab.table).to(device) if vocab.table is not None else None
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    per_step = plan.batch_size * plan.seq_len
    eval_steps = {round(plan.steps * k / plan.eval_points) for k in range(1, plan.eval_points + 1)}
    monitor, curve = HealthMonitor(), _Curve(max(1, plan.steps // CURVE_POINTS))
    curves = _EvalCurves(eval_sets)
    curves.evaluate(model, table, device, autocast, 0)
    wait = busy = 0.0
    stopped = None
    started = time.perf_counter()
    batches = iter(loader)
    for step in range(1, plan.steps + 1):
        begin = time.perf_counter()
        batch = next(batches, None)
        if batch is None:  # a pass ended before the budget: the loader starts the next one
            batches = iter(loader)
            batch = next(batches)
        fetched = time.perf_counter()
        inputs, positions, labels = _on_device(
            batch["input_ids"], batch["position_ids"], batch["labels"], device, table
        )
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(plan.lr, step, plan.steps)
        with autocast:
            loss = model.loss(inputs, positions, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        value = loss.item()
        if step > 1:
            wait += fetched - begin
            busy += time.perf_counter() - begin
        try:
            monitor.observe(step, step * per_step, value)
        except NonFiniteLoss as error:
            stopped = str(error)
            progress(f"{plan.data.name} seed {plan.seed}: {stopped}")
            break
        curve.add(step * per_step, value)
        if step in eval_steps:
            curves.evaluate(model, table, device, autocast, step * per_step)
            shown = ", ".join(f"{name} {points[-1][1]:.3f}" for name, points in curves.nats.items())
            rate = (step - 1) * per_step / busy if busy else 0.0
            progress(
                f"{plan.data.name} seed {plan.seed}: step {step:,}/{plan.steps:,}, train loss {value:.3f}, "
                f"{rate:,.0f} tokens/s; eval {shown}"
            )
    wall = time.perf_counter() - started
    timed = max(0, len(monitor.losses) - 1)
    share = wait / busy if busy else 0.0
    return {
        "params": model.parameters_count,
        "compute_params": model.compute_parameters,
        "output": model.output,
        "steps": len(monitor.losses),
        "tokens": len(monitor.losses) * per_step,
        "wall_s": wall,
        "step_s": busy / timed if timed else None,
        "tokens_per_s": timed * per_step / busy if busy else None,
        "data_wait_share": share,
        "train_curve": curve.points,
        "eval": curves.nats,
        "final": {} if stopped else curves.final(curves.nats),
        "eval_bpb": curves.bits,  # bits per byte, for the sets made from text
        "final_bpb": {} if stopped else curves.final(curves.bits),
        "eval_mc": curves.choices,  # multiple-choice sets: accuracy, right answer's nats/char
        "final_mc": {} if stopped else curves.final(curves.choices),
        "health": monitor.summary(share, stopped),
    }


def _on_device(inputs, positions, labels, device: torch.device, table: torch.Tensor | None):
    """The batch on the device, token ids through the vocabulary remap if there is one."""
    inputs, positions, labels = (t.to(device, non_blocking=True) for t in (inputs, positions, labels))
    if table is not None:
        inputs, labels = table[inputs], table[labels]
    return inputs, positions, labels


def _learning_rate(peak: float, step: int, steps: int) -> float:
    warmup = max(1, steps // 20)
    if step <= warmup:
        return peak * step / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


class _Curve:
    """The training loss, averaged over buckets of steps so a record stays small."""

    def __init__(self, bucket: int):
        self.bucket, self.points, self._sum, self._count = bucket, [], 0.0, 0

    def add(self, tokens: int, loss: float) -> None:
        self._sum += loss
        self._count += 1
        if self._count == self.bucket:
            self.points.append([tokens, self._sum / self._count])
            self._sum, self._count = 0.0, 0


@torch.no_grad()
def evaluate(model: TinyGPT, eval_set: EvalSet, table, device, autocast) -> tuple[float, float | None]:
    """Mean loss per token over the eval set's real labels, in nats, and bits per byte: the
    text's own tokens' -log2 p summed over the UTF-8 bytes of the text (``None`` without text)."""
    model.eval()
    nats = text_nats = 0.0
    masks = (eval_set.real, eval_set.text if eval_set.text is not None else eval_set.real)
    for rows, log_probs in _label_log_probs(model, eval_set, table, device, autocast):
        real, text = (torch.from_numpy(np.ascontiguousarray(mask[rows])).to(device) for mask in masks)
        nats -= log_probs[real].sum().item()
        text_nats -= log_probs[text].sum().item()
    model.train()
    bits_per_byte = text_nats / math.log(2) / eval_set.text_bytes if eval_set.text is not None else None
    return nats / eval_set.tokens, bits_per_byte


def _label_log_probs(model: TinyGPT, batches, table, device, autocast):
    """Each eval batch's rows and its labels' log-probabilities (float32); called under
    ``torch.no_grad`` by the evaluations, whose sets share ``inputs``, ``position_ids``
    and ``labels``."""
    for begin in range(0, len(batches.inputs), EVAL_BATCH):
        rows = slice(begin, begin + EVAL_BATCH)
        inputs, positions, labels = _on_device(
            *(
                torch.from_numpy(np.ascontiguousarray(a[rows]))
                for a in (batches.inputs, batches.position_ids, batches.labels)
            ),
            device,
            table,
        )
        with autocast:
            log_probs = model.label_log_probs(inputs, positions, labels).float()
        yield rows, log_probs


@torch.no_grad()
def evaluate_choices(model: TinyGPT, choice_set: MultipleChoiceSet, table, device, autocast) -> dict:
    """Each choice's summed log-likelihood of its continuation, scored per character."""
    model.eval()
    sums = []
    for rows, log_probs in _label_log_probs(model, choice_set, table, device, autocast):
        mask = torch.from_numpy(np.ascontiguousarray(choice_set.continuation[rows])).to(device)
        sums.append((log_probs * mask).sum(dim=1).double().cpu().numpy())
    model.train()
    return score(choice_set, np.concatenate(sums))


class _EvalCurves:
    """Every eval set's points over training: nats/token, bits/byte, multiple-choice scores."""

    def __init__(self, eval_sets: list[EvalSet | MultipleChoiceSet]):
        self.sets = eval_sets
        self.nats = {s.name: [] for s in eval_sets if isinstance(s, EvalSet)}
        self.bits: dict[str, list] = {}
        self.choices = {s.name: [] for s in eval_sets if isinstance(s, MultipleChoiceSet)}

    def evaluate(self, model, table, device, autocast, tokens: int) -> None:
        for eval_set in self.sets:
            if isinstance(eval_set, MultipleChoiceSet):
                self.choices[eval_set.name].append([tokens, evaluate_choices(model, eval_set, table, device, autocast)])
                continue
            nats, bits_per_byte = evaluate(model, eval_set, table, device, autocast)
            self.nats[eval_set.name].append([tokens, nats])
            if bits_per_byte is not None:
                self.bits.setdefault(eval_set.name, []).append([tokens, bits_per_byte])

    @staticmethod
    def final(curves: dict) -> dict:
        return {name: points[-1][1] for name, points in curves.items()}
