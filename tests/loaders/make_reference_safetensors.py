"""Writes safetensors files with the reference Python `safetensors` package, for the C++ reader's
tests: one tensor per dtype torch and safetensors both know, with a byte pattern the C++ test
recomputes. Usage: make_reference_safetensors.py OUT_DIR"""
import sys

import torch
from safetensors.torch import save_file

DTYPES = [
    "bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
]


def pattern(k: int, nbytes: int, is_bool: bool) -> torch.Tensor:
    # byte i of tensor k: (i * 37 + k * 11) mod 256; 0/1 for bool
    i = torch.arange(nbytes, dtype=torch.int64)
    b = (i * 37 + k * 11) % 256
    if is_bool:
        b = b % 2
    return b.to(torch.uint8)


def main() -> None:
    out = sys.argv[1]
    written = {}
    for k, name in enumerate(DTYPES):
        dtype = getattr(torch, name, None)
        if dtype is None:
            continue
        itemsize = torch.empty(0, dtype=dtype).element_size()
        t = pattern(k, 3 * 8 * itemsize, name == "bool").view(dtype).reshape(3, 8)
        try:
            save_file({name: t}, f"{out}/probe_{name}.safetensors")  # does safetensors know it?
        except Exception as e:  # noqa: BLE001 - an unsupported dtype is reported, not fatal
            print(f"skipped {name}: {e}")
            continue
        written[name] = t
    written["empty"] = torch.empty(0, 4, dtype=torch.float32)
    written["scalar"] = torch.tensor(1.5, dtype=torch.float64)
    save_file(written, f"{out}/reference.safetensors", metadata={"format": "pt", "source": "python"})
    print("wrote", len(written), "tensors:", ", ".join(written))


if __name__ == "__main__":
    main()
