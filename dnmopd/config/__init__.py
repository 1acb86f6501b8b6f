"""Typed configuration: dataclass trees loaded from YAML with overrides and precise errors."""

from dnmopd.config.loader import ConfigError, RawConfig, dump_yaml, load_config, load_yaml, to_plain

__all__ = ["ConfigError", "RawConfig", "dump_yaml", "load_config", "load_yaml", "to_plain"]
