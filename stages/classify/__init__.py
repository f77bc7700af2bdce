"""``classify``: score documents with fastText classifiers and keep the best.

One or more fastText models (``.bin`` or ``.ftz``, any label set, read from disk, never
downloaded), each adding a float32 column ``<name>_score``: the probability of ``label``
for the document's text after ``pipeline.formats.fasttext_model.preprocess`` (the one
preprocessing ``prep classifier train`` uses too)::

    [[stages]]
    name = "classify"
    skip_sources = ["code"]        # optional: these pass unscored (null scores), undropped
    [[stages.models]]
    name = "quality"               # column quality_score, drop reason classify:quality
    path = "models/quality.bin"    # relative to the directory prep runs in
    label = "hq"                   # required: the label whose probability is the score
    keep_top = 0.1                 # keep the best 10% of each source over the whole run
    [[stages.models]]
    name = "english"
    path = "stages/models/lid.176.ftz"
    label = "en"
    min_score = 0.5                # or: drop documents scoring below 0.5

A model sets ``min_score`` or ``keep_top`` or neither (it then only adds its column). The
generic ``sources`` and ``[stages.per_source.<source>]`` apply (a per-source ``models``
list replaces the whole list for that source). A document dropped by several models is
named by the first in the list: reason ``classify:<name>``, ledger detail
``{"score": 0.31, "threshold": 0.5}`` (with ``"keep_top": 0.1`` for a keep_top model,
whose threshold is the score of the last document kept).

Decisions:

* ``label`` is required. fastText orders a model's labels by how often each occurred in
  its training data, so "the first label" of a two-label model is whichever class had
  more examples; a default would silently keep the worst documents when that flips.
* A text that the preprocessing leaves empty scores 0.0 (fastText would answer with the
  label prior), and so does a label fastText leaves out of its answer. Scores are capped
  at 1.0 (fastText reports p + 1e-5).
* ``keep_top = f`` keeps exactly ``ceil(f x N)`` of the N documents of each source that
  reach the stage (``f`` read as the decimal written: 0.1 of 1,234 keeps 124), ranked by
  score, ties by the hash of the id, then by unit and row (``topk``): the same documents
  for any worker count, split of files or resume.

Checked before any work starts: every key, the thresholds' ranges, and each model file (a
missing file or one without fastText's header is one line). The label is checked when a
worker first loads the model (a one-line error naming the model's labels): loading a
multi-GB model in the driver only to read its labels would cost its memory for the run.

Phases: with a keep_top model the stage is global (``phases`` declares them); with none it runs
per document like any other stage, scoring in ``process``, and costs no extra pass.

* ``map_unit`` loads each model once per worker process and scores every document once,
  writing ``scores/<source>/<unit>.arrow`` under the work folder (the id hash and one
  float32 per model; 12 bytes a document for one model) through ``unit.atomic``.
* no reduce phase.
* ``finalize`` (on the driver) finds each (source, keep_top model)'s threshold by radix
  selection over the score files (``topk``: bounded memory, about two passes) and writes
  ``thresholds.json`` atomically; run again, it writes the same bytes.
* ``open_unit`` + ``process`` read the unit's scores back (no model is loaded), check the
  ids against them, add the score columns and drop.

Global, the documents reaching the stage are written once to the work folder (zstd
Parquet) and read twice (map, then filter), plus the finalize step.
"""

from stages.classify.stage import Classify

__all__ = ["Classify"]
