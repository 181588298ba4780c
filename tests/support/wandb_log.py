"""Read back what W&B wrote in offline mode: the records of a run's ``run-ID.wandb`` file (a LevelDB-style log of
protobuf ``Record`` messages in 32 KiB blocks after a 7-byte ``:W&B`` header), as history rows and the config."""

import json
import struct
from pathlib import Path

BLOCK, HEADER = 32768, 7


def records(path: Path) -> list[bytes]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run log"
    out, pos, partial = [], HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # a block's tail too short for a record header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        pos += HEADER
        if kind == 0:  # zero padding up to the block's end
            pos += left - HEADER
            continue
        chunk, pos = data[pos : pos + length], pos + length
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            partial = chunk
        elif kind == 3:
            partial += chunk
        elif kind == 4:
            out.append(partial + chunk)
    return out


def history_and_config(path: Path) -> tuple[list[dict], dict]:
    from wandb.proto import wandb_internal_pb2 as pb

    history, config = [], {}
    for raw in records(path):
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in rec.config.update})
        elif kind == "run":
            config.update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
    return history, config
