"""theory"""
from ddcl_theory.theory.collapse import critical_temperature  # noqa: F401
