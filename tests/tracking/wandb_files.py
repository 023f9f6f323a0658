"""Reading a W&B offline run back from its own file, ``run-<id>.wandb``: W&B's record
log (a 7-byte header ``:W&B``, 0xBEE1, version; then 32 KiB blocks of records, each a
7-byte header (CRC-32C, length, type: full, first, middle, last) and a piece of one
``wandb_internal_pb2.Record``), the format ``wandb sync`` uploads."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[Any]:
    """Every ``Record`` of a ``.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    out, pos, pending = [], HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # the block's tail: padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if kind == 0 and length == 0:
            pos += left  # zero padding to the block's end
            continue
        piece = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        pending = piece if kind in (FULL, FIRST) else pending + piece
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def offline_run(folder: Path) -> dict[str, Any]:
    """What an offline run logged: ``history`` (step -> {key: value}), ``config``
    ({key: value}), ``group``, ``name``, ``exit_code`` and ``summary`` ({key: value})."""
    (path,) = folder.glob("run-*.wandb")
    run: dict[str, Any] = {"history": {}, "config": {}, "summary": {}, "exit_code": None}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run["group"], run["name"] = record.run.run_group, record.run.display_name
            run["id"] = record.run.run_id
            for item in record.run.config.update:
                run["config"][item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "history":
            items = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in record.history.item
            }
            run["history"].setdefault(record.history.step.num, {}).update(items)
        elif kind == "config":
            for item in record.config.update:
                run["config"][item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "summary":
            for item in record.summary.update:
                run["summary"][item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "exit":
            run["exit_code"] = record.exit.exit_code
    return run
