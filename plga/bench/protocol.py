"""The lines a case process prints: its result (``MARKER`` + one JSON object) and, when the
runner interleaves it with other cases (:mod:`.interleave`), ``READY`` each time it waits for
the runner's permission to go on."""

MARKER = "PLGA_BENCH_RESULT "
READY = "PLGA_BENCH_READY"
