"""Running the pipeline on a Dagster instance for the CLI: experiment homes and their locks
(:mod:`.homes`), launching runs through the instance's queue (:mod:`.launch`), and planning,
following and reporting the runs of one command (:mod:`.runs`)."""
