"""Classes chosen by name in the config (backends, run modes), imported only when one is asked for."""

from __future__ import annotations

import importlib


class LazyRegistry:
    """`kind` names what is chosen (`rollout backend`, `run mode`); `entries` maps each name to the dotted path
    `module:Class` of its class."""

    def __init__(self, kind: str, entries: dict[str, str]):
        self.kind = kind
        self.entries = dict(entries)

    @property
    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self.entries)

    def __call__(self, name: str) -> type:
        """The class registered as `name` (its module is imported now)."""
        if name not in self.entries:
            raise ValueError(f"{self.kind} {name!r}: use one of {', '.join(self.names)}")
        module, attribute = self.entries[name].split(":")
        return getattr(importlib.import_module(module), attribute)
