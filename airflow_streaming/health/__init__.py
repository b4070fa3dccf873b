"""Stream health verdicts from what Structured Streaming itself reports (pure Python)."""
