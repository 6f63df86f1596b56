"""Files and stdin: the configuration file, manifests, directories of manifests (the shell).

:func:`load_config` takes what :func:`policylib.config.load_config` takes, or a path to a YAML or JSON
file; :func:`read_documents` reads ``-f`` arguments as kubectl does. Everything here hands text to the
pure parsers of :mod:`policylib.config` and :mod:`policylib.documents`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence, TextIO

import yaml

from .. import config as _config
from ..config import Config
from ..documents import Document, parse_documents, yaml_problem
from ..errors import ConfigError, InputError


def load_config(source: str | Path | Mapping[str, Any] | Config | None = None) -> Config:
    """Rule C1: load settings from a YAML/JSON file path, a dict, or ``None`` (the defaults).

    A file may be a configuration or the chart's values file (its ``config:`` section; rule C9).
    Raises :class:`ConfigError` naming the file, and each key path and what is allowed.
    """
    if source is None or isinstance(source, (Config, Mapping)):
        return _config.load_config(source)
    return load_config_file(source)[0]


def load_config_file(source: str | Path) -> tuple[Config, str]:
    """The configuration in a file, and what the file was (``config file PATH`` or ``the config: section of
    the chart values file PATH``; rule C9)."""
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError("", f"cannot read config file: {e.strerror or e}", source=str(path)) from None
    return load_config_text(text, str(path))


def load_config_text(text: str, where: str) -> tuple[Config, str]:
    """The configuration in YAML ``text`` read from ``where`` (a file, a ConfigMap), and what it was."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError("", f"invalid YAML: {yaml_problem(e)}", source=where) from None
    try:
        body, values = _config.chart_values_config(data)
    except ConfigError as e:
        raise ConfigError(e.path, e.message, source=where) from None
    prefix = "config." if values else ""
    try:
        config = _config.config_from_dict(body)
    except ConfigError as e:
        if e.errors:
            raised = ConfigError.from_errors(e.errors, prefix + (e.path[:-len(e.errors[0].field)]
                                                                 if e.path.endswith(e.errors[0].field) else ""))
            raise ConfigError(raised.path, raised.message, source=where, errors=e.errors) from None
        raise ConfigError(prefix + e.path if e.path else e.path, e.message, source=where, errors=e.errors) from None
    return config, (f"the config: section of the chart values file {where}" if values else f"config file {where}")


def _read_source(path: str, stdin: TextIO) -> str:
    if path == "-":
        return stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None


#: What ``-f DIR`` reads, as kubectl's ``FileExtensions`` (case-sensitive).
MANIFEST_EXTENSIONS = (".yaml", ".yml", ".json")


def _display(path: str) -> str:
    return "<stdin>" if path == "-" else path


def source_files(path: str, recursive: bool = False) -> list[str]:
    """The files ``-f path`` stands for: ``path`` itself (or ``-``), or for a directory
    every ``*.yaml``, ``*.yml`` and ``*.json`` file in it, sorted by name; with
    ``recursive`` subdirectories are walked too, in the same name order (kubectl's
    ``-R``; symbolic links to directories are not followed, as in filepath.Walk)."""
    if path == "-" or not os.path.isdir(path):
        return [path]
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    files: list[str] = []
    for entry in entries:
        full = os.path.join(path, entry.name)
        if entry.is_dir(follow_symlinks=False):
            if recursive:
                files += source_files(full, recursive=True)
        elif entry.name.endswith(MANIFEST_EXTENSIONS):
            files.append(full)
    return files


def read_documents(paths: Sequence[str], stdin: TextIO, recursive: bool = False,
                   require_objects: bool = False) -> list[Document]:
    """Every object in ``paths`` (files, directories, ``-``), in order.

    With ``require_objects`` a path that holds no object at all (an empty file or
    stdin, a ``List`` without items, a directory without manifests) is an
    :class:`InputError` ``no Kubernetes objects in PATH``.
    """
    docs: list[Document] = []
    for path in paths:
        found: list[Document] = []
        for file in source_files(path, recursive):
            found += parse_documents(_read_source(file, stdin), _display(file))
        if require_objects and not any(isinstance(d.obj, dict) and d.obj.get("kind") for d in found):
            # a mapping without a kind ({} from a failed render) is no Kubernetes object either
            raise InputError(f"no Kubernetes objects in {_display(path)}")
        docs += found
    return docs
