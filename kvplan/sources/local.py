"""Local checkpoints: `config.json` plus the header bytes of each `*.safetensors` file.

A safetensors file starts with an 8-byte little-endian header length and a JSON header that
lists every tensor's dtype, shape and `data_offsets`; the tensor bytes follow. Reading only the
header gives the exact weight bytes without touching the weights.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, BinaryIO

from kvplan.core.pooling import ST_ENCODER_FILES, ST_POOLING_MODULES
from kvplan.errors import BadInput

MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit on header size


def read_text(path: Path, what: str, reader: str = "transformers and vLLM") -> str:
    """A UTF-8 text file's contents, or one clear line (`what` names the file's role)."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise BadInput(f"cannot read {what} {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:  # UTF-16 from PowerShell's Out-File, a binary file
        raise BadInput(f"{what} {path} is not UTF-8 text (byte {e.start}: "
                       f"{e.object[e.start:e.start + 1]!r})",
                       hint=f"save it as UTF-8, as {reader} read it") from None


def read_json(path: Path, what: str, kind: type = dict,
              fix: str = "fix the file or pass another path") -> Any:
    """A JSON file holding an object (or, with `kind=list`, an array), or one clear line
    (`fix`: what to do about a malformed one)."""
    text = read_text(path, what)
    try:
        data = json.loads(text)
    except ValueError as e:
        raise BadInput(f"{what} {path} is not valid JSON: {e}", hint=fix) from None
    if not isinstance(data, kind):
        raise BadInput(f"{what} {path} must hold a JSON "
                       + ("object" if kind is dict else "array"))
    return data


def st_modules(modules: Any, where: str) -> list[dict[str, Any]]:
    """modules.json of a sentence-transformers checkpoint, checked as vLLM indexes it
    (`item["type"]`, `item["path"]` of the Pooling module)."""
    for item in modules:
        if not isinstance(item, dict) or not isinstance(item.get("type"), str) or (
                item["type"] in ST_POOLING_MODULES and not isinstance(item.get("path"), str)):
            raise BadInput(f"{where} lists a module without a 'type' (or a Pooling module "
                           f"without a 'path'): {str(item)[:80]}",
                           hint="each entry needs type and path, as sentence-transformers "
                                "writes them")
    return modules


def st_encoder(read: Any) -> dict[str, Any] | None:
    """`{"file": name, **its object}` for the first sentence-transformers encoder config
    (`core/pooling.py ST_ENCODER_FILES`) that `read(name)` returns non-empty, else None."""
    for name in ST_ENCODER_FILES:
        d = read(name)
        if d:
            return {"file": name, **d}
    return None


def st_parts(modules: list[dict[str, Any]], read: Any) -> dict[str, Any]:
    """The record's sentence-transformers keys for a checked modules.json: the config.json of
    each Pooling module (`core/pooling.py st_pooling` decides which a release reads) and the
    encoder config, each from `read(name)` (its object, or None when it is absent)."""
    configs = {}
    for item in modules:
        if item["type"] in ST_POOLING_MODULES:
            cfg = read(f"{item['path']}/config.json")
            if cfg is not None:
                configs[item["path"]] = cfg
    enc = st_encoder(read)
    return {"st_modules": modules, "st_configs": configs, "st_checked": True,
            **({"st_encoder": enc} if enc else {})}


def st_record(directory: Path) -> dict[str, Any]:
    """The sentence-transformers part of a directory's model record (`st_parts`); without a
    modules.json, the encoder config alone (it sets max_model_len for any runner)."""
    def read(name: str) -> Any:
        f = directory / name
        return read_json(f, "sentence-transformers config") if f.is_file() else None

    mj = directory / "modules.json"
    if not mj.is_file():
        enc = st_encoder(read)
        return {"st_encoder": enc} if enc else {}
    return st_parts(st_modules(read_json(mj, "modules.json", list), str(mj)), read)


def parse_safetensors_header(f: BinaryIO, name: str, file_size: int | None = None) -> dict:
    """Read and validate one safetensors header; returns the header dict."""
    raw = f.read(8)
    if len(raw) < 8:
        raise BadInput(f"safetensors file {name} is truncated (no header length)")
    (n,) = struct.unpack("<Q", raw)
    if n > MAX_HEADER or (file_size is not None and 8 + n > file_size):
        raise BadInput(f"safetensors file {name} declares a {n}-byte header, larger than the file",
                       hint="the file is corrupt or still downloading")
    body = f.read(n)
    if len(body) < n:
        raise BadInput(f"safetensors file {name} is truncated inside its header")
    try:
        header = json.loads(body)
    except ValueError:
        raise BadInput(f"safetensors file {name} has a header that is not valid JSON") from None
    if not isinstance(header, dict):
        raise BadInput(f"safetensors file {name} has a malformed header")
    return header


def tensor_bytes(header: dict, name: str) -> dict[str, tuple[str, int]]:
    """`{tensor: (dtype, bytes)}` of the tensors one header lists."""
    out: dict[str, tuple[str, int]] = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            start, end = info["data_offsets"]
            dtype = str(info["dtype"])
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"safetensors file {name}: tensor {key!r} lacks dtype/data_offsets") \
                from None
        if end < start:
            raise BadInput(f"safetensors file {name}: tensor {key!r} has negative size")
        out[key] = (dtype, int(end) - int(start))
    return out


def weights_record(tensors: dict[str, tuple[str, int]], source: str,
                   config: dict[str, Any]) -> dict[str, Any]:
    """Model-record fields for a set of tensors: total, per dtype, and the per-role layout
    (`kvplan/core/tensors.py`) that places the bytes on each GPU."""
    from kvplan.core.arch import text_config_of
    from kvplan.core.tensors import summarize

    by_dtype: dict[str, int] = {}
    for dtype, n in tensors.values():
        by_dtype[dtype] = by_dtype.get(dtype, 0) + n
    t = text_config_of(config)
    layers = t.get("num_hidden_layers") or t.get("n_layer") or t.get("num_layers") or 0
    rec: dict[str, Any] = {"weights_bytes": sum(by_dtype.values()), "weights_by_dtype": by_dtype,
                           "weights_source": source}
    if isinstance(layers, int) and layers > 0:
        rec["weights_layout"] = summarize({k: n for k, (_, n) in tensors.items()},
                                          layers).to_json()
    return rec


INDEX = "model.safetensors.index.json"  # transformers' SAFE_WEIGHTS_INDEX_NAME


class PartialCheckpoint(BadInput):
    """The index names shards the directory lacks (an interrupted download)."""


def weight_files(directory: Path) -> list[Path]:
    """The `*.safetensors` files vLLM loads from a directory (`default_loader.py
    _prepare_weights`, `weight_utils.filter_duplicate_safetensors_files`, 0.6-0.33): with
    model.safetensors.index.json only the shards its weight_map names (Mistral repos ship
    `consolidated.safetensors` beside the HF shards, "Using both breaks"); shards it names
    that are missing stop the start (0.26+ "Weight files referenced in index but missing",
    earlier the weights left uninitialised), raised as `PartialCheckpoint`."""
    files = sorted(directory.glob("*.safetensors"))
    index = directory / INDEX
    if not index.is_file():
        if any(p.name.startswith("consolidated") for p in files) and any(
                not p.name.startswith("consolidated") for p in files):  # HF + Mistral format
            files = [p for p in files if not p.name.startswith("consolidated")]
        return files
    wm = read_json(index, "safetensors index").get("weight_map")
    if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
        raise BadInput(f"{index} has no 'weight_map' of tensor names to files",
                       hint="re-download the index or remove it")
    named = set(wm.values())
    missing = sorted(n for n in named if not (directory / n).is_file())
    if missing:
        raise PartialCheckpoint(
            f"{INDEX} in {directory} names {len(missing)} of {len(named)} shards that are not "
            f"there ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): vLLM "
            "refuses a partial checkpoint", hint="finish the download, or pass the "
            "config.json alone to size it from an estimate of the weights")
    return [p for p in files if p.name in named]


def safetensors_tensors(directory: Path) -> dict[str, tuple[str, int]] | None:
    """Every tensor's dtype and bytes over the safetensors files vLLM loads (`weight_files`),
    or None when there are none."""
    files = weight_files(directory)
    if not files:
        return None
    out: dict[str, tuple[str, int]] = {}
    for p in files:
        try:
            with p.open("rb") as f:
                header = parse_safetensors_header(f, p.name, p.stat().st_size)
        except OSError as e:  # a dangling symlink (its blob gone), a directory, no access
            raise BadInput(f"cannot read safetensors file {p}: {e.strerror}",
                           hint="a broken symlink or a partial copy: re-download the "
                                "snapshot") from None
        out.update(tensor_bytes(header, p.name))
    return out


def load_local(path: str) -> dict[str, Any] | None:
    """If `path` is a config.json or a model directory, return its model record."""
    p = Path(path).expanduser()
    if not p.exists():
        return None
    if not p.is_dir() and not p.is_file():  # /dev/null, a FIFO
        raise BadInput(f"{p} is neither a config.json nor a model directory",
                       hint="point at a model directory or its config.json")
    directory = p if p.is_dir() else p.parent
    config_path = p if p.is_file() else p / "config.json"
    if not config_path.exists():
        raise BadInput(f"{directory} has no config.json", hint="point at a model directory")
    config = read_json(config_path, "config")
    # named in the errors a config field gives (`size`)
    rec: dict[str, Any] = {"id": str(p), "config": config, "origin": str(config_path)}
    hq = directory / "hf_quant_config.json"
    if hq.exists():
        rec["quant_config"] = read_json(hq, "hf_quant_config")
    rec.update(st_record(directory))
    if p.is_dir():
        rec["st_checked"] = True
        st = safetensors_tensors(directory)
        if st:
            rec.update(weights_record(st, "sum of local safetensors headers", config))
    return rec
