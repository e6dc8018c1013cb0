"""A run's HTTP face, in one place: the /v1/runs routes that create and drive runs (`routes`),
the runs list an operator pages through (`listing`, which needs no agent), a run's events as
server-sent events (`stream`), and the problems a request on a run is answered with
(`problems`). The run itself is modelled in `reconciler.core.runs` and driven by the agent
runtime (`reconciler.runtime`); this package only answers HTTP."""
