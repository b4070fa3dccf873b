"""Decoders for a checkpoint's state store schema and operator metadata files.

State schema files (``SchemaHelper`` in Spark) are written with Java's ``DataOutputStream``:
``writeUTF`` is a 2-byte big-endian length followed by that many bytes of *modified* UTF-8, and
``writeInt`` is 4 bytes big-endian. Every file starts with ``writeUTF("v<N>")``:

v1
    ``writeUTF(keySchemaJson)``, ``writeUTF(valueSchemaJson)``.
v2 (what every operator but transformWithState writes, in ``state/<op>/<part>/_metadata/schema``;
joins have one per store: ``state/<op>/<part>/<store>/_metadata/schema``)
    key then value, each a *chunked string*: ``writeInt(n)`` then ``n`` ``writeUTF`` chunks whose
    concatenation is the StructType JSON.
v3 (transformWithState, in ``state/<op>/_stateSchema/<store>/<batchId>_<uuid>``)
    ``writeInt(numColumnFamilies)``, then per column family: ``writeUTF(name)``,
    ``writeShort(keySchemaId)``, chunked key schema, ``writeShort(valueSchemaId)``, chunked value
    schema, chunked key-encoder spec JSON, chunked user-key-encoder schema JSON (``"{    }"`` when
    absent). That is what Spark 4.2.0's ``SchemaV3Writer`` writes (checked with javap); earlier
    v3 files without the two schema ids are accepted as a fallback.

Operator metadata: ``state/<op>/_metadata/metadata`` (v1) or ``state/<op>/_metadata/v2/<batchId>``
(v2, one per batch that changed it): a ``v<N>`` line then one JSON object
``{"operatorInfo":{"operatorId","operatorName"},"stateStoreInfo":[{"storeName","numColsPrefixKey",
"numPartitions"[,"stateSchemaFilePath"]}][,"operatorPropertiesJson":"..."]}``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.checkpoint.logs import (
    OPERATOR_METADATA_VERSIONS,
    CheckpointError,
    decode_text,
    parse_json,
    parse_version,
)

SCHEMA_VERSIONS = (1, 2, 3)
_EMPTY_USER_KEY_SCHEMA = "{    }"


def decode_modified_utf8(data: bytes) -> str:
    """Decode Java's modified UTF-8 (NUL as C0 80, supplementary characters as surrogate pairs).

    Lone surrogates are kept (``surrogatepass``) so a pair split across two chunks can be joined
    by :func:`join_surrogates` after concatenation.
    """
    return data.replace(b"\xc0\x80", b"\x00").decode("utf-8", errors="surrogatepass")


def join_surrogates(text: str) -> str:
    """Turn UTF-16 surrogate pairs (as Java wrote them) into real characters."""
    if not any("\ud800" <= ch <= "\udfff" for ch in text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", errors="surrogatepass")


def encode_modified_utf8(text: str) -> bytes:
    """Java ``writeUTF`` body bytes for ``text`` (for tests and synthetic checkpoints)."""
    out = bytearray()
    units = text.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(units), 2):
        unit = units[i] | (units[i + 1] << 8)
        if 0x0001 <= unit <= 0x007F:
            out.append(unit)
        elif unit <= 0x07FF:  # includes NUL -> C0 80
            out += bytes((0xC0 | (unit >> 6), 0x80 | (unit & 0x3F)))
        else:
            out += bytes((0xE0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3F), 0x80 | (unit & 0x3F)))
    return bytes(out)


def write_utf(text: str) -> bytes:
    """``DataOutputStream.writeUTF(text)``."""
    body = encode_modified_utf8(text)
    if len(body) > 0xFFFF:
        raise ValueError("writeUTF string longer than 65535 bytes")
    return struct.pack(">H", len(body)) + body


def write_chunked(text: str, chunk_chars: int = 65535) -> bytes:
    """Spark's chunked JSON string: ``writeInt(n)`` then ``n`` ``writeUTF`` chunks."""
    chunks = [text[i : i + chunk_chars] for i in range(0, len(text), chunk_chars)] or [""]
    return struct.pack(">i", len(chunks)) + b"".join(write_utf(c) for c in chunks)


def encode_schema_v2(key_schema: dict[str, Any], value_schema: dict[str, Any]) -> bytes:
    """The bytes Spark's ``SchemaV2Writer`` writes for a key and value StructType (compact JSON)."""
    dump = lambda s: json.dumps(s, separators=(",", ":"))  # noqa: E731
    return write_utf("v2") + write_chunked(dump(key_schema)) + write_chunked(dump(value_schema))


class _Reader:
    """A ``DataInputStream`` over bytes that reports truncation as a CheckpointError naming the file."""

    def __init__(self, path: str, data: bytes) -> None:
        self.path = path
        self.data = data
        self.pos = 0

    def _take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CheckpointError(
                f"{self.path}: truncated or corrupt state schema file: needed {n} bytes for {what} "
                f"at offset {self.pos}, file has {len(self.data)}"
            )
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def read_int(self, what: str) -> int:
        return struct.unpack(">i", self._take(4, what))[0]

    def read_short(self, what: str) -> int:
        return struct.unpack(">h", self._take(2, what))[0]

    def read_utf(self, what: str) -> str:
        (length,) = struct.unpack(">H", self._take(2, what))
        raw = self._take(length, what)
        try:
            return decode_modified_utf8(raw)
        except UnicodeDecodeError as exc:
            raise CheckpointError(f"{self.path}: {what} is not modified UTF-8 (byte {exc.start})") from exc

    def read_chunked(self, what: str) -> str:
        count = self.read_int(f"{what} chunk count")
        # A JSON schema over 2 GB is not a schema: treat absurd counts as corruption.
        if count < 0 or count > max(1, len(self.data) // 2):
            raise CheckpointError(f"{self.path}: corrupt state schema file: {what} chunk count {count}")
        return join_surrogates("".join(self.read_utf(f"{what} chunk") for _ in range(count)))


def _struct_json(path: str, text: str, what: str) -> dict[str, Any]:
    value = parse_json(path, text, what)
    if not isinstance(value, dict) or value.get("type") != "struct" or not isinstance(value.get("fields"), list):
        raise CheckpointError(f"{path}: {what} is not a StructType JSON")
    return value


@dataclass(frozen=True)
class ColumnFamilySchema:
    """Key/value schema of one column family (the only one, ``default``, before v3)."""

    name: str
    key_schema: dict[str, Any]
    value_schema: dict[str, Any]
    key_encoder_spec: dict[str, Any] | None = None
    user_key_encoder_schema: dict[str, Any] | None = None
    key_schema_id: int | None = None  # v3 only
    value_schema_id: int | None = None  # v3 only


def _read_v3_families(path: str, data: bytes, start: int, with_schema_ids: bool) -> list[ColumnFamilySchema]:
    r = _Reader(path, data)
    r.pos = start
    count = r.read_int("column family count")
    if count < 0 or count > len(data):
        raise CheckpointError(f"{path}: corrupt state schema file: column family count {count}")
    families = []
    for i in range(count):
        name = join_surrogates(r.read_utf(f"column family {i} name"))
        key_id = r.read_short(f"{name} key schema id") if with_schema_ids else None
        key = _struct_json(path, r.read_chunked(f"{name} key schema"), f"{name} key schema")
        value_id = r.read_short(f"{name} value schema id") if with_schema_ids else None
        value = _struct_json(path, r.read_chunked(f"{name} value schema"), f"{name} value schema")
        spec = parse_json(path, r.read_chunked(f"{name} key encoder spec"), f"{name} key encoder spec")
        user_text = r.read_chunked(f"{name} user key encoder schema")
        user = None
        if user_text.strip() and user_text != _EMPTY_USER_KEY_SCHEMA:
            parsed = parse_json(path, user_text, f"{name} user key encoder schema")
            user = parsed if isinstance(parsed, dict) and parsed else None
        families.append(
            ColumnFamilySchema(name, key, value, spec if isinstance(spec, dict) else None, user, key_id, value_id)
        )
    if r.pos != len(data):
        raise CheckpointError(
            f"{path}: corrupt state schema file: {len(data) - r.pos} unexpected trailing bytes after v3 schema"
        )
    return families


@dataclass(frozen=True)
class StateSchemaFile:
    path: str
    version: int
    column_families: list[ColumnFamilySchema]

    @property
    def default(self) -> ColumnFamilySchema | None:
        """The ``default`` column family; else (v3) the first non-internal one (names starting with
        ``$`` are Spark's own: row counters, timers, TTL indexes)."""
        for cf in self.column_families:
            if cf.name == "default":
                return cf
        for cf in self.column_families:
            if not cf.name.startswith("$"):
                return cf
        return self.column_families[0] if self.column_families else None


def parse_state_schema(path: str, data: bytes) -> StateSchemaFile:
    """Decode a state schema file of format v1, v2 or v3."""
    if len(data) < 2:
        raise CheckpointError(f"{path}: truncated state schema file ({len(data)} bytes)")
    r = _Reader(path, data)
    (length,) = struct.unpack(">H", data[:2])
    if length > 16 or length + 2 > len(data):
        raise CheckpointError(f"{path}: not a Spark state schema file (no writeUTF version header)")
    version_text = r.read_utf("version")
    version = parse_version(path, version_text, SCHEMA_VERSIONS, "state schema")
    families: list[ColumnFamilySchema] = []
    if version == 1:
        key = _struct_json(path, join_surrogates(r.read_utf("key schema")), "key schema")
        value = _struct_json(path, join_surrogates(r.read_utf("value schema")), "value schema")
        families.append(ColumnFamilySchema("default", key, value))
    elif version == 2:
        key = _struct_json(path, r.read_chunked("key schema"), "key schema")
        value = _struct_json(path, r.read_chunked("value schema"), "value schema")
        families.append(ColumnFamilySchema("default", key, value))
    else:
        try:
            families = _read_v3_families(path, data, r.pos, with_schema_ids=True)
        except CheckpointError as first:
            try:
                families = _read_v3_families(path, data, r.pos, with_schema_ids=False)
            except CheckpointError:
                raise first from None
        return StateSchemaFile(path, version, families)
    if r.pos != len(data):
        raise CheckpointError(
            f"{path}: corrupt state schema file: {len(data) - r.pos} unexpected trailing bytes after v{version} schema"
        )
    return StateSchemaFile(path, version, families)


@dataclass(frozen=True)
class StoreMetadata:
    store_name: str
    num_cols_prefix_key: int
    num_partitions: int
    # v2 only: the schema files this store's state was written with (oldest first).
    # Spark 4.2 writes a list ("stateSchemaFilePaths"); earlier 4.0 builds a single string.
    state_schema_file_paths: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class OperatorMetadata:
    path: str
    version: int
    operator_id: int
    operator_name: str
    stores: list[StoreMetadata]
    # v2: the operatorPropertiesJson string, parsed (transformWithState: timeMode, outputMode, ...).
    operator_properties: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _schema_paths(store: dict[str, Any]) -> list[str]:
    paths = store.get("stateSchemaFilePaths")
    if isinstance(paths, list):
        return [str(p) for p in paths if p]
    single = store.get("stateSchemaFilePath")
    return [str(single)] if single else []


def parse_operator_metadata(path: str, data: bytes) -> OperatorMetadata:
    text = decode_text(path, data)
    if not text.strip():
        raise CheckpointError(f"{path}: empty operator metadata file")
    first, _, rest = text.partition("\n")
    version = parse_version(path, first, OPERATOR_METADATA_VERSIONS, "operator metadata")
    if not rest.strip():
        raise CheckpointError(f"{path}: truncated operator metadata file: nothing after {first.strip()!r}")
    obj = parse_json(path, rest.strip(), "operator metadata")
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: operator metadata must be a JSON object")
    info = obj.get("operatorInfo")
    stores_raw = obj.get("stateStoreInfo")
    if not isinstance(info, dict) or not isinstance(stores_raw, list):
        raise CheckpointError(f"{path}: operator metadata lacks operatorInfo/stateStoreInfo")
    try:
        stores = [
            StoreMetadata(
                store_name=str(s["storeName"]),
                num_cols_prefix_key=int(s.get("numColsPrefixKey", 0)),
                num_partitions=int(s["numPartitions"]),
                state_schema_file_paths=_schema_paths(s),
            )
            for s in stores_raw
        ]
        op_id = int(info["operatorId"])
        op_name = str(info["operatorName"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: malformed operator metadata ({exc!r})") from exc
    props = None
    props_json = obj.get("operatorPropertiesJson")
    if isinstance(props_json, str) and props_json.strip():
        parsed = parse_json(path, props_json, "operatorPropertiesJson")
        props = parsed if isinstance(parsed, dict) else {"value": parsed}
    extra = {k: v for k, v in obj.items() if k not in ("operatorInfo", "stateStoreInfo", "operatorPropertiesJson")}
    return OperatorMetadata(path, version, op_id, op_name, stores, props, extra)


__all__ = [
    "SCHEMA_VERSIONS",
    "ColumnFamilySchema",
    "OperatorMetadata",
    "StateSchemaFile",
    "StoreMetadata",
    "encode_schema_v2",
    "parse_operator_metadata",
    "parse_state_schema",
    "write_chunked",
    "write_utf",
]
