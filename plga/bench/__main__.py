"""``python -m plga.bench``: the same as ``plga bench``."""

import sys

from .runner import main

sys.exit(main())
