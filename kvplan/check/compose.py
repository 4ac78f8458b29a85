"""docker-compose services -> check targets: `entrypoint` + `command` (or the image's
entrypoint), `environment`, `kvplan.io/` labels, GPU reservations, `deploy.replicas` and the
writable mounts (`volumes`, `tmpfs`)."""

from __future__ import annotations

import posixpath
import re

from kvplan.check import annotations
from kvplan.check.base import InputError, Mount, Target, Token
from kvplan.check.command import EnvVar, find_engine, set_version
from kvplan.check.yamlsrc import Obj, int_at, text_of


def _compose_interp(tokens: list[Token]) -> tuple[list[Token], list[Token]]:
    """Compose interpolation: `${VAR:-default}` takes the default (the host environment is not
    known here); `${VAR}`/`$VAR` stay unresolved; `$$` is a literal `$`."""
    out, bad = [], []
    pat = re.compile(r"\$\$|\$\{([A-Za-z_]\w*)(?::?-([^}]*))?\}|\$([A-Za-z_]\w*)")
    for t in tokens:
        unresolved = False

        def sub(m: re.Match) -> str:
            nonlocal unresolved
            if m.group(0) == "$$":
                return "$"
            if m.group(2) is not None:
                return m.group(2)
            unresolved = True
            return m.group(0)

        nt = Token(pat.sub(sub, t.text), t.loc, t.raw)
        out.append(nt)
        if unresolved:
            bad.append(nt)
    return out, bad


def _mounts(s: Obj) -> list[Mount]:
    """Bind mounts and named or anonymous volumes are kept when the container is recreated
    (compose reuses anonymous volumes on `up`); tmpfs is emptied on every restart."""
    out = []
    for i, v in enumerate(s.typed("volumes", kind=list)):
        if isinstance(v, str):
            parts = v.split(":")
            target = parts[0] if len(parts) == 1 else parts[1]
            kind = ("anonymous volume" if len(parts) == 1 else "bind" if
                    parts[0].startswith((".", "/", "~", "$")) else "named volume")
        elif isinstance(v, dict):
            target, kind = v.get("target"), str(v.get("type", "volume"))
        else:
            continue
        if target:
            out.append(Mount(posixpath.normpath(str(target)),
                             "container" if kind == "tmpfs" else "persistent", kind,
                             s.loc("volumes", i)))
    tmpfs = s.get("tmpfs")
    for i, path in enumerate([tmpfs] if isinstance(tmpfs, str) else tmpfs or []):
        out.append(Mount(posixpath.normpath(str(path).split(":")[0]), "container", "tmpfs",
                         s.loc("tmpfs") if isinstance(tmpfs, str) else s.loc("tmpfs", i)))
    return out


_DEVICES = ("deploy", "resources", "reservations", "devices")


def _gpus(s: Obj, t: Target) -> None:
    """The GPUs a service reserves: `deploy.resources.reservations.devices` entries with the
    `gpu` capability, and the service-level `gpus` (compose-spec: `all`, or a list of device
    requests with an implicit `gpu` capability). Each request reserves its `device_ids`, or
    `count` devices; `all` (or neither) is every GPU of the host, a count kvplan does not
    know."""
    requests = [((*_DEVICES, i), dev) for i, dev in enumerate(s.typed(*_DEVICES, kind=list))
                if isinstance(dev, dict) and "gpu" in (
                    dev["capabilities"] if isinstance(dev.get("capabilities"), list)
                    else ["gpu"])]
    gpus = s.get("gpus")
    if gpus == "all":
        t.gpu_count_loc = s.loc("gpus")
    elif isinstance(gpus, list):
        requests += [(("gpus", i), dev) for i, dev in enumerate(gpus) if isinstance(dev, dict)]
    elif gpus is not None:  # the compose schema's `gpus`: "all" or a list of objects
        loc = s.loc("gpus")
        raise InputError(f"gpus: {text_of(gpus)} is not valid Compose: `gpus` is `all` or a "
                         "list of device requests, and docker compose refuses the file",
                         file=loc.file, line=loc.line,
                         hint=f"gpus: [{{count: {text_of(gpus)}}}], or gpus: all")
    for path, dev in requests:
        if isinstance(dev.get("device_ids"), list) and dev["device_ids"]:
            t.gpu_count = len(dev["device_ids"])
        elif str(dev.get("count", "all")) not in ("all", "-1"):  # -1: Docker's "all"
            t.gpu_count = int_at(s, *path, "count", what="count")
        t.gpu_count_loc = s.loc(*path)


def targets(o: Obj) -> list[Target]:
    services = o.get("services")
    out = []
    for sname, svc in services.items():
        if not isinstance(svc, dict):
            continue
        s = o.sub("services", sname)
        env: dict[str, EnvVar] = {}
        e = svc.get("environment")
        if isinstance(e, dict):
            env = {str(k): EnvVar(text_of(v) if v is not None else None,
                                  s.loc("environment", k)) for k, v in e.items()}
        elif isinstance(e, list):
            for i, item in enumerate(e):
                k, eq, v = str(item).partition("=")
                env[k] = EnvVar(v if eq else None, s.loc("environment", i))
        entry, bad1 = _compose_interp(s.tokens("entrypoint", split_strings=True))
        args, bad2 = _compose_interp(s.tokens("command", split_strings=True))
        eng = find_engine(entry, args, env, image=s.string("image"), k8s_vars=False)
        if eng is None:
            continue
        eng.unresolved += bad1 + bad2
        ann = annotations.read(s.mapping("labels"), s.loc())
        t = Target(name=f"service/{sname}", kind="compose service",
                   loc=o.key_loc("services", sname), command=eng)
        ann.apply(t)
        t.mounts = _mounts(s)
        set_version(t, svc.get("image"))
        _gpus(s, t)
        reps = int_at(s, "deploy", "replicas", what="replicas")
        if reps is None:
            reps = int_at(s, "scale", what="scale")
        t.replicas = 1 if reps is None else reps
        t.replicas_loc = s.key_loc("deploy", "replicas") if s.get("deploy", "replicas") \
            is not None else s.loc()
        t.replicas_source = "deploy.replicas"
        out.append(t)
    return out
