"""The line a case process prints its result on (``MARKER`` + one JSON object)."""

MARKER = "PLGA_BENCH_RESULT "
