"""Multiple-choice eval files (``--eval-mc``): questions, their choices and the right answer.

A file is JSON lines (``.jsonl``, optionally ``.gz``), one question a line, in one of the
shapes the common benchmarks ship (the first field found wins):

- the context: ``ctx`` (HellaSwag; or ``ctx_a`` + ``ctx_b``), ``question`` (a string, or
  ARC's ``{"stem": ...}``), ``goal`` (PIQA), ``context``;
- the choices: ``endings`` (HellaSwag), ``choices`` (a list of strings, ARC's
  ``{"text": [...], "label": [...]}`` or a list of ``{"text", "label"}``), ``sol1``,
  ``sol2``, ... (PIQA);
- the answer: ``label`` or ``answer`` (an index, or a digit string), or ``answerKey``
  (ARC: matched against the choices' labels, else ``A``/``1`` for the first).

A row that is not JSON, lacks one of the three or names an answer outside the choices is
skipped and counted, and the first few are reported with the file's name and line.

Scoring (OLMES's "per char" normalization): each choice is the continuation ``" " +
choice`` of its context; the proxy's log-likelihood of the continuation's tokens, divided
by its characters, ranks the choices. The set's accuracy is the share of questions whose
right answer ranks first; its loss is the mean over questions of minus the right answer's
normalized log-likelihood (nats per character: lower is better, and the same unit whatever
the tokenizer). Each choice is one row of ``seq_len`` labels: a separator (the EOD, else
the BOS), the context, the continuation; a context too long keeps its end.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CONTEXT_FIELDS = ("ctx", "question", "goal", "context")
ANSWER_FIELDS = ("label", "answer", "answerKey")
REPORTED = 5  # malformed rows named one by one; the rest are counted
# A digit-string answer: ASCII ("²" passes str.isdigit and int() refuses it), and short
# (int() refuses over 4,300 digits; no benchmark has a billion choices).
DIGITS = re.compile(r"[0-9]{1,9}")


class MultipleChoiceError(ValueError):
    """A file of questions that cannot be used at all (unreadable, no valid row)."""


@dataclass
class Question:
    context: str
    choices: list[str]
    answer: int


@dataclass
class MultipleChoiceSet:
    name: str
    inputs: np.ndarray  # int64 [rows, seq_len], one row per choice
    labels: np.ndarray
    position_ids: np.ndarray
    continuation: np.ndarray  # bool [rows, seq_len]: a label of the choice's continuation
    characters: np.ndarray  # int64 [rows]: characters of the continuation
    question_of_row: np.ndarray  # int64 [rows]
    answers: np.ndarray  # int64 [questions]: the right choice's row
    skipped: int
    problems: list[str]

    @property
    def questions(self) -> int:
        return len(self.answers)

    def describe(self) -> dict:
        return {"questions": self.questions, "choices": len(self.labels), "skipped_records": self.skipped}


def _context(row: dict) -> str | None:
    if isinstance(row.get("ctx_a"), str) and isinstance(row.get("ctx_b"), str):
        return (row["ctx_a"] + " " + row["ctx_b"]).strip()
    for name in CONTEXT_FIELDS:
        value = row.get(name)
        if isinstance(value, dict):
            value = value.get("stem")
        if isinstance(value, str):
            return value
    return None


def _choices(row: dict) -> tuple[list[str], list[str]] | None:
    """The choices' texts and labels (labels empty when the file gives none)."""
    value = row.get("endings", row.get("choices"))
    if value is None and isinstance(row.get("question"), dict):
        value = row["question"].get("choices")  # ARC's original shape
    if isinstance(value, dict):
        texts, labels = value.get("text"), [str(label) for label in value.get("label") or []]
    elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        texts, labels = [item.get("text") for item in value], [str(item.get("label")) for item in value]
    elif value is None and "sol1" in row:
        texts, labels = [row[f"sol{k}"] for k in range(1, 10) if f"sol{k}" in row], []
    else:
        texts, labels = value, []
    if not isinstance(texts, list) or len(texts) < 2 or not all(isinstance(t, str) and t for t in texts):
        return None
    return texts, labels


def _answer(row: dict, labels: list[str], count: int) -> int | None:
    for name in ANSWER_FIELDS:
        value = row.get(name)
        if value is None:
            continue
        if isinstance(value, str) and value in labels:
            return labels.index(value)
        if isinstance(value, str) and len(value) == 1 and value.isalpha():
            value = ord(value.upper()) - ord("A")
        elif isinstance(value, str) and DIGITS.fullmatch(value):
            value = int(value) - (name == "answerKey")  # ARC's digit keys count from 1
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < count:
            return value
        return None
    return None


def parse(row: object) -> Question | str:
    """A row as a ``Question``, or the reason it is not one."""
    if not isinstance(row, dict):
        return "not a JSON object"
    context = _context(row)
    if context is None:
        return f"no context (one of {', '.join(CONTEXT_FIELDS)}, or ctx_a + ctx_b)"
    found = _choices(row)
    if found is None:
        return "no choices (endings, choices or sol1, sol2: two or more non-empty strings)"
    texts, labels = found
    given = next((row[name] for name in ANSWER_FIELDS if row.get(name) is not None), None)
    if given is None:
        return f"no answer (one of {', '.join(ANSWER_FIELDS)})"
    answer = _answer(row, labels, len(texts))
    if answer is None:
        return f"answer {given!r} is not one of the {len(texts)} choices"
    return Question(context, texts, answer)


def read_questions(path: Path) -> tuple[list[Question], int, list[str]]:
    """Every valid question of ``path``; the count of skipped rows and the first problems."""
    opener = gzip.open if path.suffix == ".gz" else open
    questions, skipped, problems = [], 0, []
    try:
        with opener(path, "rb") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError) as error:  # bad bytes or JSON, a 4,300-digit number, deep nesting
                    found = f"not JSON ({error.__class__.__name__})"
                else:
                    found = parse(row)
                if isinstance(found, Question):
                    questions.append(found)
                    continue
                skipped += 1
                if len(problems) < REPORTED:
                    problems.append(f"{path.name} line {number}: {found}")
    except (OSError, EOFError) as error:
        raise MultipleChoiceError(f"{path}: cannot be read ({error})") from None
    if not questions:
        raise MultipleChoiceError(f"{path}: no valid question ({'; '.join(problems) or 'the file is empty'})")
    return questions, skipped, problems


def choice_set(path: Path, tok, tokenizer: dict, seq_len: int) -> MultipleChoiceSet:
    """The questions of ``path`` as rows of tokens, one per choice, for ``tok``."""
    questions, skipped, problems = read_questions(path)
    separator = next((tokenizer.get(k) for k in ("eod_id", "bos_id") if tokenizer.get(k) is not None), 0)
    flat, counts = tok.encode_batch([q.context for q in questions])
    contexts = np.split(np.asarray(flat), np.cumsum(counts)[:-1])
    continuations = [" " + choice for q in questions for choice in q.choices]
    flat, counts = tok.encode_batch(continuations)
    pieces = np.split(np.asarray(flat), np.cumsum(counts)[:-1])
    rows = len(continuations)
    inputs, labels = np.full((rows, seq_len), separator, dtype=np.int64), np.zeros((rows, seq_len), dtype=np.int64)
    positions, continuation = np.zeros((rows, seq_len), dtype=np.int64), np.zeros((rows, seq_len), dtype=bool)
    question_of_row = np.repeat(np.arange(len(questions)), [len(q.choices) for q in questions])
    for row, (question, piece) in enumerate(zip(question_of_row, pieces, strict=True)):
        tokens = np.concatenate([[separator], contexts[question], piece])[-(seq_len + 1) :]
        size, tail = len(tokens) - 1, min(len(piece), len(tokens) - 1)
        inputs[row, :size], labels[row, :size] = tokens[:-1], tokens[1:]
        whole = len(tokens) == len(contexts[question]) + len(piece) + 1  # the separator kept: its own document
        positions[row, :size] = np.concatenate([[0], np.arange(size - 1)]) if whole else np.arange(size)
        continuation[row, size - tail : size] = True
    first_row = np.concatenate([[0], np.cumsum([len(q.choices) for q in questions])[:-1]])
    answers = first_row + np.array([q.answer for q in questions])
    characters = np.array([len(text) for text in continuations], dtype=np.int64)
    name = f"mc:{path.name}"
    return MultipleChoiceSet(
        name, inputs, labels, positions, continuation, characters, question_of_row, answers, skipped, problems
    )


def score(set_: MultipleChoiceSet, log_likelihoods: np.ndarray) -> dict:
    """Accuracy and the right answers' mean nats per character, from each row's summed
    continuation log-likelihood."""
    normalized = log_likelihoods / set_.characters
    best = np.full(set_.questions, -np.inf)
    np.maximum.at(best, set_.question_of_row, normalized)
    right = normalized[set_.answers]
    return {"accuracy": float(np.mean(right >= best)), "answer_nats_per_char": float(-np.mean(right))}
