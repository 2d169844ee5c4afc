"""``python -m ddcl_theory.data ensure|status`` (see :mod:`ddcl_theory.data.cli`)."""
from ddcl_theory.data.cli import main

raise SystemExit(main())
