"""judges package."""

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = (
    "assembly",
    "base",
    "det_base",
    "deterministic",
    "domains",
    "judge_noise",
    "llm",
    "quality",
    "stats",
    "transcript",
    "transcript_repo",
)
