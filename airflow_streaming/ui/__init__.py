"""Streams in the Airflow UI: a plugin with a read-only JSON API and a dashboard page (see ``docs/ui.md``).

- :mod:`.streams` finds the managed streams and reads each one's control files through the existing
  hooks and readers (I/O, never raises on a bad file);
- :mod:`.views` shapes what was read into the JSON the page shows (pure functions, secrets masked);
- :mod:`.api` is the FastAPI app mounted in ``airflow api-server`` (Airflow's own authentication and
  authorization), :mod:`.plugin` registers it, :mod:`.links` adds "Spark UI" and "Stream dashboard"
  extra links to every operator and sensor of the provider;
- ``static/`` holds the page and the vendored chart library (Apache ECharts).
"""
