"""The size limits of a submission, in one place: the API, the OpenAPI document,
Queue's defaults and Settings read them from here. The SQL holds the same
numbers (the jobs table's CHECK, submission_problem, the functions'
p_max_payload defaults); tests/test_rules.py checks that they agree."""

MAX_TARGET_BYTES = 512
MAX_PAYLOAD_BYTES = 64 * 1024  # the default of JOBFEED_MAX_PAYLOAD
INT_MAX = 2**31 - 1  # PostgreSQL's int: a count or priority the database must hold
MAX_NOTIFY_URL = 2048  # characters: the URL length browsers and servers commonly take
