"""Evaluation: benchmark loaders, scoring as the official scripts score, exports, reports and tracking."""
