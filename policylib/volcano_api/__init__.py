"""Volcano's Job API as its admission webhook and scheduler read it, ported with field paths: below the
configuration, which checks its Volcano settings by these rules, and below the Volcano Job policy
(:mod:`policylib.volcano`), which never returns a Job they deny.

- :mod:`.admission`: what Volcano's job admission denies (rules V1-V12, V20, V22, V23).
- :mod:`.partitions`: network topology and partition rules.
- :mod:`.policies`: the lifecycle policies (RestartPartition among them).
- :mod:`.shape`: the types and sizes the rules read.

Each name is imported from its module.
"""
