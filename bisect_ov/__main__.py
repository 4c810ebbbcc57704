"""`python -m bisect_ov` is the `bisect-ov` command."""

import sys

from bisect_ov.cli import main

sys.exit(main())
