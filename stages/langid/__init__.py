"""``langid``: label each document's language with fastText's lid.176 and keep the wanted
ones (``stage``); detection (``model``), per-language thresholds and groups of close
languages (``thresholds``)."""

from stages.langid.model import bundled_model_path, detect, load_model
from stages.langid.stage import LANG, LANG_2, LANG_2_SCORE, LANG_SCORE, LangId

__all__ = ["LANG", "LANG_2", "LANG_2_SCORE", "LANG_SCORE", "LangId", "bundled_model_path", "detect", "load_model"]
