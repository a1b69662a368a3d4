"""The Dagster UI of a large experiment, as a person opens it: how long each page takes to render
in headless Chromium, and a screenshot of what it shows.

Starts ``dagster-webserver`` on the experiment's home (on loopback, stopped afterwards), waits for
the code location to load, then opens each page in Debian's ``chromium`` through Playwright and
times it from the request to the moment its content is on screen: the page's own marker text
is visible and the network has been quiet for half a second (that half second is subtracted).
Each page is opened twice, cold and then again, since a person usually comes back to a page.

Run (after ``ctxwin run --documents DIR --name NAME`` or ``benchmarks/bench_corpus.py curve --keep``)::

    make bench-ui HOME_DIR=data/experiments/NAME/dagster_home
    .venv/bin/python benchmarks/bench_ui.py --home HOME [--root PROJECT] [--out FOLDER]

Needs ``chromium`` (Debian's package) and the ``ui`` extra (``pip install -e '.[ui]'``: Playwright,
used with the system's Chromium, so no browser is downloaded). Nothing is asserted; the figures
and the screenshots go in the issue notes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxwin_dagster.testing.webserver import dagster_webserver, graphql  # noqa: E402

#: (name, path, text that shows the page's content has rendered; None: the network alone)
PAGES: list[tuple[str, str, str | None]] = [
    ("first page", "/", "Overview"),
    ("asset chunks", "/assets/chunks", "Partitions"),
    ("partitions of chunks", "/assets/chunks?view=partitions", "Materialized"),
    ("partitions of t_rag_index", "/assets/t_rag_index?view=partitions", "Materialized"),
    ("comparison", "/assets/experiment_comparison", "experiment_comparison"),
    ("asset lineage", "/asset-groups", None),
    ("runs", "/runs", "all_assets_job"),
]
QUIET_S = 0.5  # Playwright's "networkidle": no request for this long


def wait_for_location(base: str, timeout: float = 300) -> float:
    """Seconds until the code location has loaded its jobs."""
    started = time.perf_counter()
    query = '{ repositoryOrError(repositorySelector: {repositoryLocationName: "ctxwin", repositoryName: "__repository__"}) { ... on Repository { name } } }'
    while time.perf_counter() - started < timeout:
        data = graphql(base, query)
        if (data.get("data") or {}).get("repositoryOrError", {}).get("name"):
            return time.perf_counter() - started
        time.sleep(1)
    raise SystemExit(f"the code location did not load within {timeout:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True, help="the experiment's Dagster home")
    parser.add_argument("--root", help="folder with the workspace.yaml (default: this project)")
    parser.add_argument("--out", default="benchmarks/ui", help="where the screenshots go (default: benchmarks/ui)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        raise SystemExit("bench_ui: no chromium on PATH; install Debian's chromium package (apt-get install chromium)")
    home = Path(args.home).resolve()
    root = Path(args.root).resolve() if args.root else ROOT
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DAGSTER_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    rows = []
    with dagster_webserver(root, env) as base, sync_playwright() as pw:
        location_s = wait_for_location(base)
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        for name, path, marker in PAGES:
            times = []
            for attempt in ("cold", "again"):
                started = time.perf_counter()
                page.goto(base + path, wait_until="domcontentloaded", timeout=120_000)
                if marker:
                    page.get_by_text(marker).first.wait_for(state="visible", timeout=120_000)
                shown = time.perf_counter() - started
                page.wait_for_load_state("networkidle", timeout=120_000)
                idle = time.perf_counter() - started - QUIET_S
                times.append(
                    {
                        "attempt": attempt,
                        "content_s": round(shown, 2) if marker else None,
                        "settled_s": round(max(shown, idle), 2),
                    }
                )
            shot = out / f"{name.replace(' ', '_')}.png"
            page.screenshot(path=str(shot))
            row = {"page": name, "path": path, "times": times, "screenshot": str(shot)}
            print(json.dumps(row), flush=True)
            rows.append(row)
        browser.close()
    print(json.dumps({"code_location_load_s": round(location_s, 1), "home": str(home)}))


if __name__ == "__main__":
    main()
