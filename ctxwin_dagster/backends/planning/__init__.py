"""Before calling a model: prices (:mod:`.pricing`), the pre-flight checks of an endpoint
(:mod:`.preflight`) and the plan of calls, tokens and cost per variant (:mod:`.plan`)."""
