"""Experiments: one module (or subpackage) per study, each with a settings type
(:class:`ddcl_theory.runtime.settings.Settings`) and run functions listed in
:mod:`ddcl_theory.experiments.registry`."""
