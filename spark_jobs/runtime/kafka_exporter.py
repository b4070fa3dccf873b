"""Optional export of every streaming progress event to a Kafka topic.

Enabled in the driver by ``--progress-kafka-bootstrap`` (default: the environment variable
``AIRFLOW_STREAMING_PROGRESS_KAFKA_BOOTSTRAP``); the topic comes from ``--progress-kafka-topic``
(``AIRFLOW_STREAMING_PROGRESS_KAFKA_TOPIC``, default :data:`DEFAULT_TOPIC`). Needs the ``kafka`` extra
(``confluent-kafka``).

Each progress event becomes one JSON message, keyed by the stream name::

    {"stream": "<name>", "version": "<version>", "run_id": "<airflow-streaming run id>",
     "progress": {<the StreamingQueryProgress as Spark's JSON: id, runId, batchId, numInputRows, ...>}}

The exporter never blocks or fails the driver: :meth:`KafkaProgressExporter.send` only enqueues the
message in the client's local buffer (delivery happens on librdkafka's threads), and every error
(serialisation, full buffer, failed delivery) is logged and counted instead of raised. :meth:`close`
flushes with a timeout and drops what is still undelivered then.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

log = logging.getLogger("airflow_streaming.runtime.kafka")

DEFAULT_TOPIC = "airflow-streaming-progress"
ENV_BOOTSTRAP = "AIRFLOW_STREAMING_PROGRESS_KAFKA_BOOTSTRAP"
ENV_TOPIC = "AIRFLOW_STREAMING_PROGRESS_KAFKA_TOPIC"

# librdkafka settings: bounded local buffer, bounded retry time, small batching delay.
_DEFAULT_CONFIG: dict[str, Any] = {
    "client.id": "airflow-streaming-progress",
    "linger.ms": 50,
    "message.timeout.ms": 30000,
    "queue.buffering.max.messages": 10000,
    "acks": "all",
}
_LOG_EVERY_S = 30.0  # rate limit for repeated error logs


class KafkaProgressExporter:
    """Forwards progress dicts of one stream's driver to ``topic`` asynchronously.

    ``config`` is merged over the defaults (librdkafka property names, e.g. ``security.protocol``).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str | None,
        *,
        stream: str,
        version: str,
        run_id: str,
        config: dict[str, Any] | None = None,
    ):
        from confluent_kafka import Producer  # optional dependency: the ``kafka`` extra

        self.topic = topic or DEFAULT_TOPIC
        self.stream = stream
        self.version = version
        self.run_id = run_id
        self._key = stream.encode("utf-8")
        self._lock = threading.Lock()
        self._closed = False
        self._last_error_log = 0.0
        self.enqueued = 0
        self.delivered = 0
        self.failed = 0
        conf = {**_DEFAULT_CONFIG, **(config or {}), "bootstrap.servers": bootstrap_servers,
                "error_cb": self._on_client_error}
        self._producer = Producer(conf)
        log.info("exporting progress of stream %s to Kafka topic %s at %s", stream, self.topic, bootstrap_servers)

    # ------------------------------------------------------------------ callbacks (librdkafka threads)
    def _log_error(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last_error_log >= _LOG_EVERY_S:
            self._last_error_log = now
            log.warning(message, *args)

    def _on_client_error(self, err: Any) -> None:
        self._log_error("Kafka progress exporter: client error %s", err)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        with self._lock:
            if err is None:
                self.delivered += 1
                return
            self.failed += 1
        self._log_error("Kafka progress exporter: a message to %s was not delivered: %s (%d failed so far)",
                        self.topic, err, self.failed)

    # ------------------------------------------------------------------ API
    def message(self, progress: dict[str, Any]) -> bytes:
        """The JSON message for one progress event."""
        envelope = {"stream": self.stream, "version": self.version, "run_id": self.run_id, "progress": progress}
        return json.dumps(envelope, default=str, separators=(",", ":")).encode("utf-8")

    def send(self, progress: dict[str, Any]) -> bool:
        """Enqueue one progress event; never raises. ``False`` when it was dropped (counted in ``failed``)."""
        try:
            if self._closed:
                raise RuntimeError("exporter is closed")
            self._producer.produce(self.topic, key=self._key, value=self.message(progress),
                                   on_delivery=self._on_delivery)
            with self._lock:
                self.enqueued += 1
            self._producer.poll(0)  # serve delivery callbacks of earlier messages, without waiting
            return True
        except Exception as exc:  # noqa: BLE001 - BufferError, KafkaException, serialisation...
            with self._lock:
                self.failed += 1
            self._log_error("Kafka progress exporter: dropped progress of batch %s: %s (%d failed so far)",
                            progress.get("batchId") if isinstance(progress, dict) else None, exc, self.failed)
            return False

    __call__ = send

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"enqueued": self.enqueued, "delivered": self.delivered, "failed": self.failed}

    def close(self, timeout: float = 10.0) -> int:
        """Flush for at most ``timeout`` seconds; return how many messages were left undelivered."""
        if self._closed:
            return 0
        self._closed = True
        try:
            remaining = int(self._producer.flush(timeout))
        except Exception:  # noqa: BLE001
            log.warning("Kafka progress exporter: flush failed", exc_info=True)
            remaining = -1
        self._producer = None  # destroys the client: its threads stop reconnecting and logging
        stats = self.stats()
        if remaining:
            log.warning("Kafka progress exporter: %s message(s) undelivered after %.0fs; %s", remaining, timeout, stats)
        else:
            log.info("Kafka progress exporter closed: %s", stats)
        return remaining
