"""``prep classifier`` as a library: train a fastText document classifier on labeled
documents and measure it, for the ``classify`` stage to use.

- ``inputs``: labeled files, or sources under one label (globs, prep run folders), read
  with prep's readers; ``ClassifierError`` for what the user must fix;
- ``sampling``: which documents train and which are held out, by hashes of their ids;
- ``shuffle``: fastText's training file, in hash order, in bounded memory;
- ``train``: the whole of ``prep classifier train``: model, sidecar, held-out metrics;
- ``predict``: probabilities from a model, and ``prep classifier eval`` on labeled files;
- ``metrics``, ``tables``: accuracy, precision/recall/F1, AUC, calibration; as text.

The model file and its sidecar's name, and the one preprocessing, belong to
``pipeline.formats.fasttext_model``, which the ``classify`` stage reads too.
"""

from pipeline.classifier.inputs import ClassifierError, Source, labeled_files, labeled_source
from pipeline.classifier.predict import evaluate
from pipeline.classifier.tables import metrics_lines
from pipeline.classifier.train import Hyperparameters, default_threads, train

__all__ = [
    "ClassifierError",
    "Hyperparameters",
    "Source",
    "default_threads",
    "evaluate",
    "labeled_files",
    "labeled_source",
    "metrics_lines",
    "train",
]
