"""The shipped conformance tests: ``python -m pytest --pyargs plga.conformance.suite``.

Thin by design (array-api-tests' layout): one module per check group, each test parametrized
by the registered checks of its group and every dtype; the checks live in
:mod:`plga.conformance.checks`. The implementation is chosen by ``--plga-impl`` / ``$PLGA_IMPL``.
"""
