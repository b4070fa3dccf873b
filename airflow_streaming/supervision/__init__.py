"""Supervision of running streams: restart policy and failure classification (pure Python)."""
