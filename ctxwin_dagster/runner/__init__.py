"""Running the pipeline on a Dagster instance for the CLI: experiment homes and their locks
(:mod:`.homes`), the files a home holds (:mod:`.home_setup`), launching runs through the
instance's queue (:mod:`.launch`), and planning, following and reporting the runs of one command
(:mod:`.runs`, with the runs' events in :mod:`.run_events`, the console's lines in
:mod:`.console` and the model endpoints checked first in :mod:`.endpoints`)."""
