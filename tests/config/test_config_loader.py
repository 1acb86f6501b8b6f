"""The YAML config loader: composition, overrides, type conversion and errors that name key and file."""

import dataclasses
import os
import textwrap
from pathlib import Path
from typing import Annotated, Literal

import pytest
import yaml

from dnmopd.config import Backend, Choice, ConfigError, FieldValueError, dump_yaml, load_config


@dataclasses.dataclass(kw_only=True)
class Inner:
    lr: float = 1e-6
    """Learning rate."""
    betas: tuple[float, ...] = (0.9, 0.98)
    kind: Literal["adam", "sgd"] = "adam"

    def __post_init__(self):
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


@dataclasses.dataclass(kw_only=True)
class Root:
    name: str
    updates: int = 80
    path: Path | None = None
    optimizer: Inner = dataclasses.field(default_factory=Inner)
    weights: dict[str, float] = dataclasses.field(default_factory=dict)
    flags: list[bool] = dataclasses.field(default_factory=list)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_extends_merges_in_order_and_overrides_win(tmp_path):
    write(tmp_path, "base/a.yaml", "name: a\noptimizer: {lr: 1.0e-5, kind: sgd}\nweights: {math: 2}\n")
    write(tmp_path, "base/b.yaml", "optimizer: {lr: 2.0e-5}\n")
    run = write(tmp_path, "run.yaml", "extends: [base/a.yaml, base/b.yaml]\nupdates: 3\npath: out\n")
    config = load_config(Root, run, ["optimizer.betas=[0.5, 0.6]", "weights.code=1"])
    assert config.name == "a" and config.updates == 3 and config.path == Path("out")
    assert config.optimizer == Inner(lr=2e-5, betas=(0.5, 0.6), kind="sgd")
    assert config.weights == {"math": 2.0, "code": 1.0}


def test_floats_written_without_a_dot_are_numbers(tmp_path):
    run = write(tmp_path, "run.yaml", "name: x\noptimizer: {lr: 1e-6}\n")
    assert load_config(Root, run).optimizer.lr == 1e-6


@pytest.mark.parametrize(
    "text, override, message",
    [("name: x\nupdaets: 3\n", None, r"run.yaml:2: unknown key updaets; did you mean 'updates'\?"),
     ("name: x\nupdates: ten\n", None, r"run.yaml:2: updates: expected an integer, got 'ten'"),
     ("name: x\noptimizer:\n  kind: rmsprop\n", None, r"run.yaml:3: optimizer.kind: expected one of"),
     ("name: x\noptimizer:\n  lr: -1.0\n", None, r"run.yaml:2: optimizer: lr must be > 0, got -1.0"),
     ("updates: 3\n", None, r"missing required key name"),
     ("name: x\nflags: [true, 2]\n", None, r"run.yaml:2: flags.1: expected true or false, got 2"),
     ("name: x\nname: y\n", None, r"run.yaml:2: duplicate key name"),
     ("name: x\n", "optimizer.lr=abc", r"--set optimizer.lr=abc: optimizer.lr: expected a number"),
     ("name: x\n", "updates", r"expected key.path=value"),
     ("- a\n- b\n", None, r"must be a mapping")],
)
def test_errors_name_the_key_and_where_it_was_set(tmp_path, text, override, message):
    run = write(tmp_path, "run.yaml", text)
    with pytest.raises(ConfigError, match=message):
        load_config(Root, run, [override] if override else [])


def test_error_in_an_extended_file_names_that_file(tmp_path):
    write(tmp_path, "base.yaml", "name: x\noptimizer:\n  kind: nope\n")
    run = write(tmp_path, "run.yaml", "extends: base.yaml\nupdates: 2\n")
    with pytest.raises(ConfigError, match=r"base.yaml:3: optimizer.kind"):
        load_config(Root, run)


def test_circular_extends_and_missing_files(tmp_path):
    write(tmp_path, "a.yaml", "extends: b.yaml\n")
    write(tmp_path, "b.yaml", "extends: a.yaml\n")
    with pytest.raises(ConfigError, match="circular extends"):
        load_config(Root, tmp_path / "a.yaml")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(Root, tmp_path / "missing.yaml")


def test_dump_round_trips(tmp_path):
    run = write(tmp_path, "run.yaml", "name: x\npath: out\nweights: {math: 2}\n")
    config = load_config(Root, run)
    dumped = write(tmp_path, "resolved.yaml", dump_yaml(config))
    assert load_config(Root, dumped) == config
    assert yaml.safe_load(dumped.read_text())["optimizer"]["betas"] == [0.9, 0.98]


@dataclasses.dataclass(kw_only=True)
class Fast:
    urls: list[str]


@dataclasses.dataclass(kw_only=True)
class Local:
    path: str = "model"


def backend_class(name):
    classes = {"fast": Fast, "local": Local}
    if name not in classes:
        raise ValueError(f"unknown backend {name!r}; use one of {sorted(classes)}")
    return classes[name]


@dataclasses.dataclass(kw_only=True)
class WithChoices:
    engine: Annotated[Choice, Backend(backend_class, default="local")] = dataclasses.field(
        default_factory=lambda: Choice("local", Local()))
    teachers: list[Annotated[Choice, Backend(backend_class)]] = dataclasses.field(default_factory=list)


def test_backend_choices_build_the_named_dataclass_and_dump_flat(tmp_path):
    run = write(tmp_path, "run.yaml", "teachers:\n  - {backend: fast, urls: [a, b]}\n  - {backend: local}\n")
    config = load_config(WithChoices, run)
    assert config.teachers == [Choice("fast", Fast(urls=["a", "b"])), Choice("local", Local())]
    assert config.engine == Choice("local", Local())
    assert yaml.safe_load(dump_yaml(config))["teachers"][0] == {"backend": "fast", "urls": ["a", "b"]}
    assert load_config(WithChoices, write(tmp_path, "again.yaml", dump_yaml(config))) == config


@pytest.mark.parametrize("text, message", [
    ("teachers:\n  - {backend: slow}\n", r"run.yaml:2: teachers.0.backend: unknown backend 'slow'"),
    ("teachers:\n  - {urls: [a]}\n", r"teachers.0: missing required key backend"),
    ("teachers:\n  - {backend: fast, url: a}\n", r"unknown key teachers.0.url; did you mean 'urls'"),
])
def test_backend_choice_errors(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(WithChoices, write(tmp_path, "run.yaml", text))


def test_replace_tag_replaces_instead_of_merging(tmp_path):
    write(tmp_path, "base.yaml", "name: x\nweights: {math: 2, code: 1}\noptimizer: {lr: 1.0e-5, kind: sgd}\n")
    run = write(tmp_path, "run.yaml", "extends: base.yaml\nweights: !replace {ifeval: 0.5}\n"
                                      "optimizer: !replace {lr: 3.0e-5}\n")
    config = load_config(Root, run)
    assert config.weights == {"ifeval": 0.5}
    assert config.optimizer == Inner(lr=3e-5)  # kind back to its default, not sgd
    with pytest.raises(ConfigError, match=r"bad.yaml:3: optimizer.lr: expected a number"):
        load_config(Root, write(tmp_path, "bad.yaml", "extends: base.yaml\nname: y\noptimizer: !replace {lr: x}\n"))


def test_set_indexes_lists(tmp_path):
    run = write(tmp_path, "run.yaml", "teachers:\n  - {backend: fast, urls: [a]}\n  - {backend: local}\n")
    config = load_config(WithChoices, run, ["teachers.1.path=elsewhere", "teachers.0.urls.0=b"])
    assert config.teachers == [Choice("fast", Fast(urls=["b"])), Choice("local", Local(path="elsewhere"))]
    with pytest.raises(ConfigError, match=r"teachers.2: no item 2 in a list of 2"):
        load_config(WithChoices, run, ["teachers.2.path=x"])
    with pytest.raises(ConfigError, match=r"teachers.0.urls.0 is neither a mapping nor a list"):
        load_config(WithChoices, run, ["teachers.0.urls.0.x=1"])


@dataclasses.dataclass(kw_only=True)
class Checked:
    rate: float = 0.5
    """A fraction."""

    def __post_init__(self):
        if not 0 <= self.rate <= 1:
            raise FieldValueError("rate", f"must be in [0, 1], got {self.rate}")


@dataclasses.dataclass(kw_only=True)
class WithOptional:
    name: str = "x"
    inner: Inner | None = None
    checked: Checked = dataclasses.field(default_factory=Checked)


@pytest.mark.parametrize("text, override, message", [
    # an error inside an optional section names the key, not the section's type
    ("inner:\n  kind: adam\n  lr: abc\n", None, r"run.yaml:3: inner.lr: expected a number, got 'abc'"),
    ("inner:\n  kindd: sgd\n", None, r"run.yaml:2: unknown key inner.kindd; did you mean 'kind'"),
    ("inner: 3\n", None, r"run.yaml:1: inner: expected a mapping, got 3"),
    # a FieldValueError points at the key's own line
    ("name: y\nchecked:\n  rate: 1.5\n", None, r"run.yaml:3: checked.rate: must be in \[0, 1\], got 1.5"),
    ("name: y\n", "checked.rate=-1", r"--set checked.rate=-1: checked.rate: must be in \[0, 1\], got -1.0"),
    # keys YAML does not read as names
    ("name: y\ninner:\n  1: x\n", None, r"run.yaml:3: key inner.1: YAML reads it as an integer, not as a name"),
    ("name: y\ntrue: 1\n", None, r"run.yaml:2: key true: YAML reads it as a boolean"),
    ("name: y\n2.5: 1\n", None, r"run.yaml:2: key 2.5: YAML reads it as a number"),
    # --set values that are not YAML
    ("name: y\n", "inner.betas=[1,", r"--set inner.betas=\[1,: inner.betas: the value '\[1,' is not valid YAML"),
    ("name: y\n", "name={a: b", r"--set name=\{a: b: name: the value '\{a: b' is not valid YAML"),
    ("name: y\n", "name=!!python/object:os.system x", r"--set name=!!python/object:os.system x: name: the value"),
])
def test_every_error_names_the_key_and_its_line(tmp_path, text, override, message):
    run = write(tmp_path, "run.yaml", text)
    with pytest.raises(ConfigError, match=message):
        load_config(WithOptional, run, [override] if override else [])


def test_a_field_error_in_an_extended_file_names_that_file_and_line(tmp_path):
    write(tmp_path, "base.yaml", "name: x\nchecked:\n  rate: 0.2\n")
    run = write(tmp_path, "run.yaml", "extends: base.yaml\nchecked: {rate: 7}\n")
    with pytest.raises(ConfigError, match=r"run.yaml:2: checked.rate: must be in"):
        load_config(WithOptional, run)
    assert str(FieldValueError("rate", "bad")) == "rate: bad"  # built directly, the message still names the key


def test_hostile_yaml_is_refused_with_the_file_named(tmp_path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(8))
    with pytest.raises(ConfigError, match=r"bomb.yaml: expands to more than 100000 values \(YAML aliases\?\)"):
        load_config(Root, write(tmp_path, "bomb.yaml", bomb))
    with pytest.raises(ConfigError, match=r"--set weights=.*: expands to more than 100000 values"):
        load_config(Root, write(tmp_path, "ok.yaml", "name: x\n"), ["weights=" + bomb.replace("\n", ", ")[:-2]
                                                                   .join("{}")])
    with pytest.raises(ConfigError, match=r"deep.yaml: nested more than 100 levels deep"):
        load_config(Root, write(tmp_path, "deep.yaml", "name: " + "[" * 10_000 + "]" * 10_000 + "\n"))
    fifo = tmp_path / "base.fifo"
    os.mkfifo(fifo)
    for target in (fifo, "/dev/zero"):
        with pytest.raises(ConfigError, match=r"cannot read config file .*not a regular file"):
            load_config(Root, write(tmp_path, "run.yaml", f"extends: {target}\nname: x\n"))
