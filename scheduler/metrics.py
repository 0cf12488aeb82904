"""Per-process Prometheus counters of the scheduler and of the workers' job settling.

Each process counts what it did itself; Prometheus sums over processes
(``sum(rate(recur_scheduler_dispatched_total[1m]))`` is the system's dispatch
rate). The system-wide gauges (backlog, lag, queues) are the exporter's:
tasks/metrics/system.py.
"""

from __future__ import annotations

from config.lazy_metrics import counter

DISPATCHED = counter("recur_scheduler_dispatched",
                     "Jobs the scheduler published, by bucket and why (due, or early: "
                     "pulled forward for idle workers).", ["bucket", "kind"])
LEASES_RECOVERED = counter("recur_scheduler_leases_recovered",
                           "Dispatched jobs whose lease ran out, put back to be dispatched "
                           "again.", ["bucket"])
DEAD_LETTERED = counter("recur_scheduler_dead_lettered",
                        "Jobs whose lease ran out max_deliveries times, moved to the "
                        "dead-letter queue.", ["bucket"])
STALE_DROPPED = counter("recur_stale_copies_dropped",
                        "Dispatched copies a worker dropped or left unsettled because the job "
                        "was dispatched again meanwhile (their token was stale).", ["action"])
DEAD_COPIES = counter("recur_scheduler_dead_copies",
                      "Copies the dead-letter sweep judged, by bucket and verdict: dispatched "
                      "again (never ran), dropped (stale), dead-lettered (poison), watched "
                      "or kept.", ["bucket", "verdict"])
SETTLES_REAPPLIED = counter("recur_settles_reapplied",
                            "Settle writes (reschedule, finish, lease) a worker wrote again "
                            "after the database restarted, by whether the crash had lost them.",
                            ["lost"])
SETTLES_UNGUARDED = counter("recur_settles_unguarded",
                            "Settle writes the journal let go without knowing they were "
                            "flushed, because it held MAX_ENTRIES (a crash that lost one "
                            "leaves its row to its lease).")
SET_ASIDE = counter("recur_scheduler_set_aside",
                    "Rows the scheduler set aside in the store instead of publishing them "
                    "(recur dead list shows them), by bucket and reason: too_large, "
                    "unknown_bucket, undecodable or broker_refused.", ["bucket", "reason"])
BROKER_CONNECTIONS = counter("recur_scheduler_broker_connections",
                             "Broker connections the scheduler opened: its first ones, then one "
                             "per reconnect after an outage (a bad row costs none).")
