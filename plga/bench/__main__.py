"""``python -m plga.bench``: the same as ``plga bench``."""

import sys

from .harness import main

sys.exit(main())
