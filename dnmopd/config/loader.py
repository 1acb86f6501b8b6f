"""Typed configs from YAML: `extends` composition, `--set a.b=c` overrides, errors that name key and file.

A config file is a YAML mapping whose keys are the fields of a dataclass tree. It may start with

    extends: [../models/tiny.yaml, ../methods/dn_mopd.yaml]

(paths relative to the file): those files are loaded first and deep-merged in order (mappings merge, lists
and scalars replace), then the file's own keys, then the command-line overrides. A mapping tagged `!replace`
(`method: !replace {...}`) replaces what earlier files set under its key instead of merging into it, so a
preset can be complete on its own (e.g. a method file over a recipe that already names another method).
Every value remembers where it came from, so an unknown key, a wrong type or a failed validation is reported as
`configs/demo_cpu.yaml:12: train.updates: expected int, got 'ten'`. A `__post_init__` that raises
`FieldValueError(key, problem)` is reported at that key's own line; any other ValueError at its section's, with
the `--set` overrides inside the section. A YAML text (file or `--set` value) must be a regular file, expand
to at most `MAX_VALUES` values (YAML aliases can make a small text expand exponentially) and nest at most
`MAX_DEPTH` deep.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml

from dnmopd.io import open_regular_file

T = TypeVar("T")
KeyPath = tuple[str, ...]
MAX_VALUES = 100_000
"""Values one YAML text may expand to, aliases expanded."""
MAX_DEPTH = 100
"""Nesting depth of one YAML text."""


class ConfigError(ValueError):
    """A config value is unknown, mistyped or invalid; the message names the key and where it was set."""


class FieldValueError(ValueError):
    """An invalid value found by a config's own validation: `key` is the field (dotted below the config that
    raises it, e.g. `lr` or `parallel.tensor`), `problem` what is wrong with it."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}")
        self.key, self.problem = key, problem


@dataclasses.dataclass(frozen=True)
class Backend:
    """A config that is one of several dataclasses, chosen by the `backend` key of its own mapping:

        teacher: Annotated[Choice, Backend(teacher_config_class)]

    reads `{backend: sglang, urls: [...]}` as `Choice("sglang", SGLangTeacher.Config(urls=[...]))`."""

    resolve: Callable[[str], type]
    """Maps the `backend` value to the dataclass to build (raises ValueError for an unknown value)."""
    default: str | None = None


@dataclasses.dataclass(frozen=True)
class Choice:
    backend: str
    config: Any


@dataclasses.dataclass(frozen=True)
class Source:
    where: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.where}:{self.line}" if self.line else self.where


class Replace(dict):
    """A mapping that replaces, rather than merges into, the value of its key (YAML tag `!replace`)."""


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!replace", lambda loader, node: Replace(loader.construct_mapping(node, deep=True)))


class RawConfig:
    """Merged plain data of one or more YAML files plus overrides, with the source of every key."""

    def __init__(self, data: dict | None = None, origins: dict[KeyPath, Source] | None = None):
        self.data: dict = data or {}
        self.origins: dict[KeyPath, Source] = origins or {}

    def source(self, path: KeyPath) -> Source:
        while path:
            if path in self.origins:
                return self.origins[path]
            path = path[:-1]
        return self.origins.get((), Source("<defaults>"))

    def overrides_under(self, path: KeyPath) -> str:
        """`` (--set a.b=1, --set a.c=2)`` for the overrides of keys below ``path``, else empty."""
        found = sorted({str(s) for p, s in self.origins.items() if p[:len(path)] == path and
                        str(s).startswith("--set ")})
        return f" (with {', '.join(found)})" if found else ""

    def merge(self, other: RawConfig) -> None:
        _deep_merge(self.data, other.data, (), self.origins, other.origins)

    def override(self, assignment: str) -> None:
        """Apply `key.path=value` (YAML value); a numeric part indexes a list (`teachers.models.0.model_path=...`)."""
        key, sep, text = assignment.partition("=")
        path = tuple(part.strip() for part in key.split("."))
        if not sep or not all(path):
            raise ConfigError(f"--set {assignment!r}: expected key.path=value")
        try:
            value = _parse_yaml(text, f"--set {assignment}")[1] if text.strip() else ""
        except yaml.YAMLError as err:
            problem = " ".join(str(getattr(err, "problem", None) or err).split())
            raise ConfigError(f"--set {assignment}: {'.'.join(path)}: the value {text!r} is not valid YAML "
                              f"({problem}); quote it to pass a string") from None
        node = self.data
        for i, part in enumerate(path):
            where = ".".join(path[: i + 1])
            last = i == len(path) - 1
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(f"--set {assignment}: {where}: no item {part} in a list of {len(node)}")
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                else:
                    node = node.setdefault(part, {})
            else:
                raise ConfigError(f"--set {assignment}: {'.'.join(path[:i])} is neither a mapping nor a list")
        self.origins[path] = Source(f"--set {assignment}")
        for stale in [p for p in self.origins if p[: len(path)] == path and len(p) > len(path)]:
            del self.origins[stale]


def _deep_merge(base: dict, update: Mapping, path: KeyPath, origins: dict, update_origins: dict) -> None:
    for key, value in update.items():
        child = (*path, key)
        if isinstance(value, Mapping) and not isinstance(value, Replace) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value, child, origins, update_origins)
        else:
            base[key] = value
            for stale in [p for p in origins if p[: len(child)] == child]:
                del origins[stale]
        origins.update({p: s for p, s in update_origins.items() if p[: len(child)] == child})


SHIPPED_CONFIGS = Path(__file__).resolve().parents[1] / "configs"
"""The checkout's configs/ as installed with the package (pyproject.toml's wheel.packages)."""


def config_file(path: str | Path) -> Path:
    """`path`; a relative `configs/...` path that is not here names the config shipped with dnmopd, so the
    commands take `--config configs/demo_cpu.yaml` outside a checkout too."""
    path = Path(path)
    if not path.exists() and not path.is_absolute() and path.parts[:1] == ("configs",):
        shipped = SHIPPED_CONFIGS.joinpath(*path.parts[1:])
        if shipped.is_file():
            return shipped
    return path


def load_yaml(path: str | Path, _seen: tuple[Path, ...] = ()) -> RawConfig:
    """Load one YAML file (and the files it extends) into a RawConfig (`config_file` finds shipped configs)."""
    path = config_file(path)
    resolved = path.resolve()
    if resolved in _seen:
        raise ConfigError(f"{path}: circular extends through {' -> '.join(str(p) for p in _seen)}")
    try:
        with open_regular_file(path) as handle:
            text = handle.read().decode("utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        node, data = _parse_yaml(text, str(path))
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must be a mapping of keys to values")
    origins: dict[KeyPath, Source] = {(): Source(str(path))}
    _record_origins(node, (), str(path), origins)
    result = RawConfig()
    extends = data.pop("extends", [])
    for base in [extends] if isinstance(extends, str) else extends:
        result.merge(load_yaml(path.parent / base, (*_seen, resolved)))
    result.merge(RawConfig(data, origins))
    result.origins[()] = Source(str(path))
    return result


def _parse_yaml(text: str, where: str) -> tuple[yaml.Node | None, Any]:
    """The node tree and the value of one YAML text, refused past ``MAX_VALUES`` values or ``MAX_DEPTH`` levels."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        if _expanded_size(node, 0, {}) > MAX_VALUES:
            raise ConfigError(f"{where}: expands to more than {MAX_VALUES} values (YAML aliases?)")
        return node, loader.construct_document(node)
    except RecursionError:
        raise ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep") from None
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, depth: int, sizes: dict[int, int]) -> int:
    """Values ``node`` stands for with its aliases expanded (each shared node counted once per use)."""
    if depth > MAX_DEPTH:
        raise RecursionError
    if id(node) not in sizes:
        children = [part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) else \
            node.value if isinstance(node, yaml.SequenceNode) else []
        sizes[id(node)] = 1 + sum(_expanded_size(child, depth + 1, sizes) for child in children)
    return sizes[id(node)]


_YAML_KINDS = {"int": "an integer", "float": "a number", "bool": "a boolean", "null": "null",
               "timestamp": "a date"}


def _record_origins(node: yaml.Node, path: KeyPath, file: str, origins: dict[KeyPath, Source]) -> None:
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            origins[(*path, str(i))] = Source(file, item.start_mark.line + 1)
            _record_origins(item, (*path, str(i)), file, origins)
    if not isinstance(node, yaml.MappingNode):
        return
    seen = set()
    for key_node, value_node in node.value:
        key = str(key_node.value)
        if key_node.tag not in ("tag:yaml.org,2002:str", "tag:yaml.org,2002:merge"):
            kind = key_node.tag.rsplit(":", 1)[-1]
            raise ConfigError(f"{file}:{key_node.start_mark.line + 1}: key {'.'.join((*path, key))}: YAML reads it as "
                              f"{_YAML_KINDS.get(kind, kind)}, not as a name; quote it ('{key}')")
        if key in seen:
            raise ConfigError(f"{file}:{key_node.start_mark.line + 1}: duplicate key {'.'.join((*path, key))}")
        seen.add(key)
        origins[(*path, key)] = Source(file, key_node.start_mark.line + 1)
        _record_origins(value_node, (*path, key), file, origins)


def load_config(cls: type[T], paths: str | Path | Iterable[str | Path] = (), overrides: Iterable[str] = (), *,
                check_inputs: bool = False, check_options: Mapping[str, object] | None = None) -> T:
    """Build the dataclass `cls` from YAML files (merged in order) and `--set` overrides. With `check_inputs`, a
    config that has a `check_inputs()` method (the files and folders a command reads must exist on this machine,
    which loading alone does not ask: a config may be written on one machine for another) has it run with
    `check_options` as keywords, and its `FieldValueError` reported at the key's line, as the loader's own errors
    are."""
    raw = RawConfig()
    for path in [paths] if isinstance(paths, str | Path) else paths:
        raw.merge(load_yaml(path))
    for assignment in overrides:
        raw.override(assignment)
    config = build(cls, raw)
    if check_inputs and hasattr(config, "check_inputs"):
        try:
            config.check_inputs(**(check_options or {}))
        except FieldValueError as err:
            key = tuple(err.key.split("."))
            raise ConfigError(f"{raw.source(key)}: {_dotted(key)}: {err.problem}") from None
    return config


def build(cls: type[T], raw: RawConfig) -> T:
    return _build_dataclass(cls, raw.data, (), raw)


def _dotted(path: KeyPath) -> str:
    return ".".join(path) or "<root>"


def _build_dataclass(cls, data, path: KeyPath, raw: RawConfig):
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{raw.source(path)}: {_dotted(path)}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls, include_extras=True)
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {sorted(fields)}"
            raise ConfigError(f"{raw.source((*path, key))}: unknown key {_dotted((*path, key))}{hint}")
    kwargs = {name: _convert(hints[name], data[name], (*path, name), raw) for name in fields if name in data}
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and name not in kwargs:
            raise ConfigError(f"{raw.source(path)}: missing required key {_dotted((*path, name))}")
    try:
        return cls(**kwargs)
    except FieldValueError as err:
        key = (*path, *err.key.split("."))
        raise ConfigError(f"{raw.source(key)}: {_dotted(key)}: {err.problem}") from None
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{raw.source(path)}{raw.overrides_under(path)}: {_dotted(path)}: {err}") from None


def _convert(hint, value, path: KeyPath, raw: RawConfig):
    origin, args = typing.get_origin(hint), typing.get_args(hint)

    def fail(expected: str):
        raise ConfigError(f"{raw.source(path)}: {_dotted(path)}: expected {expected}, got {value!r}")

    if hint is Any:
        return value
    if origin is Annotated:
        backend = next((a for a in args[1:] if isinstance(a, Backend)), None)
        return _convert_choice(backend, value, path, raw) if backend else _convert(args[0], value, path, raw)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:  # X | None: X's own error names the key that is wrong
            return _convert(members[0], value, path, raw)
        for member in members:
            try:
                return _convert(member, value, path, raw)
            except ConfigError:
                pass
        fail(" or ".join(_type_name(a) for a in args))
    if origin is Literal:
        if value not in args:
            fail(f"one of {list(args)}")
        return value
    if dataclasses.is_dataclass(hint):
        return _build_dataclass(hint, value, path, raw)
    if origin in (list, tuple) or hint in (list, tuple):
        if not isinstance(value, list | tuple):
            fail("a list")
        item = args[0] if args else Any
        items = [_convert(item, v, (*path, str(i)), raw) for i, v in enumerate(value)]
        return tuple(items) if (origin or hint) is tuple else items
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            fail("a mapping")
        key_type, item = args if args else (str, Any)
        return {_convert(key_type, k, (*path, str(k)), raw): _convert(item, v, (*path, str(k)), raw)
                for k, v in value.items()}
    if hint is bool:
        if not isinstance(value, bool):
            fail("true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail("an integer")
        return value
    if hint is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-6 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                fail("a number")
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            fail("a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            fail("a string")
        return value
    if hint is Path:
        if not isinstance(value, str):
            fail("a path")
        return Path(value)
    raise TypeError(f"config field {_dotted(path)} has an unsupported type {hint!r}")


def _convert_choice(backend: Backend, value, path: KeyPath, raw: RawConfig) -> Choice:
    if isinstance(value, Choice):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"{raw.source(path)}: {_dotted(path)}: expected a mapping, got {value!r}")
    name = value.get("backend", backend.default)
    if name is None:
        raise ConfigError(f"{raw.source(path)}: {_dotted(path)}: missing required key backend")
    try:
        cls = backend.resolve(name)
    except ValueError as err:
        raise ConfigError(f"{raw.source((*path, 'backend'))}: {_dotted((*path, 'backend'))}: {err}") from None
    rest = {k: v for k, v in value.items() if k != "backend"}
    return Choice(name, _build_dataclass(cls, rest, path, raw))


def _type_name(hint) -> str:
    return getattr(hint, "__name__", str(hint))


def to_plain(config) -> Any:
    """A dataclass tree as plain YAML-serializable data (paths as strings, tuples as lists)."""
    if isinstance(config, Choice):
        return {"backend": config.backend, **to_plain(config.config)}
    if dataclasses.is_dataclass(config):
        return {f.name: to_plain(getattr(config, f.name)) for f in dataclasses.fields(config) if f.init}
    if isinstance(config, Mapping):
        return {str(k): to_plain(v) for k, v in config.items()}
    if isinstance(config, list | tuple):
        return [to_plain(v) for v in config]
    if isinstance(config, Path):
        return str(config)
    return config


def dump_yaml(config) -> str:
    return yaml.safe_dump(to_plain(config), sort_keys=False, default_flow_style=False)
