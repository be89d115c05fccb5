"""Deterministic stratified sampling: policy, rules, estimators. Pure."""
