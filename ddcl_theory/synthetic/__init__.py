"""Synthetic data sets with a documented generative model (deterministic by seed)."""
