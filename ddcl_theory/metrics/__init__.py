"""Metrics on tokens, features and clusterings: geometry (ANOVA split, neural collapse, k99,
CDNV), clustering accuracy, prototype usage and readout collapse."""
