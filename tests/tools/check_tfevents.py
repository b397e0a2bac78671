#!/usr/bin/env python3
"""Checks TensorBoard event files against the run's metrics.jsonl, reading them from the
published formats alone: TFRecord framing (uint64 length, masked CRC-32C of the length, data,
masked CRC-32C of the data; all little-endian) and the protocol-buffer wire format of
tensorflow's Event (wall_time = 1 double, step = 2 int64, file_version = 3 string,
summary = 5 Summary), Summary (value = 1 repeated Value) and Summary.Value (tag = 1 string,
simple_value = 2 float).

Usage: check_tfevents.py EVENTS_DIR METRICS_JSONL
"""
import glob
import json
import math
import os
import struct
import sys


def crc32c(data):
    # Bit by bit, reflected Castagnoli polynomial.
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    blob = open(path, "rb").read()
    pos = 0
    while pos < len(blob):
        header = blob[pos:pos + 8]
        length, = struct.unpack("<Q", header)
        length_crc, = struct.unpack("<I", blob[pos + 8:pos + 12])
        assert length_crc == masked(header), f"{path}: bad length CRC at byte {pos}"
        data = blob[pos + 12:pos + 12 + length]
        assert len(data) == length, f"{path}: truncated record at byte {pos}"
        data_crc, = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        assert data_crc == masked(data), f"{path}: bad data CRC at byte {pos}"
        pos += 16 + length
        yield data


def varint(buf, pos):
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos


def fields(buf):
    """(field number, wire type, value) of one message; value is int, float bytes or bytes."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        yield number, wire, value


def events(path):
    for data in records(path):
        event = {"scalars": {}}
        for number, wire, value in fields(data):
            if number == 1 and wire == 1:
                event["wall_time"], = struct.unpack("<d", value)
            elif number == 2 and wire == 0:
                event["step"] = value
            elif number == 3 and wire == 2:
                event["file_version"] = value.decode()
            elif number == 5 and wire == 2:
                for n, w, v in fields(value):
                    assert n == 1 and w == 2, "Summary holds only values"
                    tag, simple = None, None
                    for vn, vw, vv in fields(v):
                        if vn == 1 and vw == 2:
                            tag = vv.decode()
                        elif vn == 2 and vw == 5:
                            simple, = struct.unpack("<f", vv)
                    assert tag is not None and simple is not None, "a scalar value"
                    event["scalars"][tag] = simple
        yield event


# Tag -> where its value is in a metrics.jsonl line (docs/metrics.md).
def expected_scalars(line):
    if "loss" not in line:  # the step-0 evaluation: its validation loss only
        return {"val/loss": line["val_loss"]}
    out = {
        "train/loss": line["loss"], "train/lr": line["lr"], "train/grad_norm": line["grad_norm"],
        "train/tokens_seen": line["tokens_seen"], "perf/step_ms": line["step_ms"],
        "perf/tokens_per_s": line["tokens_per_s"], "perf/model_tflops": line["model_tflops"],
        "perf/mfu": line["mfu"], "perf/hfu": line["hfu"],
        "train/global_batch": line["global_batch"],
    }
    for key, tag in (("val_loss", "val/loss"), ("loss_scale", "train/loss_scale"),
                     ("bubble", "perf/bubble"), ("energy_j", "energy/step_j"),
                     ("joules_per_token", "energy/joules_per_token"),
                     ("power_w", "energy/power_w")):
        if key in line:
            out[tag] = line[key]
    for kind, b in line["memory_bytes"].items():
        out[f"memory/{kind}_bytes"] = b
    for kind, b in line["memory_peak_bytes"].items():
        out[f"memory_peak/{kind}_bytes"] = b
    for key, b in line.get("comm_bytes_sent", {}).items():
        out[f"comm/{key}_bytes"] = b
    return out


def main():
    directory, metrics = sys.argv[1], sys.argv[2]
    assert crc32c(b"123456789") == 0xE3069283, "CRC-32C check value (RFC 3720)"
    files = sorted(glob.glob(os.path.join(directory, "*tfevents*")))
    assert len(files) == 1, f"expected one event file in {directory}, found {files}"
    evs = list(events(files[0]))
    assert evs[0].get("file_version") == "brain.Event:2", f"first event: {evs[0]}"
    lines = [json.loads(l) for l in open(metrics)]
    steps = [e for e in evs[1:]]
    assert [e["step"] for e in steps] == [l["step"] for l in lines], "one event per step"
    checked = 0
    for event, line in zip(steps, lines):
        assert event["wall_time"] > 1.6e9, "wall_time is seconds since 1970"
        want = expected_scalars(line)
        assert set(event["scalars"]) == set(want), \
            f"step {line['step']}: tags {sorted(event['scalars'])} vs {sorted(want)}"
        for tag, value in want.items():
            got = event["scalars"][tag]
            assert math.isclose(got, float(value), rel_tol=1e-6, abs_tol=1e-30), \
                f"step {line['step']} {tag}: {got} in the event file, {value} in metrics.jsonl"
            checked += 1
    assert any("val/loss" in e["scalars"] for e in steps), "validation loss logged"
    assert lines[0]["step"] == 0 and "loss" not in lines[0] and "val_loss" in lines[0], \
        "the validation loss before training is step 0, without a training loss"
    print(f"{files[0]}: {len(evs)} records, CRCs good, {checked} scalars match {metrics}")


if __name__ == "__main__":
    main()
