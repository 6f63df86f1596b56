"""numpy, imported on first use: ``import policylib`` (the webhook, the CLI's other commands) does not load it,
while the snapshot, the framework and the plugins write ``np.`` as usual."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
else:
    class _Numpy:
        """numpy's attributes, each looked up once on first use and then kept on the instance."""

        def __getattr__(self, name: str) -> Any:
            import numpy
            value = getattr(numpy, name)
            setattr(self, name, value)
            return value

    np = _Numpy()

__all__ = ["np"]
