"""``python -m plga.conformance``: the same as ``plga conformance``."""

import sys

from .cli import conformance_main

sys.exit(conformance_main())
