"""Models from the Hugging Face Hub (or a mirror / on-prem hub via HF_ENDPOINT).

Everything goes through `huggingface_hub`: `hf_hub_download` for `config.json` and
`hf_quant_config.json`, and `get_safetensors_metadata` for the exact tensor bytes, which it
reads from the safetensors headers with HTTP range requests (no weights are downloaded). The
token comes from `--token`, `HF_TOKEN` or what `hf auth login` stored; kvplan never prints it.
No remote code is ever executed: only config fields are read.

Offline (`--offline`, `HF_HUB_OFFLINE=1` or `TRANSFORMERS_OFFLINE=1`): the config comes from
the local HF cache, and the weight bytes from safetensors files in the cached snapshot or from
the record kvplan saved the last time it reached the Hub (`~/.cache/kvplan/hub/`).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from kvplan.errors import BadInput
from kvplan.sources.local import (
    read_json,
    safetensors_tensors,
    st_modules,
    st_parts,
    weights_record,
)

REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
DEFAULT_TIMEOUT = 10.0
# what to do about a repo file that is not valid JSON (the cached copy is the repo's)
_REPO_FIX = ("the repo's file is malformed: size a corrected copy (kvplan size PATH to a "
             "config.json or model directory)")


def looks_like_repo_id(name: str) -> bool:
    return bool(REPO_ID_RE.match(name)) and ".." not in name


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def check_endpoint() -> None:
    """HF_ENDPOINT must be an http(s) URL before kvplan asks the Hub (huggingface_hub parses
    it at import, printing a malformed one's failure on stdout, which `load_hub` discards)."""
    from urllib.parse import urlsplit

    ep = endpoint()
    try:
        parts = urlsplit(ep)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        ok = False
    if not ok:
        raise BadInput(f"HF_ENDPOINT={ep!r} is not an http:// or https:// URL",
                       hint="e.g. HF_ENDPOINT=https://huggingface.co, or unset it")


def timeout() -> float:
    """KVPLAN_HUB_TIMEOUT, seconds (set but empty: the default, as an unset variable)."""
    raw = os.environ.get("KVPLAN_HUB_TIMEOUT") or ""
    try:
        v = float(raw) if raw.strip() else DEFAULT_TIMEOUT
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise BadInput(f"KVPLAN_HUB_TIMEOUT={raw!r} must be a positive number of seconds",
                       hint=f"e.g. KVPLAN_HUB_TIMEOUT=30, or unset it for {DEFAULT_TIMEOUT:g}")
    return v


def offline_env() -> bool:
    """HF_HUB_OFFLINE, or TRANSFORMERS_OFFLINE, with which vLLM's config loading through
    transformers stays off the network too (air-gapped sites set either)."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def cache_dir() -> Path:
    from kvplan.cachedir import cache_root

    return cache_root() / "hub"


def _record_path(repo_id: str, commit: str) -> Path:
    return cache_dir() / repo_id.replace("/", "--") / f"{commit}.json"


def _save_record(repo_id: str, commit: str, rec: dict[str, Any]) -> None:
    try:
        p = _record_path(repo_id, commit)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(rec))
    except OSError:
        pass  # a read-only cache only costs the next offline run its exact weight bytes


def _load_record(repo_id: str, commit: str) -> dict[str, Any] | None:
    try:
        return json.loads(_record_path(repo_id, commit).read_text())
    except (OSError, ValueError):
        return None


def _errors() -> dict[str, type]:
    """huggingface_hub's exception classes, tolerant of renames across releases."""
    import huggingface_hub.errors as e
    import huggingface_hub.utils as u

    def cls(*names: str) -> type:
        for n in names:
            for mod in (e, u):
                c = getattr(mod, n, None)
                if isinstance(c, type):
                    return c
        return type(f"_Missing{names[0]}", (Exception,), {})

    return {
        "gated": cls("GatedRepoError"),
        "repo": cls("RepositoryNotFoundError"),
        "revision": cls("RevisionNotFoundError"),
        "entry": cls("RemoteEntryNotFoundError", "EntryNotFoundError"),
        "local": cls("LocalEntryNotFoundError"),
        "offline": cls("OfflineModeIsEnabled"),
        "http": cls("HfHubHTTPError"),
        "not_st": cls("NotASafetensorsRepoError"),
        "st_parse": cls("SafetensorsParsingError"),
        "validation": cls("HFValidationError"),
    }


def _translate(exc: Exception, repo_id: str, revision: str | None, offline: bool,
               suggestions: list[str]) -> BadInput:
    """One line that says what is wrong and how to fix it."""
    E = _errors()
    rev = f" at revision {revision!r}" if revision else ""
    url = f"{endpoint()}/{repo_id}"
    if isinstance(exc, E["gated"]):
        return BadInput(f"{repo_id} is a gated repo and this token has no access",
                        hint=f"accept the licence on {url}, then set HF_TOKEN (or run "
                             "`hf auth login`, or pass --token)")
    if isinstance(exc, E["revision"]):
        return BadInput(f"revision {revision!r} does not exist in {repo_id}",
                        hint="check the branch, tag or commit")
    if isinstance(exc, E["repo"]):
        hint = "check the id; a private repo needs HF_TOKEN or --token"
        if suggestions:
            hint = f"did you mean {', '.join(suggestions)}? ({hint})"
        return BadInput(f"no model {repo_id} on {endpoint()}", hint=hint)
    if isinstance(exc, E["offline"]) and not offline:  # `models add` under HF_HUB_OFFLINE
        return BadInput(f"cannot fetch {repo_id}{rev} from the Hub: offline mode is on "
                        "(HF_HUB_OFFLINE)", hint="unset HF_HUB_OFFLINE to fetch it; an air-gapped "
                        "site uses a catalog `kvplan models export` wrote")
    if not offline and _is_network_error(exc) and not isinstance(exc, E["http"]):
        return _unreachable(exc, repo_id)
    if isinstance(exc, (E["offline"], E["local"])) or offline:
        return BadInput(f"{repo_id}{rev} is not in the catalog or the local Hugging Face cache, "
                        "and offline mode is on",
                        hint=f"run `kvplan models add {repo_id}` on a connected machine and "
                             "carry the catalog over, or pass a config.json")
    if isinstance(exc, E["entry"]):
        return BadInput(f"{repo_id}{rev} has no config.json", hint="is it a model repo?")
    if isinstance(exc, E["validation"]):
        return BadInput(f"{repo_id!r} is not a valid Hugging Face repo id")
    if isinstance(exc, E["http"]):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return BadInput(f"{endpoint()} answered HTTP {status} for {repo_id}{rev}",
                        hint="retry later, or use --offline with the catalog")
    return _unreachable(exc, repo_id)


def _unreachable(exc: Exception, repo_id: str) -> BadInput:
    name = type(exc).__name__
    if "Timeout" in name or isinstance(exc, TimeoutError):
        return BadInput(f"{endpoint()} did not answer within {timeout():g} s",
                        hint="check the network or HF_ENDPOINT, raise KVPLAN_HUB_TIMEOUT, "
                             "or use --offline with the catalog")
    return BadInput(f"cannot reach {endpoint()} to fetch {repo_id} ({name})",
                    hint="check the network, proxy or HF_ENDPOINT, or use --offline with "
                         "the catalog and the local HF cache")


def _quiet(hh: Any) -> None:
    """No progress bars or retry warnings from huggingface_hub on our stderr."""
    try:
        hh.utils.logging.set_verbosity_error()
        hh.utils.disable_progress_bars()
    except AttributeError:
        pass


def _download(hh: Any, repo_id: str, filename: str, revision: str | None, token: str | None,
              offline: bool) -> str:
    """`hf_hub_download`, preceded by one HEAD without retries so that a dead network or a
    missing repo fails within the timeout instead of after huggingface_hub's backoff; with
    the network down, a cached copy is used."""
    if not offline:
        url = hh.hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint())
        try:
            hh.get_hf_file_metadata(url, token=token, timeout=timeout())
        except Exception as exc:
            if not _is_network_error(exc):
                raise
            cached = hh.try_to_load_from_cache(repo_id, filename, revision=revision)
            if isinstance(cached, str):
                return cached
            raise
    return hh.hf_hub_download(repo_id, filename, revision=revision, token=token,
                              local_files_only=offline, etag_timeout=timeout(),
                              endpoint=endpoint())


def _is_network_error(exc: BaseException) -> bool:
    """Connection refused / DNS / timeout, as opposed to an answer from the server."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)) and not hasattr(
                exc, "response"):
            return True
        name = type(exc).__name__
        if any(k in name for k in ("Connect", "Timeout", "Network", "Protocol")):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _cached_tensors(snapshot: Path) -> dict[str, tuple[str, int]] | None:
    """The tensors of the safetensors files a cached snapshot holds, or None when it holds
    none or only part of them (an interrupted download, a blob gone): the Hub's headers or
    kvplan's saved record then give the whole checkpoint."""
    if not any(snapshot.glob("*.safetensors")):
        return None
    try:
        return safetensors_tensors(snapshot)
    except BadInput:
        return None


def _weights(hh: Any, repo_id: str, revision: str | None, token: str | None,
             offline: bool, snapshot: Path, commit: str,
             config: dict[str, Any]) -> dict[str, Any] | None:
    """Exact tensor bytes: cached snapshot files, a saved record, or the Hub's headers."""
    local = _cached_tensors(snapshot)
    if local:
        return weights_record(local, "sum of safetensors headers in the local HF cache",
                              config)
    rec = _load_record(repo_id, commit)
    if rec or offline:
        return rec
    E = _errors()
    try:
        meta = hh.HfApi(endpoint=endpoint()).get_safetensors_metadata(
            repo_id, revision=revision, token=token, timeout=timeout())
    except E["not_st"]:
        return None
    except E["st_parse"] as exc:
        raise BadInput(f"a safetensors header in {repo_id} is malformed or truncated: {exc}",
                       hint="the upload may be incomplete; pass --revision of a good commit") \
            from None
    tensors: dict[str, tuple[str, int]] = {}
    for fm in meta.files_metadata.values():
        for name, t in fm.tensors.items():
            start, end = t.data_offsets
            tensors[name] = (t.dtype, int(end) - int(start))
    rec = weights_record(tensors, f"sum of safetensors headers on {endpoint()} ({commit[:12]})",
                         config)
    _save_record(repo_id, commit, rec)
    return rec


ST_KEYS = ("st_modules", "st_configs", "st_checked", "st_encoder")


def _st_hub(hh: Any, repo_id: str, revision: str | None, token: str | None,
            offline: bool) -> dict[str, Any]:
    """A sentence-transformers repo's modules.json and Pooling configs, as vLLM's
    `get_pooling_config` fetches them ({"st_checked": True} alone when there is none; {} when
    the Hub could not say)."""
    E = _errors()
    try:
        mods = st_modules(read_json(Path(_download(hh, repo_id, "modules.json", revision, token,
                                                   offline)), "modules.json", list),
                          f"modules.json of {repo_id}")
    except (E["entry"], E["local"], E["offline"]):
        return {"st_checked": not offline}
    except BadInput:
        raise
    except Exception:  # noqa: BLE001 - optional file: the network may drop between calls
        return {}

    def read(name: str) -> dict[str, Any] | None:  # only an ST repo is asked for these
        try:
            q = _download(hh, repo_id, name, revision, token, offline)
        except Exception:  # noqa: BLE001 - absent (vLLM reads no mode, no encoder config)
            return None
        return read_json(Path(q), f"{name} of {repo_id}")

    return st_parts(mods, read)


class _Uncached(Exception):
    """A sentence-transformers file the HF cache does not hold."""


def _st_cached(hh: Any, repo_id: str, revision: str | None,
               saved: dict[str, Any] | None) -> dict[str, Any] | None:
    """The sentence-transformers part from the HF cache or kvplan's saved record ({} when
    neither says; None when modules.json is cached but a Pooling config is not)."""
    mj = hh.try_to_load_from_cache(repo_id, "modules.json", revision=revision)
    if not isinstance(mj, str):
        return {k: saved[k] for k in ST_KEYS if k in saved} if saved else {}
    mods = st_modules(read_json(Path(mj), "modules.json", list), f"modules.json of {repo_id}")

    def read(name: str) -> dict[str, Any] | None:
        c = hh.try_to_load_from_cache(repo_id, name, revision=revision)
        if isinstance(c, str):
            return read_json(Path(c), f"{name} of {repo_id}")
        if name.endswith("/config.json"):  # a Pooling config: the cached record is partial
            raise _Uncached(name)
        return None

    try:
        return st_parts(mods, read)
    except _Uncached:
        return None


def _from_cache(hh: Any, repo_id: str, revision: str | None) -> dict[str, Any] | None:
    """A complete record from the local HF cache alone (config + exact weights), or None."""
    try:
        cfg = hh.try_to_load_from_cache(repo_id, "config.json", revision=revision)
    except Exception:  # noqa: BLE001 - a malformed cache is the same as no cache
        return None
    if not isinstance(cfg, str):
        return None
    cfg_path = Path(cfg)
    config = read_json(cfg_path, f"config of {repo_id}", fix=_REPO_FIX)
    snapshot, commit = cfg_path.parent, cfg_path.parent.name
    local = _cached_tensors(snapshot)
    saved = _load_record(repo_id, commit)
    w = (weights_record(local, "sum of safetensors headers in the local HF cache", config)
         if local else saved)
    if not w:
        return None
    st = _st_cached(hh, repo_id, revision, saved)
    if st is None:
        return None
    rec: dict[str, Any] = {"id": repo_id, "config": config, **w, **st,
                           "origin": f"{repo_id}'s config.json"}
    q = hh.try_to_load_from_cache(repo_id, "hf_quant_config.json", revision=revision)
    if isinstance(q, str):
        rec["quant_config"] = read_json(Path(q), f"hf_quant_config of {repo_id}",
                                        fix=_REPO_FIX)
    return rec


def load_hub(repo_id: str, *, revision: str | None = None, token: str | None = None,
             offline: bool | None = None, suggestions: list[str] | None = None
             ) -> dict[str, Any]:
    """Fetch a model record (config, quant config, exact weight bytes) for `repo_id`."""
    with contextlib.redirect_stdout(io.StringIO()):  # huggingface_hub prints import errors
        return _load_hub(repo_id, revision, token, offline, suggestions)


def _load_hub(repo_id: str, revision: str | None, token: str | None, offline: bool | None,
              suggestions: list[str] | None) -> dict[str, Any]:
    offline = offline_env() if offline is None else offline
    import huggingface_hub as hh

    _quiet(hh)
    E = _errors()
    cached = _from_cache(hh, repo_id, revision)
    if cached is not None:
        return cached
    if not offline:  # about to ask the Hub (a cached or offline run never does)
        check_endpoint()
    try:
        cfg_path = Path(_download(hh, repo_id, "config.json", revision, token, offline))
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear line
        if isinstance(exc, BadInput):
            raise
        raise _translate(exc, repo_id, revision, offline, suggestions or []) from None
    config = read_json(cfg_path, f"config of {repo_id}", fix=_REPO_FIX)
    rec: dict[str, Any] = {"id": repo_id, "config": config,
                           "origin": f"{repo_id}'s config.json"}
    try:
        q = _download(hh, repo_id, "hf_quant_config.json", revision, token, offline)
        rec["quant_config"] = read_json(Path(q), f"hf_quant_config of {repo_id}",
                                        fix=_REPO_FIX)
    except BadInput:  # there but malformed: vLLM's get_config fails on it when it reads it
        if config.get("quantization_config") is None:  # (config.json's key absent or null)
            raise
    except (E["entry"], E["local"], E["offline"], E["repo"]):
        pass
    except Exception:  # noqa: BLE001 - optional file: the network may drop between calls
        pass
    commit = cfg_path.parent.name
    try:
        w = _weights(hh, repo_id, revision, token, offline, cfg_path.parent, commit, config)
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - config is enough; weights fall back to estimate
        if os.environ.get("KVPLAN_DEBUG") == "1":
            raise
        w = None
        rec["weights_error"] = f"{type(exc).__name__}: {exc}"
    if w:
        rec.update(w)
    st = _st_hub(hh, repo_id, revision, token, offline)
    rec.update(st)
    if w and st.get("st_checked") and not offline:  # the next cached run knows it too
        _save_record(repo_id, commit, {**{k: v for k, v in w.items() if k not in ST_KEYS},
                                       **st})
    return rec
