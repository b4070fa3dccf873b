"""The job runtime every managed driver runs under: lease, status reporting, graceful stop, exit codes."""
