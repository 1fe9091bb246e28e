"""Detection: screening, progress, hangs, stragglers, patterns and verdicts (pure code)."""
