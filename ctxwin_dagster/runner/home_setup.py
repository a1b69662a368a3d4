"""The files ``ctxwin`` keeps in a Dagster home: the instance's ``dagster.yaml`` (the run queue,
and PostgreSQL storage with ``--storage``) written when the home is new, and the
``workspace.yaml`` that loads this project's definitions as the code location ``ctxwin``.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

LOCATION = "ctxwin"
DEFINITIONS_MODULE = "ctxwin_dagster.definitions"

# What ctxwin wrote to a new home until the runs' log level was set (below).
_BEFORE_LOG_LEVEL_YAML = """\
# Written by ctxwin for a new Dagster home; edit freely (deploy/ has examples for Kubernetes,
# Docker and Celery). ctxwin run submits its runs to this instance's run queue.
telemetry:
  enabled: false
# No "Join the Dagster community" dialog over the UI of every new home.
nux:
  enabled: false
run_queue:
  max_concurrent_runs: 16
  dequeue_interval_seconds: 1
  # Launch the runs of several documents at once (a launch waits for its run's process to start).
  dequeue_use_threads: true
  dequeue_num_workers: 4
run_monitoring:
  enabled: true
# The sensor that launches ctxwin's runs ticks every few seconds; its skipped ticks ("no ctxwin
# command is waiting") are kept one day, the ticks that launched runs as long as Dagster keeps them.
retention:
  sensor:
    purge_after_days:
      skipped: 1
      failure: 7
"""

#: The instance settings ``ctxwin`` writes to a new Dagster home: the run queue, polled every
#: second, with a limit on runs at once across every launcher of the instance (the CLI keeps
#: at most ``--workers`` of its own runs in it), and the runs' logs kept from INFO up.
DEFAULT_INSTANCE_YAML = (
    _BEFORE_LOG_LEVEL_YAML
    + """\
# The runs keep what is logged at INFO and above. Dagster's IO manager logs each input it loads
# (two DEBUG lines) and each output it writes: 58 of the 254 events a document's run writes to
# the event log, one database write each. Set DEBUG to see them in the UI again.
python_logs:
  python_log_level: INFO
"""
)

#: What ctxwin wrote to new Dagster homes before (replaced when found unchanged): before it used
#: the run queue, before it turned the UI's community dialog off, and before it set the log level.
_OLD_DEFAULT_YAMLS = (
    "telemetry:\n  enabled: false\n",
    _BEFORE_LOG_LEVEL_YAML,
    _BEFORE_LOG_LEVEL_YAML.replace(
        '# No "Join the Dagster community" dialog over the UI of every new home.\nnux:\n  enabled: false\n', ""
    ),
)


def storage_yaml(storage: str) -> str:
    """The ``storage:`` section of a home's ``dagster.yaml`` for ``--storage``: a PostgreSQL URL
    without a password (``postgresql://user@host:port/db``, written with the driver that
    dagster-postgres installs, ``postgresql+psycopg2://``), or ``env:VAR`` for a URL kept in the
    environment variable VAR (the way to give one with a password: it is never written down; give
    it as ``postgresql+psycopg2://user:password@host:port/db``).

    Example::

        >>> print(storage_yaml("env:CTXWIN_PG_URL").strip())
        storage:
          postgres:
            postgres_url:
              env: CTXWIN_PG_URL
    """
    if storage.startswith("env:"):
        var = storage[4:].strip()
        if not var:
            raise SystemExit("ctxwin: --storage env:VAR needs the name of the variable that holds the URL")
        url = "\n      env: " + var
    else:
        parts = urlsplit(storage)
        if parts.scheme.split("+")[0] not in ("postgresql", "postgres") or not parts.hostname:
            raise SystemExit(
                f"ctxwin: --storage takes a PostgreSQL URL (postgresql://user@host:5432/db) or env:VAR; got {storage!r}"
            )
        if parts.password:
            raise SystemExit(
                "ctxwin: --storage: the URL holds a password, which would be written into the home's dagster.yaml; "
                "put the URL in an environment variable and pass --storage env:THAT_VARIABLE"
            )
        # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3; dagster-postgres installs psycopg2
        url = " " + ("postgresql+psycopg2://" + storage.split("://", 1)[1] if "+" not in parts.scheme else storage)
    return f"storage:\n  postgres:\n    postgres_url:{url}\n"


def home_storage(home: Path) -> str:
    """Which storage the home's instance uses: ``sqlite`` (Dagster's default, in the home) or what
    its ``dagster.yaml`` names (``postgres``, ``mysql``…)."""
    import yaml

    config = home / "dagster.yaml"
    loaded = yaml.safe_load(config.read_text(encoding="utf-8")) if config.is_file() else None
    storage = (loaded or {}).get("storage") if isinstance(loaded, dict) else None
    return next(iter(storage), "sqlite") if isinstance(storage, dict) and storage else "sqlite"


def prepare_home(dagster_home: str | None, storage: str | None = None) -> Path:
    """The Dagster home (created with :data:`DEFAULT_INSTANCE_YAML` when new), exported as
    ``DAGSTER_HOME`` for this process and the processes it starts.

    ``storage`` (``--storage``) keeps the instance — runs, event log, schedules — in PostgreSQL
    (:func:`storage_yaml`) instead of SQLite files in the home. It is given once, when the home
    is made (or to a home that has no runs yet); a home that holds runs in one storage refuses
    another, since its history would not follow."""
    home = Path(dagster_home or os.environ.get("DAGSTER_HOME") or ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists() or config.read_text(encoding="utf-8") in _OLD_DEFAULT_YAMLS:
        config.write_text(DEFAULT_INSTANCE_YAML, encoding="utf-8")
    if storage:
        section = storage_yaml(storage)
        text = config.read_text(encoding="utf-8")
        if section not in text:
            if home_storage(home) != "sqlite" or (home / "history").exists():
                raise SystemExit(
                    f"ctxwin: the Dagster home {home} keeps its runs in {home_storage(home)} storage already; "
                    "another storage is another home (--dagster-home), or edit its dagster.yaml yourself"
                )
            config.write_text(text.rstrip("\n") + "\n" + section, encoding="utf-8")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def workspace_file(home: Path) -> Path:
    """``workspace.yaml`` of the folder the command runs in when it loads this project's
    definitions; otherwise an equivalent one written to the Dagster home (the same code
    location name, working directory = this folder)."""
    local = Path("workspace.yaml")
    if local.is_file() and DEFINITIONS_MODULE in local.read_text(encoding="utf-8"):
        return local.resolve()
    ws = home / "workspace.yaml"
    ws.write_text(
        "load_from:\n"
        "  - python_module:\n"
        f"      module_name: {DEFINITIONS_MODULE}\n"
        f"      location_name: {LOCATION}\n"
        f"      working_directory: {Path.cwd().resolve()}\n",
        encoding="utf-8",
    )
    return ws
