"""Inference: precision runners, the Classifier, export, benchmarks."""
