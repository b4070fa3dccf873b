"""The reconcile core: what to do next with a stream, decided in one pure function.

- :mod:`.observation`: one typed, immutable snapshot of a stream (what a pass can see);
- :mod:`.decision`: :func:`~.decision.decide` (observation, policy) -> :class:`~.decision.Decision`;
- :mod:`.table`: the decision table of ``docs/reconcile.md``, generated from :func:`~.decision.decide`.

- :mod:`.observe`: the I/O half - reads one observation through the stream's hook (every control
  file once, liveness with its proof, the health rules).

``observation``, ``decision`` and ``table`` do no I/O and import no Airflow; carrying a decision out is
the supervisor's and the lifecycle runner's.
"""
