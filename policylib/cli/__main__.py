"""``python -m policylib.cli``: the ``policylib`` console script."""
import sys

from .app import main

sys.exit(main())
