"""The GPU runbook: what a paper-profile run of each chapter costs, from counted FLOPs.

:mod:`ddcl_theory.runbook.steps` gives the optimiser steps each experiment's training loops take
at given settings, :mod:`ddcl_theory.runbook.flops` counts the FLOPs of one step at the paper's
shapes, and :mod:`ddcl_theory.runbook.page` writes the book's runbook page from both.
"""
