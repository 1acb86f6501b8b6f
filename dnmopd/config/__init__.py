"""Typed configuration: dataclass trees loaded from YAML with overrides and precise errors."""

from dnmopd.config.loader import (
    Backend,
    Choice,
    ConfigError,
    FieldValueError,
    RawConfig,
    dump_yaml,
    load_config,
    load_yaml,
    to_plain,
)

__all__ = ["Backend", "Choice", "ConfigError", "FieldValueError", "RawConfig", "dump_yaml", "load_config", "load_yaml",
           "to_plain"]
