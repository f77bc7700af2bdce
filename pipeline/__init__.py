"""prep: a streaming preprocessing pipeline for LLM pretraining data."""

__version__ = "0.1.0"
