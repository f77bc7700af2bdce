"""The error of a config the run cannot start with (its own module, so that the helpers
``config`` uses can raise it without importing ``config``)."""


class ConfigError(ValueError):
    """A config the run cannot start with; the message says what to change."""
