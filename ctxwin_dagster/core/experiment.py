"""One experiment, one set of settings, one Dagster home.

An experiment is a documents folder, a QA folder, a LanceDB URI, a cache folder, the models of
each role and the retrieval setting. It is kept in its Dagster home as ``ctxwin_experiment.json``
and the code location loads it from there (``$DAGSTER_HOME``), so every process of that home —
the CLI, the daemon and its sensors and schedules, the webserver, every run, ``ctxwin ask`` —
sees the same settings. A home without that file holds the default experiment: the sample in
``data/``. The default paths are written here and nowhere else.

Example::

    >>> exp = Experiment(name="contracts", documents_dir="/srv/contracts", qa_dir="/srv/qa",
    ...                  lancedb_uri="/srv/contracts-index")
    >>> exp.resource_config()["settings"]["documents_dir"]
    '/srv/contracts'
    >>> exp.resource_config()["lancedb"]["uri"]
    '/srv/contracts-index'
    >>> Experiment().name, Experiment().documents_dir
    ('sample', 'data/documents')

Plain Python only: no dagster import.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias

from ctxwin_dagster.core.json_types import JSONObject

__all__ = [
    "DEFAULT_CACHE_DIR",
    "DEFAULT_DOCUMENTS_DIR",
    "DEFAULT_GENERATED_QA_DIR",
    "DEFAULT_HOME",
    "default_home",
    "DEFAULT_LANCEDB_URI",
    "DEFAULT_QA_DIR",
    "DEFAULT_REPORTS_DIR",
    "DEFAULT_RESULTS_DIR",
    "EXPERIMENTS_DIR",
    "EXPERIMENT_FILE",
    "RESOURCE_SECTIONS",
    "SAMPLE",
    "SettingValue",
    "Experiment",
    "ExperimentConflict",
    "experiment_name_for",
    "folder_ids_file",
    "home_experiment",
    "load_experiment_file",
]

#: The sample experiment's folders (relative to the project folder, where ``workspace.yaml`` is).
DEFAULT_DOCUMENTS_DIR = "data/documents"
DEFAULT_QA_DIR = "data/qa"
DEFAULT_LANCEDB_URI = "data/lancedb"
DEFAULT_CACHE_DIR = "data/cache"
#: Generated questions (``ctxwin qa generate``, the ``generated_questions`` asset): one folder per experiment in it.
DEFAULT_GENERATED_QA_DIR = "data/qa_generated"
DEFAULT_RESULTS_DIR = "evaluations/results"
DEFAULT_REPORTS_DIR = "evaluations/reports"
#: The sample's Dagster home (``make run``, ``make dev``).
DEFAULT_HOME = ".dagster_home"
#: Other experiments live in ``data/experiments/<name>/`` (``dagster_home/``, ``lancedb/``, ``results/``).
EXPERIMENTS_DIR = "data/experiments"
#: The file in a Dagster home that holds its experiment.
EXPERIMENT_FILE = "ctxwin_experiment.json"
#: The file in a Dagster home that remembers which doc_id each file name was given.
DOC_IDS_FILE = "ctxwin_doc_ids.json"
#: The name of the default experiment.
SAMPLE = "sample"

#: Sections of an experiment file: the resources of the code location they configure.
RESOURCE_SECTIONS = (
    "settings",
    "pipeline",
    "contextualizer",
    "answerer",
    "embeddings",
    "evaluation",
    "judge",
    "lancedb",
    "question_writer",
)
#: Settings that moved to a section of their own: (old section, old key) -> (new section, new key).
#: Files written before are read with them moved.
MOVED_KEYS = {
    ("evaluation", "judge_model"): ("judge", "model"),
    ("evaluation", "judge_base_url"): ("judge", "base_url"),
}
_TOP_KEYS = ("name", "description", "documents_dir", "qa_dir", "lancedb_uri", "cache_dir", "prepare")

#: The value of one setting of a resource: JSON in the experiment file, given to the Dagster
#: resource's field of that name as a keyword argument (the resource checks it against the
#: field's type, which is also its static type there).
SettingValue: TypeAlias = Any

_GENERIC_FOLDERS = {"documents", "docs", "data", "files", "texts", "corpus", "input"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")


class ExperimentConflict(ValueError):
    """A Dagster home already holds another experiment (another documents folder)."""


def _is_uri(value: str) -> bool:
    return "://" in value


def _absolute(value: str, base: Path) -> str:
    if not value or _is_uri(value):
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())


@dataclass(frozen=True)
class Experiment:
    """One experiment's settings (see the module docstring).

    Attributes:
        name: names its folders (``data/experiments/<name>/``; the sample's results are in
            ``evaluations/results/sample``) and its report (``evaluations/reports/<name>``).
        documents_dir, qa_dir, lancedb_uri, cache_dir: where its data lives.
        sections: per resource (:data:`RESOURCE_SECTIONS`), settings that change its defaults
            (``{"contextualizer": {"model": "gpt-4o-mini"}, "evaluation": {"retrieval": "paper"}}``).
        description: one line for people.
    """

    name: str = SAMPLE
    documents_dir: str = DEFAULT_DOCUMENTS_DIR
    qa_dir: str = DEFAULT_QA_DIR
    lancedb_uri: str = DEFAULT_LANCEDB_URI
    cache_dir: str = DEFAULT_CACHE_DIR
    sections: Mapping[str, Mapping[str, SettingValue]] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(
                f"experiment name {self.name!r} is not usable as a folder name; use letters, digits, '_', '.' and '-' (at most 80)"
            )
        unknown = set(self.sections) - set(RESOURCE_SECTIONS)
        if unknown:
            raise ValueError(
                f"experiment {self.name!r} has unknown sections {sorted(unknown)}; allowed: {', '.join(RESOURCE_SECTIONS)}"
            )

    # ------------------------------------------------------------------ resources
    def resource_config(self) -> dict[str, dict[str, SettingValue]]:
        """Per resource key, the settings that differ from the resource's own defaults: the
        folders of this experiment and its ``sections``."""
        out = {key: dict(self.sections.get(key) or {}) for key in RESOURCE_SECTIONS}
        out["settings"].update(documents_dir=self.documents_dir, qa_dir=self.qa_dir, cache_dir=self.cache_dir)
        out["lancedb"]["uri"] = self.lancedb_uri
        out["evaluation"]["experiment"] = self.name
        for key in ("contextualizer", "answerer", "embeddings", "question_writer"):
            out[key].setdefault("cache_dir", self.cache_dir)
        out["question_writer"].setdefault("out_dir", f"{DEFAULT_GENERATED_QA_DIR}/{self.name}")
        return out

    def with_changes(self, section: str, **values: SettingValue) -> Experiment:
        """A copy with ``values`` set in ``section`` (None values are left out)."""
        sections = {k: dict(v) for k, v in self.sections.items()}
        sections.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
        return replace(self, sections=sections)

    # ------------------------------------------------------------------ files
    def resolved(self, base: str | Path) -> Experiment:
        """The same experiment with its relative folders made absolute against ``base``
        (what a Dagster home stores, so every process finds them whatever its working folder)."""
        root = Path(base).resolve()
        sections = {k: dict(v) for k, v in self.sections.items()}
        evaluation = sections.setdefault("evaluation", {})
        evaluation["results_dir"] = _absolute(str(evaluation.get("results_dir") or DEFAULT_RESULTS_DIR), root)
        evaluation["reports_dir"] = _absolute(str(evaluation.get("reports_dir") or DEFAULT_REPORTS_DIR), root)
        writer = sections.setdefault("question_writer", {})
        writer["out_dir"] = _absolute(str(writer.get("out_dir") or f"{DEFAULT_GENERATED_QA_DIR}/{self.name}"), root)
        return replace(
            self,
            sections=sections,
            documents_dir=_absolute(self.documents_dir, root),
            qa_dir=_absolute(self.qa_dir, root),
            lancedb_uri=_absolute(self.lancedb_uri, root),
            cache_dir=_absolute(self.cache_dir, root),
        )

    def to_dict(self) -> JSONObject:
        data: JSONObject = {
            "name": self.name,
            "description": self.description,
            "documents_dir": self.documents_dir,
            "qa_dir": self.qa_dir,
            "lancedb_uri": self.lancedb_uri,
            "cache_dir": self.cache_dir,
        }
        data.update({k: dict(v) for k, v in self.sections.items() if v})
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object], *, source: str = "experiment") -> Experiment:
        """An experiment from the JSON form (``evaluations/experiments/*.json`` or a home's file);
        a clear error naming ``source`` for unknown keys. ``lancedb.uri`` is the same as ``lancedb_uri``."""
        unknown = set(data) - set(_TOP_KEYS) - set(RESOURCE_SECTIONS)
        if unknown:
            raise ValueError(
                f"{source} has unknown keys {sorted(unknown)}; allowed: {', '.join((*_TOP_KEYS, *RESOURCE_SECTIONS))}"
            )
        sections: dict[str, dict[str, SettingValue]] = {
            k: dict(v) for k in RESOURCE_SECTIONS if isinstance(v := data.get(k), Mapping) and v
        }
        for (old, key), (new, new_key) in MOVED_KEYS.items():
            if key in sections.get(old, {}):
                value = sections[old].pop(key)
                if value not in ("", None):
                    sections.setdefault(new, {}).setdefault(new_key, value)
        sections = {k: v for k, v in sections.items() if v}
        lancedb = sections.get("lancedb", {})
        uri = str(data.get("lancedb_uri") or lancedb.pop("uri", "") or "")
        if "lancedb" in sections and not sections["lancedb"]:
            del sections["lancedb"]
        settings = sections.get("settings", {})
        documents = str(data.get("documents_dir") or settings.pop("documents_dir", "") or "")
        qa = str(data.get("qa_dir") or settings.pop("qa_dir", "") or "")
        cache = str(data.get("cache_dir") or settings.pop("cache_dir", "") or "")
        if "settings" in sections and not sections["settings"]:
            del sections["settings"]
        name = str(data.get("name") or SAMPLE)
        sample = name == SAMPLE
        if not sample:  # its answers and scores beside its index, not among the sample's
            sections.setdefault("evaluation", {}).setdefault("results_dir", f"{EXPERIMENTS_DIR}/{name}/results")
        return cls(
            name=name,
            description=str(data.get("description") or ""),
            documents_dir=documents or DEFAULT_DOCUMENTS_DIR,
            qa_dir=qa or DEFAULT_QA_DIR,
            lancedb_uri=uri or (DEFAULT_LANCEDB_URI if sample else f"{EXPERIMENTS_DIR}/{name}/lancedb"),
            cache_dir=cache or DEFAULT_CACHE_DIR,
            sections=sections,
        )

    def save(self, home: str | Path) -> Path:
        """Write this experiment into the Dagster home ``home`` (atomically); returns the file."""
        path = Path(home) / EXPERIMENT_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path

    def same_data(self, other: Experiment) -> bool:
        """True when both read the same documents into the same index (one home can hold only that)."""
        return (self.documents_dir, self.lancedb_uri) == (other.documents_dir, other.lancedb_uri)

    def describe(self) -> str:
        return f"experiment {self.name!r}: documents {self.documents_dir}, questions {self.qa_dir}, index {self.lancedb_uri}"


def load_experiment_file(path: str | Path) -> Experiment:
    """An experiment from a JSON file; a clear error naming the file and the fix."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"no experiment file {p}; write one (see evaluations/experiments/README.md)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p} is not a readable JSON experiment ({exc}); fix the file") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"{p} must hold a JSON object (name, documents_dir, qa_dir, …)")
    data = dict(data)
    data.setdefault("name", p.stem)
    return Experiment.from_dict(data, source=str(p))


def home_experiment(home: str | Path | None = None) -> Experiment:
    """The experiment of the Dagster home ``home`` (default ``$DAGSTER_HOME``): its
    ``ctxwin_experiment.json``, or the sample when the home has none (or no home is set)."""
    folder = home if home is not None else os.environ.get("DAGSTER_HOME")
    if not folder:
        return Experiment()
    path = Path(folder) / EXPERIMENT_FILE
    if not path.is_file():
        return Experiment()
    return load_experiment_file(path)


def experiment_name_for(documents_dir: str | Path) -> str:
    """A readable experiment name for a documents folder (its last part, as a doc_id is made),
    the sample's name for the sample folder."""
    path = Path(documents_dir).expanduser().resolve()
    if path == Path(DEFAULT_DOCUMENTS_DIR).resolve():
        return SAMPLE
    from ctxwin_dagster.core.text.file_names import derive_doc_id

    parts = [path.name or "documents"]
    if parts[0].lower() in _GENERIC_FOLDERS and path.parent.name:
        parts.insert(0, path.parent.name)  # corpus/documents -> corpus_documents
    name = derive_doc_id("_".join(parts))[:80].strip("_.-") or "documents"
    if name == SAMPLE:
        name = "sample_folder"
    return name if _NAME.match(name) else "documents"


def default_home(name: str) -> Path:
    """The Dagster home of the experiment ``name`` (the sample's: ``$DAGSTER_HOME`` or ``.dagster_home``)."""
    if name == SAMPLE:
        return Path(os.environ.get("DAGSTER_HOME") or DEFAULT_HOME)
    return Path(EXPERIMENTS_DIR) / name / "dagster_home"


def folder_ids_file(documents_dir: str | Path) -> Path | None:
    """The ids file (:data:`DOC_IDS_FILE`) of the experiment whose home holds ``documents_dir``
    (the home ``ctxwin run --documents DIR`` made for it), so a command that names a folder
    gives its files the ids its runs gave them; None when no run has recorded any yet."""
    home = default_home(experiment_name_for(documents_dir))
    path = home / DOC_IDS_FILE
    if not path.is_file():
        return None
    held = Path(home_experiment(home).documents_dir).expanduser().resolve()
    return path if held == Path(documents_dir).expanduser().resolve() else None
