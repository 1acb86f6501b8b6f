"""Typed configuration: dataclass trees loaded from YAML with overrides and precise errors.

    loader  YAML files (`extends:`, `--set key.path=value`) -> typed dataclass trees; errors name key and file
    cli     the `--config` / `--set` arguments of the command lines
"""

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
