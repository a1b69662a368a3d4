"""``python -m ctxwin_dagster.cli`` runs the ``ctxwin`` command."""

import sys

from ctxwin_dagster.cli import main

sys.exit(main())
