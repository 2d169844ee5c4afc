"""Transitional re-exports: ``runs`` was split into :mod:`~ddcl_theory.runtime.io`,
:mod:`~ddcl_theory.runtime.provenance`, :mod:`~ddcl_theory.runtime.precision`,
:mod:`~ddcl_theory.runtime.rng` and :mod:`~ddcl_theory.runtime.rundir`; import from those."""
from __future__ import annotations

import os  # noqa: F401  (tests patch runs.os.replace)

from ddcl_theory.runtime.io import (  # noqa: F401
    atomic_torch_save, atomic_write_bytes, atomic_write_text, jsonable, read_json, write_json)
from ddcl_theory.runtime.precision import (  # noqa: F401
    AMP_ENV, COMPILE_ENV, amp_enabled, autocast, compile_enabled, maybe_compile)
from ddcl_theory.runtime.provenance import (  # noqa: F401
    VOLATILE_FIELDS, code_hash, git_commit, provenance, same_provenance, settings_dict,
    settings_hash)
from ddcl_theory.runtime.rng import rng_state, set_rng_state  # noqa: F401
from ddcl_theory.runtime.rundir import (  # noqa: F401
    _OPENED, PROVENANCE_NAME, RESUME_ENV, RESUME_FIELDS, RUNS_DIRNAME, RunDir)
