"""``python -m torchpar_top``."""

import sys

from torchpar_top.main import main

sys.exit(main())
