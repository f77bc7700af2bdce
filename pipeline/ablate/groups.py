"""The DATA of an ablation by tokenizer, each group with its own eval sets and vocabulary.

DATA tokenized differently cannot share token ids, so each tokenizer gets its own copy of
every eval set, encoded from the same text (``evaltexts`` chooses the documents once, with
the first DATA's tokenizer), and its own vocabulary remap; a model trains and is scored in
its DATA's tokenizer. Per token the losses of two tokenizers differ in what a token is;
per UTF-8 byte of the same text they do not, which is why the verdict compares DATA
tokenized differently on bits per byte (``verdict``).

A DATA that keeps no text (token shards, a mixture) has its held-out set in its own
tokenizer only; another tokenizer's models are not scored on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.ablate.data import AblationData
from pipeline.ablate.evalsets import EvalSet, EvalSetError, Vocabulary, held_out_token_set, text_set
from pipeline.ablate.evaltexts import EvalTexts, file_texts, held_out_texts
from pipeline.ablate.multiple_choice import MultipleChoiceSet, choice_set
from pipeline.formats.token_shards import COMPATIBILITY_KEYS
from pipeline.text.tokenizers import load_tokenizer


@dataclass
class TokenizerGroup:
    tokenizer: dict  # the DATA's sidecar keys (tokenizer, spec, vocabulary, EOD, BOS)
    datas: list[AblationData]
    sets: list[EvalSet | MultipleChoiceSet]
    vocab: Vocabulary

    @property
    def name(self) -> str:
        return str(self.tokenizer.get("tokenizer"))


def tokenizer_key(tokenizer: dict) -> tuple:
    return tuple(tokenizer.get(key) for key in COMPATIBILITY_KEYS)


def build_groups(
    datas: list[AblationData],
    eval_files: list[Path],
    choice_files: list[Path],
    seq_len: int,
    max_tokens: int,
    remap_vocab: bool,
    progress: Callable[[str], None],
    held_out_weighed: bool = True,
) -> list[TokenizerGroup]:
    """Group the DATA by tokenizer (first appearance first) and make each group's eval sets
    (held-out, ``--eval`` texts, ``--eval-mc`` questions). A DATA that holds out no document
    is refused when the held-out sets weigh in the objective, else it goes without one
    (``prep mix search``'s small trial mixtures, whose held-out sets are not compared)."""
    by_key: dict[tuple, list[AblationData]] = {}
    for data in datas:
        by_key.setdefault(tokenizer_key(data.tokenizer), []).append(data)
    reference, framing = load_data_tokenizer(datas[0].tokenizer), framing_tokens(datas[0].tokenizer)
    holding = [bool(data.held_out.any()) for data in datas]
    for data, holds in zip(datas, holding, strict=True):
        if not holds and held_out_weighed:
            raise EvalSetError(f"held-out:{data.name}: no document of {data.path} is held out; raise --held-out")
        if not holds:
            progress(f"held-out:{data.name}: no document of {data.path} is held out, so it has no held-out set")
    held = [
        held_out_texts(data, reference, framing, max_tokens) if holds else None for data, holds in zip(datas, holding)
    ]
    repeated = _repeated_texts(held, progress)
    files = [file_texts(path, reference, framing, max_tokens) for path in eval_files]
    groups = []
    for members in by_key.values():
        meta = members[0].tokenizer
        tok = reference if tokenizer_key(meta) == tokenizer_key(datas[0].tokenizer) else load_data_tokenizer(meta)
        sets = []
        for data, texts, again, holds in zip(datas, held, repeated, holding, strict=True):
            if again or not holds:
                continue
            if texts is not None:
                sets.append(_text_set(texts, tok, meta, seq_len))
            elif any(data is member for member in members):
                sets.append(held_out_token_set(data, seq_len, max_tokens))
            else:
                progress(f"held-out:{data.name} keeps no text, so the {meta.get('tokenizer')} models skip it")
        sets += [_text_set(texts, tok, meta, seq_len) for texts in files]
        sets += [choice_set(path, tok, meta, seq_len) for path in choice_files]
        vocab_size = int(meta["vocab_size"])
        occurring = Vocabulary.occurring(vocab_size, members, sets) if remap_vocab else None
        groups.append(TokenizerGroup(meta, members, sets, occurring or Vocabulary(vocab_size, None)))
    return groups


def _repeated_texts(held: list[EvalTexts | None], progress: Callable[[str], None]) -> list[bool]:
    """For each DATA's held-out texts, whether an earlier DATA's are the very same documents
    (two runs of one input that differ only in tokenizer, say): such a set is scored once,
    under the first name, or the objective and the verdict would count it twice."""
    first: dict[tuple[str, ...], str] = {}
    repeated = []
    for texts in held:
        key = tuple(texts.texts) if texts is not None else None
        again = key is not None and key in first
        if again:
            progress(f"{texts.name} holds the same documents as {first[key]}: scored once, as {first[key]}")
        elif key is not None:
            first[key] = texts.name
        repeated.append(again)
    return repeated


def _text_set(texts: EvalTexts, tok, meta: dict, seq_len: int) -> EvalSet:
    if not texts.texts:
        raise EvalSetError(f"{texts.name}: no text fits --eval-tokens")
    return text_set(texts, tok, meta, seq_len)


def framing_tokens(tokenizer: dict) -> int:
    """Tokens the tokenize stage adds around each document (BOS, EOD) for this sidecar."""
    return (tokenizer.get("bos_id") is not None) + (tokenizer.get("eod_id") is not None)


def load_data_tokenizer(tokenizer: dict):
    """The tokenizer a DATA's sidecar names; ``EvalSetError`` when it cannot be loaded here."""
    try:
        return load_tokenizer(tokenizer["tokenizer_spec"] or tokenizer["tokenizer"])
    except (ValueError, OSError) as error:
        raise EvalSetError(f"cannot load the DATA's tokenizer {tokenizer.get('tokenizer')!r}: {error}") from None
