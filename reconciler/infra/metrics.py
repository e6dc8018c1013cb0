"""Prometheus metrics, one definition each, on the default registry (served at /metrics).

Names follow Prometheus conventions: counters end in `_total`, durations are `_seconds`
histograms. Labels take small closed sets of values (verdicts, outcomes, probe names from
configuration), never operation ids.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

UNKNOWN_PROVIDER_INTENTS = Counter(
    "reconciler_unknown_provider_intents_total",
    "Intents recorded for a provider the configuration does not know (never probed).")
INTENTS = Counter("reconciler_intents_recorded_total",
                  "Intents recorded, by result (created, repeat, conflict).", ["result"])
ATTEMPTS = Counter("reconciler_attempts_total", "Attempts recorded, by transport outcome.",
                   ["outcome"])
VERDICTS = Counter("reconciler_verdicts_total",
                   "Verdict transitions: an operation's cached verdict entered this verdict "
                   "(its first verdict included). Reading a verdict again counts nothing.",
                   ["verdict"])
RETRY_DECISIONS = Counter("reconciler_retry_decisions_total",
                          "Retry gate answers, by result (granted, refused, in_progress, "
                          "mismatch).", ["result"])
PROBE_DURATION = Histogram("reconciler_probe_duration_seconds",
                           "Wall time of one probe call, by probe.", ["probe"],
                           buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
PROBE_RESULTS = Counter("reconciler_probe_results_total",
                        "Probe results, by probe and authority (receipt for a key lookup hit).",
                        ["probe", "authority"])
RECONCILE_LAG = Gauge("reconciler_reconcile_lag_seconds",
                      "Age of the oldest operation that is due for probing (0 when none).")
ESCALATIONS = Counter("reconciler_escalations_total",
                      "Operations escalated to a human (deadline or probe budget spent).")
STORE_DURATION = Histogram("reconciler_store_duration_seconds",
                           "Wall time of one receipt-store call, by method.", ["method"],
                           buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                    1))
PROBE_REQUESTS = Counter("reconciler_probe_requests_total",
                         "Probe calls made, by provider and probe.", ["provider", "probe"])

# What waits on a human, measured at each scrape from the store (attention.Reason; runs by the
# state that waits: awaiting_approval).
WAITING = Gauge("reconciler_waiting_on_human",
                "Operations and runs waiting on a human, by kind (operation, run) and reason.",
                ["kind", "reason"])
WAITING_AGE = Gauge("reconciler_waiting_on_human_oldest_seconds",
                    "How long the longest-waiting item has waited, by kind and reason.",
                    ["kind", "reason"])

# Agent runs: their states measured at each scrape, their steps counted as the events land.
RUNS = Gauge("reconciler_runs", "Agent runs by state.", ["state"])
RUN_TURNS = Counter("reconciler_run_turns_total", "Model turns started by agent runs.")
RUN_TOOL_CALLS = Counter("reconciler_run_tool_calls_total",
                         "Tool calls dispatched by agent runs (each re-send counts).")
RUN_BUDGET_STOPS = Counter("reconciler_run_budget_stops_total",
                           "Agent runs stopped because the next turn would pass a budget.")

HTTP_REQUESTS = Counter("reconciler_http_requests_total",
                        "HTTP requests answered, by method, route template and status.",
                        ["method", "route", "status"])
HTTP_DURATION = Histogram("reconciler_http_request_duration_seconds",
                          "Wall time from request to the end of the answer, by method and "
                          "route template.", ["method", "route"],
                          buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                   2.5, 5, 10, 30))

# The supervisor of `serve`: runs it picked up (queued, or orphaned by a dead worker) by the
# state its advance left them in (or conflict, error), and its looks.
SUPERVISED_RUNS = Counter("reconciler_supervised_runs_total",
                          "Runs the supervisor claimed and advanced, by the state the advance "
                          "left them in (completed, awaiting_approval, ...; conflict, error).",
                          ["outcome"])
SUPERVISOR_TICKS = Counter("reconciler_supervisor_ticks_total",
                           "Looks the supervisor took for runs needing work.")
