"""Generates safetensors files, valid and damaged, and records whether the reference Python
`safetensors` package accepts each (opens it and reads every tensor): the differential test of the
C++ reader (tests/loaders/safetensors_test.cpp). Deterministic. Usage:
make_safetensors_cases.py OUT_DIR COUNT  -> OUT_DIR/case-NNNN.safetensors and OUT_DIR/cases.txt
("case-NNNN accept|reject what was done")."""
import json
import random
import struct
import sys

from safetensors import safe_open

DTYPES = {"F32": 4, "F16": 2, "BF16": 2, "I8": 1, "U8": 1, "I64": 8, "F64": 8, "BOOL": 1, "F8_E4M3": 1}


def valid(rng):
    """A header (dict) and data (bytes) of 1-4 tensors, laid out back to back."""
    header, offset = {}, 0
    for k in range(rng.randint(1, 4)):
        dtype = rng.choice(list(DTYPES))
        shape = [rng.randint(0, 5) for _ in range(rng.randint(0, 3))]
        n = DTYPES[dtype]
        for d in shape:
            n *= d
        header[f"t{k}"] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    if rng.random() < 0.3:
        header["__metadata__"] = {"format": "pt"}
    data = bytes(rng.randrange(256) for _ in range(offset))
    if any(e.get("dtype") == "BOOL" for k, e in header.items() if k != "__metadata__"):
        data = bytes(b % 2 for b in data)  # bools are 0 or 1
    return header, data


def encode(header, data, pad=True, before="", indent=None):
    text = before + json.dumps(header, separators=(",", ":") if indent is None else None, indent=indent)
    if pad:
        text += " " * ((8 - len(text) % 8) % 8)
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw + data


def with_header_text(out, edit):
    """The file `out` with its header text replaced by edit(text), padded again."""
    n = struct.unpack("<Q", out[:8])[0]
    text = edit(out[8 : 8 + n].decode())
    raw = text.encode() + b" " * ((8 - len(text.encode()) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw + out[8 + n :]


def json_space(rng, n):
    """n characters of JSON's whitespace (space, tab, line feed, carriage return)."""
    return "".join(rng.choice(" \t\n\r") for _ in range(n))


def tensors_of(header):
    return [k for k in header if k != "__metadata__"]


def mutate(rng, header, data):
    """One damage (or none); returns the file's bytes and what was done."""
    names = tensors_of(header)
    name = rng.choice(names)
    entry = header[name]
    kind = rng.choice([
        "none", "dtype", "shape-grow", "shape-negative", "shape-float", "begin-shift", "end-shift",
        "reverse", "overlap", "gap", "extra-data", "short-data", "unknown-field", "missing-field",
        "metadata-int", "metadata-list", "header-not-object", "header-truncated", "length-large",
        "length-small", "truncate-file", "no-padding", "duplicate-key", "empty-header", "offsets-three",
        "offsets-negative", "name-metadata-entry",
        # Issue 23: what JSON allows around and inside the object, which serde_json (the
        # reference's parser) reads, and the bytes around it that it does not.
        "leading-whitespace", "trailing-whitespace", "indented", "byte-order-mark", "leading-nul",
        "trailing-nul", "leading-other-space", "metadata-null", "escaped-names", "duplicate-field",
        "duplicate-metadata", "duplicate-key-bad-first", "dtype-subbyte",
    ])
    pad, before, indent = True, "", None
    if kind == "dtype":
        entry["dtype"] = rng.choice(["Q4", "f32", "", "F128", "I4"])
    elif kind == "shape-grow":
        entry["shape"] = entry["shape"] + [2]
    elif kind == "shape-negative":
        entry["shape"] = [-1] + entry["shape"]
    elif kind == "shape-float":
        entry["shape"] = [1.5] + entry["shape"]
    elif kind == "begin-shift":
        entry["data_offsets"][0] += rng.choice([-1, 1, 8])
    elif kind == "end-shift":
        entry["data_offsets"][1] += rng.choice([-1, 1, 8])
    elif kind == "reverse":
        entry["data_offsets"].reverse()
    elif kind == "overlap" and len(names) > 1:  # with one tensor, the file stays valid
        other = header[names[(names.index(name) + 1) % len(names)]]
        other["data_offsets"] = list(entry["data_offsets"])
    elif kind == "gap":
        for n in names:
            header[n]["data_offsets"] = [o + 4 for o in header[n]["data_offsets"]]
        data = bytes(4) + data  # every tensor moves up 4 bytes; nothing covers the first 4
    elif kind == "extra-data":
        data = data + bytes(rng.randint(1, 9))
    elif kind == "short-data":
        data = data[: max(0, len(data) - rng.randint(1, 3))]
    elif kind == "unknown-field":
        entry["extra"] = 1
    elif kind == "missing-field":
        del entry[rng.choice(["dtype", "shape", "data_offsets"])]
    elif kind == "metadata-int":
        header["__metadata__"] = {"a": 1}
    elif kind == "metadata-list":
        header["__metadata__"] = ["a"]
    elif kind == "empty-header":
        header, data = {}, data if rng.random() < 0.5 else b""
    elif kind == "offsets-three":
        entry["data_offsets"] = entry["data_offsets"] + [0]
    elif kind == "offsets-negative":
        entry["data_offsets"] = [-8, entry["data_offsets"][1]]
    elif kind == "name-metadata-entry":
        header["__metadata__"] = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
    elif kind == "no-padding":
        pad = False
    elif kind == "leading-whitespace":
        before = json_space(rng, rng.randint(1, 9))
    elif kind == "indented":
        indent = rng.choice([1, 2, "\t"])
    elif kind == "metadata-null":
        header["__metadata__"] = None
    elif kind == "duplicate-metadata":
        header["__metadata__"] = {"format": "pt"}  # and a second one before it, below
    elif kind == "dtype-subbyte" and entry["shape"]:
        # F4 packs two values a byte; the reference reads it (as torch's float4_e2m1fn_x2).
        entry["dtype"], entry["shape"] = "F4", [2 * (entry["data_offsets"][1] - entry["data_offsets"][0])]
    out = encode(header, data, pad, before, indent)
    if kind == "header-not-object":
        raw = b"[1,2]   "
        out = struct.pack("<Q", len(raw)) + raw
    elif kind == "header-truncated":
        n = struct.unpack("<Q", out[:8])[0]
        out = struct.pack("<Q", n - 3) + out[8 : 8 + n - 3] + out[8 + n :]
    elif kind == "length-large":
        out = struct.pack("<Q", len(out)) + out[8:]
    elif kind == "length-small":
        n = struct.unpack("<Q", out[:8])[0]
        out = struct.pack("<Q", max(0, n - 8)) + out[8:]
    elif kind == "truncate-file":
        out = out[: rng.randint(0, len(out) - 1)]
    elif kind == "duplicate-key":
        text = out[8 : 8 + struct.unpack("<Q", out[:8])[0]].decode()
        dup = text.replace("{", '{"t0":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},', 1)
        raw = dup.encode() + b" " * ((8 - len(dup) % 8) % 8)
        out = struct.pack("<Q", len(raw)) + raw + out[8 + struct.unpack("<Q", out[:8])[0] :]
    elif kind == "trailing-whitespace":
        n = struct.unpack("<Q", out[:8])[0]
        tail = json_space(rng, rng.randint(1, 9)).encode()
        out = struct.pack("<Q", n + len(tail)) + out[8 : 8 + n] + tail + out[8 + n :]
    elif kind in ("byte-order-mark", "leading-nul", "leading-other-space", "trailing-nul"):
        n = struct.unpack("<Q", out[:8])[0]
        text = out[8 : 8 + n]
        if kind == "trailing-nul":
            text = text.rstrip(b" ") + b"\0" * rng.randint(1, 4)
        else:
            text = {"byte-order-mark": "\ufeff", "leading-nul": "\0",
                    "leading-other-space": rng.choice(["\f", "\v", "\u00a0"])}[kind].encode() + text
        out = struct.pack("<Q", len(text)) + text + out[8 + n :]
    elif kind == "escaped-names":
        out = with_header_text(out, lambda t: t.replace('"t', '"\\u0074'))
    elif kind == "duplicate-field":
        field = rng.choice(["dtype", "shape", "data_offsets"])
        value = json.dumps(entry[field] if field in entry else 0, separators=(",", ":"))
        out = with_header_text(out, lambda t: t.replace(f'"{name}":{{', f'"{name}":{{"{field}":{value},', 1))
    elif kind == "duplicate-metadata":
        out = with_header_text(out, lambda t: t.replace("{", '{"__metadata__":{"a":"b"},', 1))
    elif kind == "duplicate-key-bad-first":
        # The reference deserializes every occurrence of a name, then keeps the last.
        bad = rng.choice(['{"dtype":"Q4","shape":[0],"data_offsets":[0,0]}', '5', '[]', 'null',
                          '{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}', '{"dtype":"U8","shape":[0]}'])
        out = with_header_text(out, lambda t: t.replace("{", '{"' + name + '":' + bad + ",", 1))
    return out, kind


def accepted(path):
    try:
        with safe_open(path, framework="pt") as f:
            for k in f.keys():
                f.get_tensor(k)
        return True
    except Exception:  # noqa: BLE001 - any refusal is a reject
        return False


def main():
    out_dir, count = sys.argv[1], int(sys.argv[2])
    rng = random.Random(20261130)
    lines = []
    for i in range(count):
        header, data = valid(rng)
        raw, kind = mutate(rng, header, data)
        path = f"{out_dir}/case-{i:04d}.safetensors"
        with open(path, "wb") as f:
            f.write(raw)
        lines.append(f"case-{i:04d} {'accept' if accepted(path) else 'reject'} {kind}")
    with open(f"{out_dir}/cases.txt", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
