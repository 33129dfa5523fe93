"""Offline counterfactual learning to rank (SPEC §6): logging, estimators, training, evaluation."""
