"""A chaos soak: every kind of work at once against `ingest dev` while processes die, then every
invariant checked against what the clients were told (issue 24, docs/decisions/0240-0242).

    python -m bench.soak [--minutes 30] [--seed N] [--workers 2] [--settle-s S] [--out DIR]
                         [--faults kill_gateway,kill_postgres,...]
    make soak  MINUTES=30 SEED=N

The stack starts the way `make run` starts it (`ingest dev`: the same supervisor, durable
Postgres, 2 workers). For ``--minutes`` bounded client pools drive uploads, versions, an S3
source sync, records and ad-metrics imports, ledger events, searches and answers, and DLQ
redrives and run retries, while three webhook receivers listen; after a fault-free first minute
a seeded injector picks a fault every 20-60 s. Then the soak lets the system settle (bounded,
touching nothing) and checks the invariants, printing each with its count; per fault kind, how
long until the clients were served again and how many of their requests succeeded (with the
retries a client does); and the throughput and p95 latency of the first minute beside those
of the minutes with faults (docs/decisions/0325).

Exit status: 0 when every invariant holds, 1 when one does not, 2 when the stack did not start.
"""

from __future__ import annotations

import os

# Before anything imports boto3 or the model: the soak's own clients (the customer's bucket)
# sign with moto's dummy keys and never look for the machine's.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "soak")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "soak")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
