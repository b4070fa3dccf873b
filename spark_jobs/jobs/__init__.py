"""Bundled streaming jobs. Each module exposes ``build(spark, args, ctx) -> DataStreamWriter``;
the runtime adds the checkpoint, trigger and query name and starts it."""
