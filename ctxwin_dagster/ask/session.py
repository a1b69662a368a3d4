"""What ``ctxwin ask`` opens and what it asks, as plain values that can cross a process boundary.

An :class:`AskerSpec` says how to open an :class:`~ctxwin_dagster.ask.service.Asker`: the
experiment's index, documents folder, answer model and caches, resolved from the command's
options and the experiment kept in its Dagster home. The per-question options (variant, mode,
retrieval, sliding windows) are a JSON-able dict (:func:`question_options`) that
:func:`ask_kwargs` turns into :meth:`Asker.ask`'s arguments. So ``ctxwin ask`` can answer in its
own process, or send the question to the ask server (:mod:`.server`) that keeps the same asker
open, and print the same thing (:func:`format_result`).

This module imports nothing heavy at import time: the ask server's client uses it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwin_dagster.backends.assembly import CHAT_SPEC_FIELDS
from ctxwin_dagster.core.retrieval.options import NO_ENHANCE, RETRIEVAL_OPTIONS, settings_from

if TYPE_CHECKING:
    from ctxwin_dagster.ask.results import AskResult
    from ctxwin_dagster.ask.service import Asker
    from ctxwin_dagster.core.experiment import Experiment

__all__ = [
    "AskerSpec",
    "ask_kwargs",
    "experiment_home",
    "experiment_of",
    "format_result",
    "question_options",
]

#: The answerer's settings ``ctxwin ask`` takes from the experiment's answerer section whatever
#: model answers: the waits on its server, retries, concurrency, a local model's reply cap.
CHAT_OPTIONS = tuple(f for f in CHAT_SPEC_FIELDS if f not in ("model", "base_url", "api_key", "cache_dir"))
#: The pipeline's settings of the answer engine's sampling, as the evaluation applies them.
SAMPLING_KEYS = ("temperature", "top_p", "max_output_tokens")


def experiment_home(args: argparse.Namespace) -> Path:
    """The Dagster home of ``--dagster-home``, else of ``--experiment`` (the sample's by default)."""
    from ctxwin_dagster.core.experiment import default_home

    return (
        Path(args.dagster_home)
        if vars(args).get("dagster_home")
        else default_home(vars(args).get("experiment") or "sample")
    )


def experiment_of(args: argparse.Namespace) -> Experiment:
    """The experiment ``ctxwin ask`` asks: the one kept in the Dagster home of ``--experiment``
    (or ``--dagster-home``), the sample by default: the same settings its runs used.

    Raises:
        AskError: a named experiment that was never built.
    """
    from ctxwin_dagster.ask.results import AskError
    from ctxwin_dagster.core.experiment import EXPERIMENT_FILE, home_experiment

    name = vars(args).get("experiment") or "sample"
    home = experiment_home(args)
    if name != "sample" and not (home / EXPERIMENT_FILE).is_file():
        raise AskError(
            f"no experiment {name!r} in {home}; build it first (ctxwin evaluate / ctxwin run --documents), or pass --lancedb"
        )
    return home_experiment(home)


@dataclass(frozen=True)
class AskerSpec:
    """How to open an asker: every value :meth:`Asker.open` takes, resolved (see the module docstring)."""

    lancedb: str
    documents: str | None
    model: str | None
    base_url: str | None
    cache_dir: str | None
    max_tokens: int | None
    embeddings: str  # the experiment's embeddings section, as sorted JSON (hashable)
    doc_ids_file: str | None
    chat_options: str = "{}"  # the answerer's CHAT_OPTIONS, as sorted JSON
    sampling: str = "{}"  # the pipeline's SAMPLING_KEYS, as sorted JSON
    home: str | None = None  # the experiment's Dagster home: a damaged index's fix names its `ctxwin run`

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AskerSpec:
        """The spec of ``ctxwin ask``'s options over its experiment (absolute paths).

        Raises:
            AskError: a named experiment that was never built.
        """
        from ctxwin_dagster.core.experiment import DOC_IDS_FILE

        exp = experiment_of(args)
        answerer = dict(exp.sections.get("answerer") or {})
        pipeline = dict(exp.sections.get("pipeline") or {})
        explicit = vars(args).get("model") is not None
        cache_dir = (exp.cache_dir if vars(args).get("cache_dir") is None else args.cache_dir) or None
        documents = (exp.documents_dir if vars(args).get("documents") is None else args.documents) or None
        home = experiment_home(args)

        def absolute(path: str | Path | None) -> str | None:
            """A folder made absolute; an object store's URI (``s3://…``) as it is."""
            if not path:
                return None
            return str(path) if "://" in str(path) else str(Path(path).resolve())

        return cls(
            lancedb=absolute(vars(args).get("lancedb") or exp.lancedb_uri) or "",
            documents=absolute(documents),
            model=args.model if explicit else (answerer.get("model") or None),
            base_url=vars(args).get("base_url") if explicit else (answerer.get("base_url") or None),
            cache_dir=absolute(cache_dir),
            max_tokens=vars(args).get("max_tokens"),
            embeddings=json.dumps(dict(exp.sections.get("embeddings") or {}), sort_keys=True, default=str),
            doc_ids_file=absolute(home / DOC_IDS_FILE) if home.is_dir() else None,
            chat_options=json.dumps({k: answerer[k] for k in CHAT_OPTIONS if k in answerer}, sort_keys=True),
            sampling=json.dumps({k: pipeline[k] for k in SAMPLING_KEYS if k in pipeline}, sort_keys=True),
            home=absolute(home) if home.is_dir() else None,
        )

    def open(self) -> Asker:
        """The asker (its index opened, its models loaded on first use). A damaged table of the
        index fails its questions with the fix as the experiment's ``ctxwin run`` spells it.

        Raises:
            AskError: there is no index, or the embeddings settings are not valid.
        """
        from ctxwin_dagster.ask.service import Asker
        from ctxwin_dagster.backends.index.health import run_command_for

        asker = Asker.open(
            lancedb=self.lancedb,
            documents=self.documents,
            model=self.model,
            base_url=self.base_url,
            cache_dir=self.cache_dir,
            max_tokens=self.max_tokens,
            embeddings={**json.loads(self.embeddings), "cache_dir": self.cache_dir},
            doc_ids_file=Path(self.doc_ids_file) if self.doc_ids_file else None,
            chat_options=json.loads(self.chat_options),
            sampling=json.loads(self.sampling),
        )
        if self.home and asker.index is not None:  # a damaged table's fix: this experiment's `ctxwin run`
            asker.index.run_command = run_command_for(self.home)
        return asker

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AskerSpec:
        return cls(**data)

    def key(self) -> str:
        """A short name for this spec and the installed code (an upgrade is another server)."""
        import ctxwin_dagster

        package = Path(ctxwin_dagster.__file__).parent
        code = max((p.stat().st_mtime_ns for p in package.rglob("*.py")), default=0)
        text = json.dumps([self.to_dict(), str(package), code], sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def question_options(args: argparse.Namespace) -> dict[str, Any]:
    """The per-question options of ``ctxwin ask`` (JSON-able; :func:`ask_kwargs` reads them)."""
    names = (
        "variant",
        "doc",
        "mode",
        "retrieval",
        NO_ENHANCE,
        *(o.name for o in RETRIEVAL_OPTIONS),
        "window_tokens",
        "overlap_tokens",
        "early_stop",
    )
    given = vars(args)
    return {name: given.get(name) for name in names}


def ask_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """:meth:`Asker.ask`'s arguments from :func:`question_options`: the retrieval options become
    one :class:`~ctxwin_dagster.core.retrieval.settings.RetrievalSettings` (the named
    ``retrieval``, default ``ask``, changed by them).

    Raises:
        ValueError: options that contradict each other, or an unknown variant.
    """
    from ctxwin_dagster.ask.results import normalize_variant
    from ctxwin_dagster.core.methods.sliding_qa import DEFAULT_OVERLAP_TOKENS

    retrieval = settings_from(options, retrieval=options.get("retrieval"))
    variant = options.get("variant") or "swb"
    normalize_variant(variant)
    overlap = options.get("overlap_tokens")
    return {
        "variant": variant,
        "doc_id": options.get("doc") or None,
        "mode": options.get("mode") or "retrieve",
        "retrieval": retrieval,
        "window_tokens": options.get("window_tokens"),
        "overlap_tokens": DEFAULT_OVERLAP_TOKENS if overlap is None else overlap,
        "early_stop": options.get("early_stop"),
    }


def format_result(result: AskResult, *, width: int = 100) -> str:
    """A human-readable rendering: the answer, the cited spans with excerpts, the cost."""
    import textwrap

    from ctxwin_dagster.core.methods.prompts import NOT_IN_DOCUMENTS

    lines = [f"Answer ({result.variant or '-'} · {result.mode_used} · {result.engine}: {result.model}):"]
    body = (
        result.answer
        if not result.not_found
        else f"{NOT_IN_DOCUMENTS} — the documents given to the model do not hold the answer"
    )
    for para in body.splitlines() or [""]:
        lines.extend(textwrap.wrap(para, width=width, initial_indent="  ", subsequent_indent="  ") or ["  "])
    if result.citations:
        lines.append("Cited spans:")
        for i, c in enumerate(result.citations, 1):
            chunk = f" [chunk {c.chunk_id[:12]}]" if c.chunk_id else ""
            lines.append(f"  [{c.marker or i}] {c.doc_id}:{c.start}-{c.end}{chunk}")
            if c.excerpt:
                lines.append(f'      "{c.excerpt}"')
    if result.fit is not None:
        f = result.fit
        lines.append(
            f"Fit: {f.prompt_tokens:,} prompt tokens of {f.limit:,} available for {f.model} ({'fits' if f.fits else f'over by {f.overflow:,}'})"
        )
    if result.mode_used == "sliding" and result.sliding is not None:
        s = result.sliding
        lines.append(
            f"Windows: {s.n_read} of {s.n_windows} read, {s.n_found} held an answer{' (stopped early)' if s.stopped_early else ''}"
        )
    else:
        lines.append(f"Context: {len(result.windows)} windows, {result.context_chars:,} characters")
    t = result.totals
    cost, paid = result.cost_usd, result.paid_usd
    if cost is None:
        cost_text = "cost unknown (no price for the model)"
    elif paid is not None and abs(cost - paid) > 5e-7:
        cost_text = f"cost of the work ${cost:.4f}, paid ${paid:.4f}"
    else:
        cost_text = f"${cost:.4f}"
    if result.engine == "extractive":
        cost_text += " (extractive engine, offline)"
    lines.append(
        f"Cost: {cost_text} · {t['calls']} call{'' if t['calls'] == 1 else 's'}, {t['cache_hits']} cached · {t['input_tokens']:,} input / "
        f"{t['output_tokens']:,} output tokens · {result.latency_s:.2f} s"
    )
    for note in result.notes:
        lines.append(f"Note: {note}")
    return "\n".join(lines)
