"""Lifecycle actions: upgrade, restart, rollback, parallel transition."""
