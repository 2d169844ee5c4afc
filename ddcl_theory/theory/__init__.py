"""theory"""
from .collapse import critical_temperature  # noqa: F401
