"""``python -m pipeline.trading.model``: build the fast path's default model (``pipeline.trading.model.main``)."""

import sys

from pipeline.trading.model import main

sys.exit(main())
