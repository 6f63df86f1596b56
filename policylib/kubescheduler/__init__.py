"""kube-scheduler's model, as policylib reads it: the snapshot of node facts (:mod:`.snapshot`), a Node and a
replica as the plugins read them (:mod:`.model`, :mod:`.resources`), the framework's plugin interface
(:mod:`.framework`) and the default profile's plugins in one registry (:mod:`.plugins`).

Every question "does this pod fit this node" is asked here, by the placement engine of :mod:`policylib.simulate`
and by the admission policies' capacity verdict (:mod:`.fit`) alike. This package imports no policy and no
simulator: both sit above it.
"""
