"""Settings for every process, read from the environment.

One class per process; the defaults are those of `ingest dev`, and every one can point at real
infrastructure instead (DATABASE_URL, AWS_ENDPOINT_URL, SQS_QUEUE_URL, UPLOAD_STORE_URI, …).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

# Secrets that ship in examples and READMEs; a production process refuses to start with them.
PLACEHOLDER_SECRETS = {"", "change-me", "changeme", "secret", "dev", "please-change", "jwt-secret"}


class CommonSettings(BaseSettings):
    """What both the gateway and the worker need to reach the database, queue and stores."""

    model_config = SettingsConfigDict(env_file=None, extra="ignore", case_sensitive=False)

    database_url: str = "postgresql://postgres@127.0.0.1:5432/ingest"
    db_pool_min: int = 1
    db_pool_max: int = 10
    # How long a request waits for a pooled connection: with Postgres down, callers get
    # database_unavailable (503) after this instead of hanging (docs/operations.md, windows).
    db_pool_timeout_s: float = Field(default=3.0, gt=0)

    aws_endpoint_url: str | None = None
    aws_region: str = "us-east-1"
    sqs_queue_url: str = ""
    sqs_dlq_url: str = ""
    # Receives before SQS moves a message to the DLQ, set on the queue when it is created. Room
    # for a takeover: a killed owner's message, a busy copy, a database outage (docs/decisions/0075).
    sqs_max_receive_count: int = Field(default=10, ge=1, le=1000)

    upload_store_uri: str = "file://.ingest/uploads"
    artifact_store_uri: str = "file://.ingest/artifacts"

    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    embedding_dim: int = 384
    # How this process runs the model (docs/decisions/0110-0112, 0231): `torch` (fp32 on the CPU,
    # fp16 on cuda), `onnx-int8` (an int8 ONNX export, made on first use and cached in
    # EMBEDDING_CACHE_DIR), or `auto`: both timed at first load on a fixed sample and the faster
    # one that agrees with fp32 (cosine >= 0.99) kept, the choice cached per machine beside the
    # export. Same model, same vector space: versions of both are searched together. int8 is
    # 1.6-3.6x faster on 2 cores, torch 1.8x faster on 16 (issue 27): hence auto by default.
    embedding_variant: Literal["auto", "torch", "onnx-int8"] = "auto"
    embedding_device: Literal["cpu", "cuda"] = "cpu"
    embedding_cache_dir: str = ".ingest/models"

    log_level: str = "INFO"
    dev_mode: bool = False

    # Alerts (shared/alerts.py): Slack/Discord-compatible webhooks, comma-separated; empty = off.
    # One incident raises one alert per window across the fleet.
    alert_webhook_urls: str = ""
    alert_window_s: float = Field(default=600.0, gt=0)
    alert_timeout_s: float = Field(default=3.0, gt=0)

    # Upload cleanup (gateway/operations/cleanup.py); the worker never deletes by these, but both read them.
    upload_cleanup_ttl_hours: float = Field(default=24.0, gt=0)
    upload_failed_ttl_days: float = Field(default=7.0, gt=0)
    # Artifacts of deactivated versions are removed this long after deactivation; < 0 keeps them.
    artifact_retention_days: float = 30.0
    # Records imports (docs/decisions/0130): staged rows of finished batches and row errors are
    # removed this many days after the batch finished / the error was written.
    import_staged_retention_days: float = Field(default=7.0, gt=0)
    import_errors_retention_days: float = Field(default=90.0, gt=0)
    # A partial batch's staged rows are kept longer, for review (issue 13, docs/decisions/0151).
    import_partial_staged_retention_days: float = Field(default=30.0, gt=0)
    # Completion events and their webhook deliveries, once every delivery is final (delivered or
    # failed), are removed this many days after the event (docs/decisions/0161).
    event_retention_days: float = Field(default=90.0, gt=0)
    # Webhook receivers (shared/webhooks/urls.py, docs/decisions/0153): exact URLs an operator
    # allows wherever they resolve (JSON list); any other must resolve to public addresses only
    # (loopback too in DEV_MODE). Checked at registration (gateway) and delivery (worker).
    webhook_url_allowlist: tuple[str, ...] = ()

    @property
    def alert_urls(self) -> list[str]:
        return [u.strip() for u in self.alert_webhook_urls.split(",") if u.strip()]


class GatewaySettings(CommonSettings):
    host: str = "127.0.0.1"
    port: int = 8000

    jwt_secret: str = ""
    jwt_expiry_hours: float = 24
    # Cookies (session, sign-in form, device) are Secure unless this is false; unset means
    # true outside DEV_MODE (ADR 0203). false is for plain-HTTP development only (the gateway
    # warns at start); a request that came over https always gets Secure cookies.
    session_cookie_secure: bool | None = None
    # Strict-Transport-Security on answers to requests that came over https (TLS here, or a
    # TRUSTED_PROXIES proxy's X-Forwarded-Proto: https); 0 = never sent.
    hsts_max_age_s: int = Field(default=31536000, ge=0)
    # Serve TLS directly (both set), instead of behind a TLS-terminating proxy.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    # Slow and numerous clients (ADR 0203, gateway/edge/transport.py): a request's headers must
    # arrive within HEADER_TIMEOUT_S; a body must keep up at least BODY_MIN_BYTES_PER_S over
    # every BODY_RATE_WINDOW_S (else 408 and the connection closes); at most MAX_CONNECTIONS
    # connections per process (more are refused at once); an idle keep-alive connection
    # closes after KEEPALIVE_TIMEOUT_S.
    header_timeout_s: float = Field(default=10.0, gt=0)
    body_min_bytes_per_s: int = Field(default=1024, ge=0)
    body_rate_window_s: float = Field(default=10.0, gt=0)
    max_connections: int = Field(default=1000, ge=1)
    keepalive_timeout_s: float = Field(default=5.0, gt=0)
    # Each client address's share of one process (ADR 0323, gateway/edge/shares.py): at most
    # CLIENT_MAX_CONNECTIONS connections (and as many requests in flight, which is what counts
    # behind a TRUSTED_PROXIES proxy), and CLIENT_REQUESTS_PER_S requests a second on average in
    # bursts of CLIENT_REQUEST_BURST. Refusals: 429 with Retry-After; a full process: 503.
    # Bind the port with SO_REUSEPORT, so that several gateway processes serve one port and the
    # kernel spreads new connections over those listening (`ingest dev` runs
    # DEV_GATEWAY_PROCESSES of them, ADR 0324). Such a process listens only once it can serve
    # every route (its query model loaded): its peers answer meanwhile.
    reuse_port: bool = False
    client_max_connections: int = Field(default=100, ge=1)
    client_requests_per_s: float = Field(default=200.0, gt=0)
    client_request_burst: int = Field(default=400, ge=1)
    # A device cookie (ADR 0204) is good for this many days after its sign-in.
    login_device_cookie_days: float = Field(default=90.0, gt=0)
    auth_enabled: bool = True
    # Only with AUTH_ENABLED=false in dev mode: the principal every request acts as.
    dev_tenant_id: str | None = None
    dev_user_id: str | None = None

    upload_max_size_mb: float = 50
    # Document types /v1/ingest, the upload page and S3 syncs accept (README lists them;
    # worker/pipeline/formats/ reads each; docs/decisions/0210).
    allowed_types: tuple[str, ...] = ("pdf", "docx", "html", "txt", "md", "pptx", "xlsx", "xls",
                                      "csv", "eml", "msg", "epub", "odt", "rtf", "json", "png",
                                      "jpeg", "tiff", "webp")

    # Records imports (gateway/imports/, docs/decisions/0090): the size cap of one records file
    # and the types POST /v1/imports accepts.
    import_max_size_mb: float = Field(default=200, gt=0)
    import_types: tuple[str, ...] = ("csv", "jsonl")

    outbox_poll_s: float = 2.0
    outbox_max_backoff_s: float = 60.0

    crash_guard_interval_s: float = 60.0
    crash_guard_queued_ttl_hours: float = 1.0
    crash_guard_running_stale_min: float = 15.0
    # Liveness (docs/decisions/0076): a run without a live owner whose heartbeat (or last
    # republish) is this old gets its job republished through the outbox, at most this many
    # times; only then is it failed. Queued runs are republished once past their TTL.
    crash_guard_republish_after_s: float = Field(default=300.0, gt=0)
    crash_guard_max_republishes: int = Field(default=3, ge=0)

    # S3 sources (gateway/sources/sync.py). Downloads at once per gateway, across all running syncs;
    # at most the S3 client's connection pool (32).
    sync_download_concurrency: int = Field(default=4, ge=1, le=32)
    sync_list_page_size: int = Field(default=1000, ge=1, le=1000)
    # A running sync writes its heartbeat this often; the crash guard fails it once stale.
    sync_heartbeat_s: float = Field(default=10.0, gt=0)
    sync_stale_s: float = Field(default=120.0, gt=0)
    # Endpoints a source may name (exact URLs, JSON list). Outside DEV_MODE an endpoint_url must
    # be listed; in DEV_MODE with none listed, hosts must resolve to public or loopback
    # addresses (docs/decisions/0066). Requests there are signed with the gateway's credentials.
    source_endpoint_allowlist: tuple[str, ...] = ()

    # Operations (docs/operations.md). Every replica refreshes its cached queue depths this
    # often; one replica at a time checks the alert thresholds.
    housekeeping_interval_s: float = Field(default=30.0, gt=0)
    alert_dlq_depth: int = 5
    alert_backlog: int = 100
    # More import batches than this failed within the last hour raise one alert (0130).
    alert_imports_failed_1h: int = Field(default=3, ge=0)
    # A running run without a heartbeat for this long counts as stale in the metrics.
    metrics_stale_after_s: float = 300.0
    # Cleanup pass every this many seconds, one replica at a time; 0 = only `ingest cleanup`.
    cleanup_interval_s: float = Field(default=3600.0, ge=0)
    # Bearer token that /metrics and /api/metrics require; required outside DEV_MODE
    # (docs/decisions/0062). Empty in dev mode = open.
    metrics_token: str = ""
    # Dead letters (docs/decisions/0060): the housekeeping loop moves SQS's dead letters into
    # Postgres this often (0 = only `ingest dlq sync`), at most DLQ_SCAN_MAX per pass, keeping
    # at most DLQ_BODY_MAX_BYTES of each body.
    dlq_archive_interval_s: float = Field(default=30.0, ge=0)
    dlq_scan_max: int = Field(default=1000, ge=10)
    dlq_body_max_bytes: int = Field(default=65536, ge=1024, le=262144)

    # Sign-in throttle (gateway/auth/login_throttle.py, docs/decisions/0056), shared by all replicas
    # through Postgres: attempts per account (e-mail) and per client address in a window of
    # quiet; one more is refused with 429 and starts a lock-out that doubles each time, capped.
    login_max_attempts_per_account: int = Field(default=5, ge=1)
    login_max_attempts_per_address: int = Field(default=50, ge=1)
    login_attempt_window_s: float = Field(default=900.0, gt=0)
    login_lockout_s: float = Field(default=60.0, gt=0)
    login_lockout_max_s: float = Field(default=3600.0, gt=0)
    # Proxies whose X-Forwarded-For names the client (IPs or CIDRs, JSON list); empty = the
    # peer address is the client, and X-Forwarded-For is ignored.
    trusted_proxies: tuple[str, ...] = ()

    # Search and answers (gateway/search/, docs/decisions/0105-0109). Off = /v1/search,
    # /v1/ask and the Search page answer 404 search_disabled, and the model is never loaded.
    search_enabled: bool = True
    # Load the query model as the gateway starts, in the background (docs/decisions/0321):
    # /health/ready waits for it, and until then vector, hybrid and ask answer 503
    # model_loading with Retry-After at once. false: the first vector query loads it and waits
    # (the test suite's gateways, which mostly never search).
    search_model_at_start: bool = True
    # CPU threads of the query model (EMBEDDING_VARIANT, like the workers). A query is a few
    # tokens: one thread is as fast as more, and leaves the other cores to Postgres (ADR 0158).
    search_embed_threads: int = Field(default=1, ge=1, le=64)
    # /v1/ask answers only when the best chunk stands out from the question's other nearest
    # neighbours: (best − background) / (1 − background) ≥ ASK_MIN_LIFT, where background is
    # the median cosine of neighbours 10-40, and best ≥ ASK_MIN_SIMILARITY; a tenant with fewer
    # than 40 chunks has no neighbours to compare with and needs ASK_SMALL_TENANT_SIMILARITY.
    ask_min_lift: float = Field(default=0.23, ge=0, le=1)
    ask_min_similarity: float = Field(default=0.25, ge=-1, le=1)
    ask_small_tenant_similarity: float = Field(default=0.35, ge=-1, le=1)
    # Ask's near-miss tests (docs/decisions/0312, 0315): at most ASK_MAX_UNKNOWN of the
    # question's IDF-weighted words may be words no document holds; some evidence must name the
    # question's names and numbers (ASK_REQUIRE_NAMES); that evidence must hold
    # ASK_MIN_COVERAGE of the weight of the question's known words (0: off), and its best
    # document rank within the keyword list's top ASK_MAX_KEYWORD_RANK documents (0: off).
    # Fitted on the MS MARCO subset alone, checked on DBpedia (bench/ask_quality.py).
    ask_max_unknown: float = Field(default=0.05, ge=0, le=1)
    ask_require_names: bool = True
    ask_min_coverage: float = Field(default=0.0, ge=0, le=1)
    ask_max_keyword_rank: int = Field(default=0, ge=0, le=100)
    # More of them (docs/decisions/0380), each 0: off: the passage cited first must hold
    # ASK_MIN_CONTENT of the known words' weight (a word held as names are); the best
    # similarity must lie ASK_MIN_BEST_Z deviations above the question's other candidates; the
    # keyword list's first document must be among the vector list's top ASK_MAX_KEYWORD_TOP.
    ask_min_content: float = Field(default=0.0, ge=0, le=1)
    ask_min_best_z: float = Field(default=0.0, ge=0, le=100)
    ask_max_keyword_top: int = Field(default=0, ge=0, le=100)
    # With a key, answers are written by the Anthropic Messages API; failures fall back to the
    # extractive answer (ADR 0107). The base URL lets tests and proxies stand in for the API.
    anthropic_api_key: str = ""
    anthropic_model: str = "claude-sonnet-4-5"
    anthropic_base_url: str = "https://api.anthropic.com"
    anthropic_timeout_s: float = Field(default=20.0, gt=0)
    anthropic_max_attempts: int = Field(default=3, ge=1, le=10)

    # Event intake (gateway/events/, docs/decisions/0135-0136). Each gateway's writer drains a
    # queue of EVENTS_QUEUE_SIZE events (full = 429), upserting at most EVENTS_GROUP_MAX per
    # statement; so a gateway holds at most EVENTS_QUEUE_SIZE + EVENTS_WRITER_CONNECTIONS x
    # EVENTS_GROUP_MAX events before it answers 429 (queued plus taken by blocked commits).
    # A batch holds at most EVENTS_MAX_BATCH events and EVENTS_MAX_BODY_KB of JSON;
    # a request waits at most EVENTS_COMMIT_TIMEOUT_S for its commit (then 503: resend, it is
    # idempotent). Transient database errors are retried without end; after
    # EVENTS_WRITER_RETRY_BUDGET failed attempts in a row /health/ready reports it critical.
    events_queue_size: int = Field(default=5000, ge=1)
    events_group_max: int = Field(default=300, ge=1, le=5000)
    events_max_batch: int = Field(default=500, ge=1, le=500)
    events_max_body_kb: int = Field(default=4096, ge=1)
    events_max_payload_kb: int = Field(default=64, ge=1)
    events_commit_timeout_s: float = Field(default=30.0, gt=0)
    events_writer_retry_budget: int = Field(default=8, ge=1)
    events_stats_interval_s: float = Field(default=60.0, gt=0)
    # The writer commits groups over this many connections of its own at once (ADR 0192; 2,
    # not 4, since ADR 0400: fewer groups sharing the cores at once finish sooner), and
    # refuses a source_emitted_at later than its clock plus EVENTS_MAX_FUTURE_SKEW_S (ADR 0191).
    events_writer_connections: int = Field(default=2, ge=1, le=32)
    # A writer task that finds fewer than EVENTS_GROUP_MAX events queued while another task's
    # commit is in flight waits up to EVENTS_GROUP_LINGER_MS for more before it commits, so
    # groups are larger and fewer commits queue (ADR 0340); 0 commits what it finds at once.
    events_group_linger_ms: float = Field(default=0.0, ge=0, le=20)
    events_max_future_skew_s: float = Field(default=86400.0, ge=0)
    # Diagnosis: each POST /v1/events answer says where its time went (Server-Timing: the
    # key lookup, the body, the checks, the writer's queue and commit, the loop's lag, GC
    # pauses; gateway/events/timing.py, ADR 0341). Costs a loop wake-up every 2 ms.
    events_server_timing: bool = False
    # A live API key answers its requests from the gateway's memory for this long before it is
    # looked up again (0: every request looks its key up). Only while the gateway hears
    # revocations (LISTEN df_api_keys, migrations/0200): a revoked key is forgotten as its
    # revocation commits (ADR 0440).
    events_key_cache_s: float = Field(default=60.0, ge=0, le=3600)
    # POST /v1/webhooks/{id}/rotate-secret: how long the replaced secret keeps signing beside
    # the new one when the request names no grace period (docs/decisions/0196).
    webhook_secret_grace_s: float = Field(default=86400.0, ge=0, le=7 * 86400)

    # Live updates (gateway/live/, docs/decisions/0160): GET /v1/live streams a tenant's events
    # to its open pages. At most LIVE_MAX_STREAMS streams per process (more: 503, the pages
    # poll instead); a comment every LIVE_HEARTBEAT_S keeps proxies from closing a quiet one; a
    # stream ends after LIVE_STREAM_MAX_S and the browser reconnects (so a revoked session stops
    # there); a stream more than LIVE_QUEUE_SIZE messages behind is closed and resumes.
    live_max_streams: int = Field(default=500, ge=1)
    # One tenant's share of them (then 429): no tenant takes every place (docs/decisions/0197).
    # Every LIVE_HEARTBEAT_S the streams whose session ended (sign-out, deactivation, password
    # change) are ended too.
    live_max_streams_per_tenant: int = Field(default=100, ge=1)
    live_heartbeat_s: float = Field(default=15.0, gt=0)
    live_stream_max_s: float = Field(default=600.0, gt=0)
    live_queue_size: int = Field(default=100, ge=1)

    @model_validator(mode="after")
    def _events_batch_fits_queue(self) -> GatewaySettings:
        # A batch is queued whole or refused whole (429): a larger one could never be taken.
        if self.events_max_batch > self.events_queue_size:
            raise ValueError("EVENTS_MAX_BATCH must not exceed EVENTS_QUEUE_SIZE")
        return self

    @property
    def upload_max_bytes(self) -> int:
        return int(self.upload_max_size_mb * 1024 * 1024)

    @model_validator(mode="after")
    def _secure_cookies_outside_dev(self) -> GatewaySettings:
        if self.session_cookie_secure is None:
            self.session_cookie_secure = not self.dev_mode
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("TLS_CERT_FILE and TLS_KEY_FILE go together: set both or neither")
        return self

    @model_validator(mode="after")
    def _refuse_unsafe_auth(self) -> GatewaySettings:
        if not self.auth_enabled:
            if not self.dev_mode:
                raise ValueError("AUTH_ENABLED=false is allowed only together with DEV_MODE=true")
            if not (self.dev_tenant_id and self.dev_user_id):
                raise ValueError("AUTH_ENABLED=false needs DEV_TENANT_ID and DEV_USER_ID")
        if not self.dev_mode and (
            self.jwt_secret.lower() in PLACEHOLDER_SECRETS or len(self.jwt_secret) < 32
        ):
            raise ValueError("JWT_SECRET must be a random secret of at least 32 characters")
        if not self.dev_mode and (
            self.metrics_token.lower() in PLACEHOLDER_SECRETS or len(self.metrics_token) < 16
        ):
            # /metrics and /api/metrics span every tenant: never open outside dev mode.
            raise ValueError("METRICS_TOKEN must be set outside DEV_MODE: a random secret of at "
                             "least 16 characters that scrapers send as a bearer token")
        if self.sync_heartbeat_s * 2 > self.sync_stale_s:
            # A live sync must beat well inside the window, or the crash guard fails it.
            raise ValueError("SYNC_HEARTBEAT_S must be at most half SYNC_STALE_S")
        return self


class WorkerSettings(CommonSettings):
    worker_max_concurrent_jobs: int = Field(default=3, ge=1)
    # Documents held beyond the job slots while they wait for their vectors and their write,
    # with no thread each (docs/decisions/0301): what keeps the embed passes full. 0 = by
    # device (shared/embedding/model.DEFAULT_DOCUMENTS_IN_FLIGHT).
    worker_documents_in_flight: int = Field(default=0, ge=0)
    worker_id: str | None = None
    sqs_wait_time_s: int = Field(default=20, ge=0, le=20)
    # How long a received message stays hidden; heartbeats keep extending it while a job runs.
    sqs_visibility_timeout_s: int = Field(default=60, ge=1)
    heartbeat_interval_s: float = 5.0
    # A running run whose heartbeat is older than this is abandoned and may be taken over.
    running_stale_after_s: float = 15 * 60
    # SIGTERM: jobs get this long to finish, then their runs and messages are released for
    # another worker to take over at once: a job that needs longer is cheaper to hand over.
    shutdown_grace_s: float = 5.0
    transient_retry_attempts: int = 4
    # Parsers run in a child process per document (worker/pipeline/parsers.py, ADR 0077): a
    # file that crashes, hangs or bloats its parser fails its own run, never the worker.
    # The timeout is the child's processor time, not wall time (ADR 0293: a busy machine).
    extract_timeout_s: float = Field(default=120.0, gt=0)
    extract_memory_mb: int = Field(default=1024, ge=64)
    # What one document may hold (worker/pipeline/formats/common.Limits): pages (PDF pages,
    # slides, image frames), members of a container (zip entries, e-mail parts), spreadsheet
    # cells, and pages OCR may read; OCR adds this many seconds per page to extract_timeout_s.
    extract_max_pages: int = Field(default=2000, ge=1)
    extract_max_members: int = Field(default=10_000, ge=1)
    extract_max_cells: int = Field(default=2_000_000, ge=1)
    extract_max_ocr_pages: int = Field(default=300, ge=0)
    extract_ocr_page_s: float = Field(default=20.0, gt=0)
    # Test-only pause point: with both set, a job entering this stage waits while the file
    # exists, so fault tests hold a job in flight deterministically. Empty = off. Records
    # stages: parse (after a chunk), promote (inside its transaction), fail (before it is written).
    worker_pause_at_stage: str = ""
    worker_pause_file: str = ""
    # Records imports (docs/decisions/0097): at most this many imports of one tenant parse or
    # promote at once across all workers; another waits in the outbox (not the queue) this long.
    records_tenant_slots: int = Field(default=3, ge=1, le=100)
    records_slot_wait_s: int = Field(default=30, ge=1)
    # Event ledger apply (worker/ledger/, docs/decisions/0139-0141, 0281): a thread of this
    # process beside the SQS consumer claims due pending events, LEDGER_APPLY_BATCH per claim,
    # each claim hiding its rows for the lease; each tenant's share of a claim is applied in
    # one transaction, split in halves when it fails; failures back off with full jitter
    # (base × 2^n, cap) and dead-letter after LEDGER_APPLY_MAX_ATTEMPTS. Off: this worker
    # applies nothing.
    ledger_apply_enabled: bool = True
    ledger_apply_batch: int = Field(default=500, ge=1, le=5000)
    ledger_apply_poll_s: float = Field(default=1.0, gt=0)
    ledger_apply_lease_s: float = Field(default=60.0, gt=0)
    ledger_apply_max_attempts: int = Field(default=10, ge=1)
    ledger_apply_backoff_base_s: float = Field(default=1.0, gt=0)
    ledger_apply_backoff_max_s: float = Field(default=300.0, gt=0)
    # How often the pending / dead-letter / lag gauges are refreshed from the ledger.
    ledger_apply_report_s: float = Field(default=10.0, gt=0)
    # Webhook delivery (worker/webhooks/, docs/decisions/0154): a thread of this process claims
    # due deliveries, WEBHOOK_DISPATCH_BATCH per claim, each hidden for the lease; a failed
    # attempt is retried with full jitter (base × 2^n, cap) until WEBHOOK_RETRY_WINDOW_S after
    # the event, then failed. Off: this worker delivers nothing.
    webhook_dispatch_enabled: bool = True
    webhook_dispatch_batch: int = Field(default=20, ge=1, le=500)
    webhook_dispatch_poll_s: float = Field(default=1.0, gt=0)
    webhook_dispatch_lease_s: float = Field(default=120.0, gt=0)
    # One attempt's whole deadline: resolving, connecting, sending and the entire answer
    # (docs/decisions/0195). At most WEBHOOK_CONCURRENCY attempts of this worker are in flight,
    # and at most WEBHOOK_PER_ENDPOINT of one endpoint across every worker. Keep the lease well
    # above it: a claim whose lease ends mid-attempt is sent again by another worker.
    webhook_timeout_s: float = Field(default=5.0, gt=0, le=60)
    webhook_concurrency: int = Field(default=16, ge=1, le=256)
    webhook_per_endpoint: int = Field(default=2, ge=1, le=64)
    webhook_backoff_base_s: float = Field(default=5.0, gt=0)
    webhook_backoff_max_s: float = Field(default=3600.0, gt=0)
    webhook_retry_window_s: float = Field(default=86400.0, gt=0)

    chunk_target_tokens: int = 200
    chunk_max_tokens: int = 254
    # A chunk below this many tokens is merged into a neighbour (ADR 0221); at most target / 2.
    chunk_min_tokens: int = Field(default=64, ge=1)
    # Padded tokens per forward pass of the embed queue, shared by every document in flight
    # (docs/decisions/0230); 0 = by device: 2,048 x 256 on cuda, 32 x 256 on the CPU.
    embed_batch_tokens: int = Field(default=0, ge=0)
    # Run the forward pass in a child process of its own (docs/decisions/0303): on a GPU, the
    # worker's threads then cannot hold up its kernel launches for the GIL. Measure first
    # (bench/embed.py --device cuda --forward-process): on this 2-core machine it did not pay.
    embed_forward_process: bool = False
    max_uncompressed_mb: int = 200
    # Embedding threads per process (torch or onnxruntime intra-op); 0 = the machine's cores.
    torch_threads: int = 0
    # Prometheus metrics of this process on their own port (prometheus_client); 0 = off.
    worker_metrics_port: int = Field(default=0, ge=0, le=65535)
    worker_metrics_addr: str = "127.0.0.1"

    @model_validator(mode="after")
    def _heartbeat_fits_windows(self) -> WorkerSettings:
        # A heartbeat must land well inside both windows, or healthy jobs look dead.
        if self.heartbeat_interval_s * 2 > self.sqs_visibility_timeout_s:
            raise ValueError("HEARTBEAT_INTERVAL_S must be at most half SQS_VISIBILITY_TIMEOUT_S")
        if self.heartbeat_interval_s * 2 > self.running_stale_after_s:
            raise ValueError("HEARTBEAT_INTERVAL_S must be at most half RUNNING_STALE_AFTER_S")
        return self


class DevSettings(BaseSettings):
    """`ingest dev` itself (cli/dev.py); its gateway and workers read their own classes above."""

    model_config = SettingsConfigDict(env_file=None, extra="ignore", case_sensitive=False)

    port: int = 8000
    worker_processes: int = Field(default=1, ge=0)
    # Gateway processes on the one port (SO_REUSEPORT), each supervised and restarted on its own:
    # one that dies is not an outage (docs/decisions/0324).
    dev_gateway_processes: int = Field(default=2, ge=1)
    # A child (gateway, worker, moto) that exits is restarted after this delay, doubled after
    # each exit in a row up to the cap (docs/decisions/0041).
    dev_restart_backoff_s: float = Field(default=1.0, gt=0)
    dev_restart_backoff_max_s: float = Field(default=30.0, gt=0)
    # The SQS/S3 endpoint handed to the gateway and workers instead of moto's own URL: a proxy
    # between them and moto, e.g. bench/soak.py's switch for a queue outage (ADR 0240).
    dev_aws_endpoint_url: str | None = None
