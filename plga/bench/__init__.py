"""``plga bench``: the performance harness of the kernels against the published algorithm.

:func:`add_bench_arguments` and :func:`bench_main` are what the ``plga`` console script wires
in; ``python -m plga.bench`` runs the same thing. Each case runs in its own process
(``python -m plga.bench.case``); :mod:`.flops` holds the analytic FLOP and byte counts,
:mod:`.machine` the matmul / bandwidth measurements, :mod:`.eager` the published-algorithm
baseline decoder. Torch is imported only inside the case processes and the machine probe.
"""

from .harness import add_bench_arguments, bench_main, main

__all__ = ["add_bench_arguments", "bench_main", "main"]
