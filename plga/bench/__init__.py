"""``plga bench``: the performance harness of the kernels against the published algorithm.

:mod:`.plan` lists the cases of a run and groups them, :mod:`.runner` runs each in its own
process (``python -m plga.bench.case``, :mod:`.case`), the cases of a group taking their timed
runs in turn (:mod:`.interleave`), and :func:`bench_main` wires them together;
:mod:`.rows` derives each row's numbers, :mod:`.targets` holds the targets as data and judges
them, :mod:`.report` writes the JSON and the text (verdicts first). :mod:`.flops` holds the
analytic FLOP and byte counts, :mod:`.machine` the matmul / bandwidth measurements. The eager
baseline is the kernels' own eager backend. Torch is imported only inside the case processes
and the machine probe.
"""

from .runner import add_bench_arguments, bench_main, main

__all__ = ["add_bench_arguments", "bench_main", "main"]
