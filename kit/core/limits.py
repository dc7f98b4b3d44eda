"""The documented limit of every count, size and range a protocol file or a command-line option sets
(the table in docs/protocols.md). Plain constants, so the command line can use them without pydantic;
kit.protocols.bounds turns them into the protocol models' field types."""

SEED_MAX = 2**32 - 1  # llama.cpp and Python's random take a 32-bit seed
PORT_MIN, PORT_MAX = 1, 65535
THREADS_MAX = 1024
CTX_MIN, CTX_MAX = 256, 131072  # tokens; 131072 is the longest context the kit's models serve
CACHE_RAM_MAX = 1 << 20  # MiB (1 TiB): llama-server --cache-ram
ITEMS_MAX = 10_000  # GSM8K items or generated problems per run (GSM8K's test split has 1319)
FIRST_ITEM_MAX = 10_000
SESSIONS_MAX = 100
EPISODES_MAX = 200  # BFCL multi_turn_base has 200 episodes
HISTORIES_MAX = 100
ORDER_MAX = 10_000  # an episode order index (0 = canonical)
ORDERS_MAX = 100  # orders per grid
REQUESTS_PER_EPISODE_MAX = 1000
FUNCTION_DOCS_MAX = 100  # BFCL function docs listed per episode (its largest episodes list fewer)
TOP_LOGPROBS_MAX = 20
CALLS_MAX = 1000  # pinning: cycles, calls per arm, regime calls
ROUNDS_MAX = 100  # pinning calibration rounds and repeats
REPLICATES_MAX = 1_000_000  # analyze: bootstrap replicates
WORKERS_MAX = 1024  # analyze: processes
UNLOAD_TIMEOUT_MAX = 3600.0  # seconds
ANSWER_BYTES_MIN, ANSWER_BYTES_MAX = 1024, 1 << 32  # bytes of one engine answer read (4 GiB at most)
ANSWER_BYTES_DEFAULT = 64 << 20  # real answers are far smaller: 1024 tokens with top-5 logprobs is ~1 MB
REQUEST_DEADLINE_MAX = 7 * 86400.0  # seconds one engine request may take
IMPORT_CALLS_MAX = 100_000  # kit import: calls in one harness run (seed 002's runs hold 100-150)
IMPORT_FILES_MAX = 64  # kit import: calls files (one per box) of one harness study
IMPORT_BOXES_MAX = 64  # kit import: boxes (machines) of one harness study
WATCH_REQUEST_BYTES_MAX = 64 << 20  # kit watch: one request body read (larger: refused with 413, nothing forwarded)
WATCH_ROTATE_MAX = 1_000_000  # kit watch: calls per records file
WATCH_PROBE_BYTES = 1 << 20  # kit watch: an upstream's build answer read at start (/props, /version)
WATCH_HEADER_BYTES = 64 << 10  # kit watch: a request's line and headers (more: refused with 431, connection closed)
WATCH_BODY_RATE = 64 << 10  # kit watch: bytes a second a request body arrives at, at least (past the idle timeout)
WATCH_HEADER_TIMEOUT, WATCH_IDLE_TIMEOUT = 10.0, 30.0  # kit watch: seconds (defaults of --header/--idle-timeout)
WATCH_TIMEOUT_MIN, WATCH_TIMEOUT_MAX = 0.1, 3600.0  # kit watch: seconds, the range of both timeouts
WATCH_CONNECTIONS, WATCH_CONNECTIONS_MAX = 512, 65536  # kit watch: client connections at once (--max-connections)
WATCH_UPSTREAM_CONNECTIONS = 256  # kit watch: connections to the upstream at once (more requests wait their turn)
WATCH_OBSERVER_BEHIND_BYTES = 256 << 20  # kit watch: bytes of calls its observer process may hold unread
# (more: it is stopped and the proxy reads its calls itself; a call holds 64 MiB of request and of answer at most)
WATCH_ALARM_REQUESTS, WATCH_ALARM_REQUESTS_MAX = 100_000, 10_000_000  # kit watch: requests the alarm tracker keeps
