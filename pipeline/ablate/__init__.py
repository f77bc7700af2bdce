"""``prep ablate`` as a library: prove a data choice on a small model before the big run.

Modules, by job: ``data`` (a DATA folder resolved and checked, its held-out slice and
training order), ``evaltexts`` (the eval documents' text, chosen once for every
tokenizer), ``evalsets`` (held-out and ``--eval`` sets as token windows, with their
text's bytes; the vocabulary remap), ``groups`` (the DATA by tokenizer, each with its
eval sets and vocabulary), ``model`` (the small GPT and its presets), ``trial`` (one
training run through the loader), ``health`` (spikes, NaN, data wait), ``verdict``
(differences against seed noise; bits per byte across tokenizers), ``projection`` (from
the trial to the full run), ``ablation`` (every trial, the ledger, resume), ``history``
(the ledger as a table), ``presets`` (the model sizes). Only ``model`` and ``trial``
import torch (``ablation`` through ``trial``); the command line imports ``ablation`` only
to train, so ``--history`` and ``--help`` need no torch.
"""
