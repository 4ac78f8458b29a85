"""Kubernetes objects -> check targets: Pod, Deployment, StatefulSet, ReplicaSet, DaemonSet,
Job, CronJob, Argo Rollout, LeaderWorkerSet, KServe InferenceService and (Cluster)ServingRuntime.

A HorizontalPodAutoscaler or KEDA ScaledObject in the inputs sets the replica range of its
target; other kinds are skipped. docs/check.md describes what is read from where.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import replace
from typing import Any

import yaml

from kvplan.check import annotations
from kvplan.check.base import FileInfo, InputError, Loc, Mount, PodGroup, Target, Token
from kvplan.check.command import EnvVar, expand_k8s, find_engine, set_version
from kvplan.check.yamlsrc import Doc, Obj, int_at, text_of

GPU_LABELS = ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator",
              "karpenter.k8s.aws/instance-gpu-name", "amd.com/gpu.product-name",
              "beta.amd.com/gpu.product-name")
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
MIG_RESOURCE = "nvidia.com/mig-"  # the device plugin's mixed strategy: nvidia.com/mig-3g.20gb
POD_PATHS = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "Rollout": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
# volume types that live and die with the pod, and the read-only ones no cache is written to
POD_SCOPED = {"emptyDir", "ephemeral"}
READ_ONLY = {"configMap", "secret", "downwardAPI", "projected"}
SCALED = {"Deployment", "StatefulSet", "ReplicaSet", "Rollout"}
RUNTIMES = {"ServingRuntime", "ClusterServingRuntime"}


def objects(d: Doc) -> list[tuple[yaml.Node, dict]]:
    """The Kubernetes objects of a document (the items of a `kind: List`)."""
    data = d.data
    if not isinstance(data, dict) or "kind" not in data or "apiVersion" not in data:
        return []
    out = [(d.node, data)]
    if str(data["kind"]).endswith("List"):
        items = data.get("items") or []
        out = [(d.node_at("items", i), x) for i, x in enumerate(items if isinstance(items, list)
                                                               else []) if isinstance(x, dict)]
    for node, x in out:
        if not isinstance(x.get("kind"), str):
            loc = d.loc("kind", base=node)
            raise InputError("kind must be a string", file=loc.file, line=loc.line)
    return out


Scaler = tuple[int, int | None, Loc, str]  # min, max, where the max is written, source


def autoscalers(objs: list[Obj]) -> dict[tuple[str, str], Scaler]:
    """(kind, name) -> the replica range of each HorizontalPodAutoscaler and KEDA
    ScaledObject, as (min, max, where max is written, source). KEDA owns the HPA it creates
    for a ScaledObject, whose `minReplicaCount` defaults to 0, `maxReplicaCount` to 100 and
    `scaleTargetRef.kind` to Deployment (keda.sh ScaledObject specification)."""
    out = {}
    for o in objs:
        kind = o.get("kind")
        keda = kind == "ScaledObject" and str(o.get("apiVersion")).startswith("keda.sh/")
        if kind != "HorizontalPodAutoscaler" and not keda:
            continue
        ref = o.typed("spec", "scaleTargetRef")
        target = str(ref.get("kind") or ("Deployment" if keda else ""))
        lo_key, hi_key = ("minReplicaCount", "maxReplicaCount") if keda else \
            ("minReplicas", "maxReplicas")
        lo = int_at(o, "spec", lo_key, what=lo_key)
        hi = int_at(o, "spec", hi_key, what=hi_key)
        if keda:
            lo, hi = lo or 0, 100 if hi is None else hi
            source = f"ScaledObject/{o.get('metadata', 'name')}"
        else:
            lo, source = lo or 1, "HorizontalPodAutoscaler"
        key = (target.lower(), str(ref.get("name")))
        if keda or key not in out:  # KEDA scales its target through an HPA of its own
            out[key] = (lo, hi, o.loc("spec", hi_key), source)
    return out


def targets(objs: list[tuple[FileInfo, Obj]]) -> list[Target]:
    """Targets of the Kubernetes objects of all inputs (a runtime or autoscaler in one file
    applies to objects in another)."""
    runtimes = {str(o.get("metadata", "name")): o for _, o in objs if o.get("kind") in RUNTIMES}
    scalers = autoscalers([o for _, o in objs])
    used: set[str] = set()
    out: list[Target] = []
    for info, o in objs:
        kind = o.get("kind")
        info.kinds.append(kind)
        if kind == "InferenceService":
            new = _isvc(o, runtimes, used)
        elif kind in POD_PATHS:
            new = _pod_kind(o, scalers)
        elif kind == "LeaderWorkerSet":
            new = _lws(o)
        else:
            continue
        info.targets += len(new)
        out += new
    for info, o in objs:  # runtimes no InferenceService in the inputs uses: check as templates
        if o.get("kind") in RUNTIMES and str(o.get("metadata", "name")) not in used:
            new = _runtime_alone(o)
            info.targets += len(new)
            out += new
    return out


_K8S_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _env(c: Obj, base: dict[str, EnvVar] | None = None) -> dict[str, EnvVar]:
    """The container's env, over `base` (what a controller injects unless the container sets
    it); a value's `$(VAR)` is expanded from the variables before it, as the kubelet does."""
    env: dict[str, EnvVar] = dict(base or {})
    for i, e in enumerate(c.typed("env", kind=list)):
        if isinstance(e, dict) and e.get("name"):
            v = e.get("value")
            text = None if v is None and "valueFrom" in e else text_of(v) if v is not None \
                else ""
            why, lws = None, False
            if text and "$(" in text:
                tok, ok = expand_k8s(Token(text), env)
                if not ok:  # from a variable kvplan does not know (a secret, the leader's
                    names = [n for n in _K8S_REF.findall(text) if n in env and  # address)
                             env[n].value is None]
                    lws = bool(names) and all(env[n].lws for n in names)
                    why = f"set from {', '.join(names)}" if names else None
                text = tok.text if ok else None
            env[str(e["name"])] = EnvVar(text, c.loc("env", i), why, lws)
    return env


def _mounts(pod: Obj | None, c: Obj, claims: tuple[str, ...] = ()) -> list[Mount]:
    """The container's writable volume mounts, with each volume's lifetime (a StatefulSet's
    volumeClaimTemplates are claims; a volume the inputs do not declare counts as kept)."""
    kinds = {name: "volumeClaimTemplate" for name in claims}
    for v in pod.typed("volumes", kind=list) if pod is not None else []:
        if isinstance(v, dict) and v.get("name"):
            kinds[str(v["name"])] = next((str(k) for k in v if k != "name"), "volume")
    out = []
    for i, m in enumerate(c.typed("volumeMounts", kind=list)):
        if not isinstance(m, dict) or not m.get("mountPath"):
            continue
        kind = kinds.get(str(m.get("name")), "volume")
        if kind not in READ_ONLY:
            out.append(Mount(posixpath.normpath(str(m["mountPath"])),
                             "pod" if kind in POD_SCOPED else "persistent", kind,
                             c.loc("volumeMounts", i)))
    return out


def _gpu_count(c: Obj) -> tuple[int | None, Loc | None]:
    for section in ("limits", "requests"):
        res = c.get("resources", section)
        mig = [k for k in res if isinstance(k, str) and k.startswith(MIG_RESOURCE)] \
            if isinstance(res, dict) else []
        for key in (*GPU_RESOURCES, *mig):
            if c.get("resources", section, key) is not None:
                n = int_at(c, "resources", section, key, what=key)
                return n, c.loc("resources", section, key)
    return None, None


def _gpu_type(pod: Obj) -> tuple[list[str], Loc | None]:
    """GPU node types the pod may land on: nodeSelector or required node affinity."""
    ns = pod.typed("nodeSelector")
    for key in GPU_LABELS:
        if key in ns:
            return [str(ns[key])], pod.loc("nodeSelector", key)
    names, loc = [], None
    path = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
            "nodeSelectorTerms")
    for ti in range(len(pod.typed(*path, kind=list))):
        for ei, ex in enumerate(pod.typed(*path, ti, "matchExpressions", kind=list)):
            if isinstance(ex, dict) and ex.get("key") in GPU_LABELS and \
                    ex.get("operator") == "In":
                names += [str(v) for v in pod.typed(*path, ti, "matchExpressions", ei,
                                                     "values", kind=list)]
                loc = loc or pod.loc("affinity", "nodeAffinity",
                                     "requiredDuringSchedulingIgnoredDuringExecution",
                                     "nodeSelectorTerms", ti, "matchExpressions", ei, "values")
    return names, loc


def _annotated(o: Obj, *extra: tuple[Any, ...]) -> annotations.Annotated:
    vals: dict[str, tuple[str, Loc]] = {}
    for path in extra:  # pod template annotations first; the object's own win
        vals.update(_string_map(o, *path, "metadata", "annotations"))
    vals.update(_string_map(o, "metadata", "annotations"))
    return annotations.read(vals, o.loc("metadata"))


# what Go's encoding/json calls a YAML value that is not a string
_JSON_TYPES = ((bool, "bool"), (int, "number"), (float, "number"), (dict, "object"),
               (list, "array"))


def _string_map(o: Obj, *path: Any) -> dict[str, tuple[str, Loc]]:
    """Annotations as the API server takes them, `map[string]string`: an unquoted number or
    boolean (`kvplan.io/rate: 5`) makes it refuse the whole object ("cannot unmarshal number
    into Go struct field ObjectMeta.metadata.annotations of type string"), so it is bad
    input; a null value is the empty string, as the API decodes it."""
    d = o.get(*path)
    for key, v in d.items() if isinstance(d, dict) else ():
        kind = next((name for typ, name in _JSON_TYPES if isinstance(v, typ)), None)
        if kind:
            loc = o.loc(*path, key)
            shown = text_of(v) if kind in ("bool", "number") else kind
            raise InputError(
                f"annotation {key}: {shown} is not a string, and the Kubernetes API refuses "
                f"the object (annotations are map[string]string: \"cannot unmarshal {kind} "
                "into Go struct field ObjectMeta.metadata.annotations of type string\")",
                file=loc.file, line=loc.line,
                hint=f"quote it: {key}: \"{text_of(v)}\"" if kind != "object" and
                kind != "array" else "give a string")
    return o.mapping(*path)


def _base_target(o: Obj, name: str, eng: Any, ann: annotations.Annotated) -> Target:
    t = Target(name=name, kind=str(o.get("kind")), loc=o.loc("metadata", "name"), command=eng)
    ann.apply(t)
    return t


def _set_gpu(t: Target, pod: Obj) -> None:
    if t.gpu:
        return
    names, loc = _gpu_type(pod)
    if len(names) == 1:
        t.gpu, t.gpu_loc = names[0], loc
    elif names:
        t.gpu_choices, t.gpu_loc = names, loc


def _containers(pod: Obj) -> list[tuple[int, Obj]]:
    cs = pod.sub("containers")
    if cs is None or not isinstance(cs.data, list):
        return []
    return [(i, Obj(pod.doc, cs.doc.node_at(i, base=cs.node), c))
            for i, c in enumerate(cs.data) if isinstance(c, dict)]


def _engine(c: Obj, base: dict[str, EnvVar] | None = None) -> Any:
    return find_engine(c.tokens("command"), c.tokens("args"), _env(c, base),
                       image=c.string("image"))


def _pod_kind(o: Obj, scalers: dict) -> list[Target]:
    kind = str(o.get("kind"))
    path = POD_PATHS[kind]
    pod = o.sub(*path)
    if pod is None:
        return []
    name = str(o.get("metadata", "name") or "?")
    ann = _annotated(o, path[:-1]) if len(path) > 1 else _annotated(o)
    cs = _containers(pod)
    claims = tuple(str(x.get("metadata", {}).get("name")) for x in
                   o.typed("spec", "volumeClaimTemplates", kind=list) if isinstance(x, dict)
                   and isinstance(x.get("metadata"), dict))
    out = []
    for _, c in cs:
        eng = _engine(c)
        if eng is None:
            continue
        label = f"{kind}/{name}" + (f"[{c.get('name')}]" if len(cs) > 1 else "")
        t = _base_target(o, label, eng, ann)
        t.gpu_count, t.gpu_count_loc = _gpu_count(c)
        t.mounts = _mounts(pod, c, claims)
        _set_gpu(t, pod)
        set_version(t, c.get("image"))
        if kind in SCALED:
            scaler = scalers.get((kind.lower(), name))
            if scaler:
                t.replicas, t.replicas_max, t.replicas_loc, t.replicas_source = scaler
            else:
                t.replicas = int_at(o, "spec", "replicas", what="replicas")
                t.replicas = 1 if t.replicas is None else t.replicas
                t.replicas_loc = o.key_loc("spec", "replicas") if o.get("spec", "replicas") \
                    is not None else o.loc("spec")
                t.replicas_source = "spec.replicas"
        out.append(t)
    return out


def _lws(o: Obj) -> list[Target]:
    """LeaderWorkerSet: one replica is a group of `size` pods, the leader's and size - 1
    workers'. The leader's engine command holds the group's checks (GPUs, replicas); a worker
    template that runs an engine too (`vllm serve ... --headless`) is checked as its own
    target, and `lws-group-consistent` compares the two. Without a leader template every pod
    runs the worker template."""
    base = ("spec", "leaderWorkerTemplate")
    worker = o.sub(*base, "workerTemplate", "spec")
    lead = o.sub(*base, "leaderTemplate", "spec")
    if lead is None and worker is None:
        return []
    size = int_at(o, *base, "size", what="size") or 1
    name = str(o.get("metadata", "name") or "?")
    ann = _annotated(o, (*base, "leaderTemplate"), (*base, "workerTemplate"))
    group = PodGroup(f"LeaderWorkerSet/{name}", size, o.loc(*base, "size"))
    wgpus = 0
    if worker is not None:
        for _, wc in _containers(worker):
            wgpus += _gpu_count(wc)[0] or 0
    # the worker template runs on size - 1 pods: none at size 1
    workers = _lws_pods(o, worker, ann, group, "worker") if lead is not None and \
        worker is not None and size > 1 else []
    out = _lws_pods(o, lead or worker, ann, group, "leader" if lead is not None else "pods",
                    tag=" (leader)" if workers else "")
    for t in out:
        if t.gpu_count is not None or wgpus:
            t.gpu_count = (t.gpu_count or 0) + (size - 1) * wgpus
    return out + workers


def _lws_pods(o: Obj, pod: Obj, ann: annotations.Annotated, group: PodGroup, role: str,
              tag: str | None = None) -> list[Target]:
    """Targets of the engine containers of one LeaderWorkerSet pod template (the GPU count is
    the pod's)."""
    cs = _containers(pod)
    out = []
    for _, c in cs:
        env = lws_env(group, role, o.loc("metadata"))
        eng = _engine(c, env)
        if eng is None:
            continue
        label = group.name + (f"[{c.get('name')}]" if len(cs) > 1 else "") + (
            f" ({role})" if tag is None else tag)
        t = _base_target(o, label, eng, ann)
        t.gpu_count, t.gpu_count_loc = _gpu_count(c)
        t.pod_gpus = t.gpu_count
        if env["LWS_WORKER_INDEX"].value is None and any(
                e.from_lws(tok) for e in [eng, *eng.alternatives] for tok in e.unresolved):
            first = 1 if role == "worker" else 0
            for i in range(first, min(group.size, first + MAX_PODS)):
                env["LWS_WORKER_INDEX"] = replace(env["LWS_WORKER_INDEX"], value=str(i))
                t.pod_commands.append((i, _engine(c, env)))
        t.mounts = _mounts(pod, c)
        _set_gpu(t, pod)
        set_version(t, c.get("image"))
        t.image, t.image_loc = c.string("image"), c.loc("image")
        t.group, t.role = group, role
        t.replicas = int_at(o, "spec", "replicas", what="replicas") or 1
        t.replicas_loc = o.key_loc("spec", "replicas")
        t.replicas_source = "spec.replicas (groups)"
        out.append(t)
    return out


MAX_PODS = 64  # the pods of a template whose commands are read one by one


def lws_env(group: PodGroup, role: str, loc: Loc) -> dict[str, EnvVar]:
    """What the LeaderWorkerSet controller adds to every container of a group's pods
    (`AddLWSVariables`, lws `pkg/utils/pod/pod_utils.go`), unless the container sets it: the
    leader's address, the group's size, and the pod's index (0 on the leader)."""
    size = group.size
    which = {"leader": "0 on the leader",
             "worker": f"{'1' if size == 2 else f'1-{size - 1}'} on the worker pods",
             }.get(role, f"0-{size - 1}, one per pod")
    index = "0" if role == "leader" or size == 1 else None
    return {
        "LWS_LEADER_ADDRESS": EnvVar(None, loc, why="the leader pod's address, which the "
                                     "LeaderWorkerSet controller sets", lws=True),
        "LWS_GROUP_SIZE": EnvVar(str(size), group.size_loc or loc, lws=True),
        "LWS_WORKER_INDEX": EnvVar(index, loc, why="the pod's index in its group, which the "
                                   f"LeaderWorkerSet controller sets ({which})", lws=True)}


def _storage_model(uri: Any) -> str | None:
    if isinstance(uri, str) and uri.startswith("hf://"):
        return uri[5:].split(":", 1)[0].strip("/") or None
    return None


def _isvc(o: Obj, runtimes: dict[str, Obj], used: set[str]) -> list[Target]:
    """KServe InferenceService: a custom predictor container, a ServingRuntime from the
    inputs (its container with the InferenceService's args, env and resources), or the
    built-in Hugging Face server (vLLM backend) for `modelFormat: huggingface`."""
    pred = o.sub("spec", "predictor")
    if pred is None:
        return []
    name = str(o.get("metadata", "name") or "?")
    ann = _annotated(o)
    model = pred.sub("model")
    out = []
    if model is None:
        for _, c in _containers(pred):
            eng = _engine(c)
            if eng is not None:
                t = _base_target(o, f"InferenceService/{name}", eng, ann)
                t.gpu_count, t.gpu_count_loc = _gpu_count(c)
                t.mounts = _mounts(pred, c)
                set_version(t, c.get("image"))
                out.append(t)
    else:
        fmt = str(model.get("modelFormat", "name") or "").lower()
        rname = model.get("runtime")
        rt = runtimes.get(str(rname)) if rname else next(
            (r for r in runtimes.values() if any(
                str(f.get("name", "")).lower() == fmt and f.get("autoSelect")
                for f in r.typed("spec", "supportedModelFormats", kind=list)
                if isinstance(f, dict))),
            None)
        env = _env(model)
        eng, image, rcs = None, model.get("image"), []
        if rt is not None:
            used.add(str(rt.get("metadata", "name")))
            rcs = _containers(rt.sub("spec") or rt)
            if rcs:
                rc = rcs[0][1]
                image = image or rc.get("image")
                image = image if isinstance(image, str) else rc.string("image")
                eng = find_engine(rc.tokens("command"), rc.tokens("args") + model.tokens("args"),
                                  {**_env(rc), **env}, image=image)
        elif fmt == "huggingface":
            eng = find_engine([Token("huggingfaceserver", model.loc("modelFormat"))],
                              model.tokens("args"), env)
            if eng is not None and _backend(eng) not in ("vllm", None):
                eng = None  # the transformers backend: no KV cache to plan
        if eng is not None:
            t = _base_target(o, f"InferenceService/{name}", eng, ann)
            t.gpu_count, t.gpu_count_loc = _gpu_count(model)
            if t.gpu_count is None and rt is not None and rcs:
                t.gpu_count, t.gpu_count_loc = _gpu_count(rcs[0][1])
            t.mounts = _mounts(pred, model) + (_mounts(rt.sub("spec"), rcs[0][1]) if rcs
                                               else [])
            set_version(t, image)
            sm = _storage_model(model.get("storageUri"))
            if sm:
                t.model_hint, t.model_hint_loc = sm, model.loc("storageUri")
            _worker_spec(t, pred)
            out.append(t)
    for t in out:
        _set_gpu(t, pred)
        lo = int_at(pred, "minReplicas", what="minReplicas")
        hi = int_at(pred, "maxReplicas", what="maxReplicas")
        t.replicas = max(1, lo if lo is not None else 1)
        t.replicas_max = hi if hi and hi > t.replicas else None
        t.replicas_loc = pred.key_loc("maxReplicas" if t.replicas_max else "minReplicas")
        t.replicas_source = "predictor.minReplicas/maxReplicas"
    return out


def _backend(eng: Any) -> str | None:
    for i, a in enumerate(eng.args):
        if a.text.startswith("--backend"):
            v = a.text.split("=", 1)[1] if "=" in a.text else (
                eng.args[i + 1].text if i + 1 < len(eng.args) else "")
            return v.lower()
    return None


def _worker_spec(t: Target, pred: Obj) -> None:
    """KServe multi-node: workerSpec sets TP (GPUs per node) and PP (nodes)."""
    ws = pred.sub("workerSpec")
    if ws is None:
        return
    for key, flag in (("tensorParallelSize", "--tensor-parallel-size"),
                      ("pipelineParallelSize", "--pipeline-parallel-size")):
        v = ws.get(key)
        if v is not None and not any(a.text.startswith(flag) for a in t.command.args):
            t.command.args += [Token(flag, ws.loc(key)), Token(str(v), ws.loc(key))]
    pp = int_at(ws, "pipelineParallelSize", what="pipelineParallelSize") or 1
    if t.gpu_count is not None:
        t.gpu_count *= pp


def _runtime_alone(o: Obj) -> list[Target]:
    spec = o.sub("spec")
    if spec is None:
        return []
    ann = _annotated(o)
    out = []
    for _, c in _containers(spec):
        eng = _engine(c)
        if eng is not None:
            t = _base_target(o, f"{o.get('kind')}/{o.get('metadata', 'name')}", eng, ann)
            t.gpu_count, t.gpu_count_loc = _gpu_count(c)
            t.mounts = _mounts(spec, c)
            t.template = True
            set_version(t, c.get("image"))
            out.append(t)
    return out
