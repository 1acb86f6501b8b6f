"""The `--config FILE ... --set KEY=VALUE ...` arguments of the command lines that take a config tree."""

from __future__ import annotations

import argparse
import sys
from typing import TypeVar

from dnmopd.config.loader import ConfigError, load_config

T = TypeVar("T")


def add_config_arguments(parser: argparse.ArgumentParser, what: str = "YAML config") -> None:
    parser.add_argument("--config", action="append", required=True, help=f"{what} (repeatable, merged in order)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config value, e.g. --set train.updates=10 (repeatable)")


def config_from_arguments(cls: type[T], args: argparse.Namespace, **check_options) -> T | None:
    """The config that `--config` and `--set` name, its inputs checked (`load_config`'s `check_inputs`, given
    `check_options`), or None once its error is printed (the caller exits 2)."""
    try:
        return load_config(cls, args.config, args.overrides, check_inputs=True, check_options=check_options)
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return None
