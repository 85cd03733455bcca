#!/usr/bin/env python3
"""tests/packaging/k8s_lws_check.py MANIFEST_DIR SCHEMA PODS_DIR OUT_TOML MODEL KEY

The multi-host manifests (packaging/kubernetes/multi-host/) without a
cluster. Run by test_k8s_lws.sh with the kubernetes-validate venv's Python
(PyYAML, jsonschema):

1. the LeaderWorkerSet against LWS's own CRD schema (SCHEMA, written by
   lws_schema.py from the pinned release), strictly: a field the CRD does
   not define is an error here, as `kubectl apply --validate=strict` makes it;
2. writes each pod template as a Pod to PODS_DIR, for kubernetes-validate's
   strict Kubernetes 1.31 schemas (the CRD schema does not hold those);
3. what no schema sees: the leader's config template against the pods
   (ports, the worker's --listen, the key's path, threads against CPU
   limits, the probes), the Service's selector against the labels LWS puts
   on a leader pod, the plan against packaging/kvasir.toml;
4. runs the render-config init container's own script, as the pod would,
   with LWS_LEADER_ADDRESS set as LWS sets it, and checks the worker's
   name it wrote; then writes that config to OUT_TOML with model.path set
   to MODEL and cluster.key to KEY, for `kvasird --check`.
Exit 0, or 1 after printing every mismatch.
"""
import copy
import glob
import os
import re
import subprocess
import sys
import tempfile
import tomllib

import jsonschema
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k8s_check  # noqa: E402  (check, check_ports, check_timing, size_bytes)

check = k8s_check.check
ERRORS = k8s_check.ERRORS
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def strict(schema):
    """The CRD's schema with unknown fields refused: additionalProperties
    false wherever properties are listed and nothing else is allowed."""
    s = copy.deepcopy(schema)

    def walk(o):
        if isinstance(o, dict):
            if ("properties" in o and "additionalProperties" not in o
                    and not o.get("x-kubernetes-preserve-unknown-fields")):
                o["additionalProperties"] = False
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
    walk(s)
    # Every object's metadata is the API server's, not the CRD's.
    s["properties"]["metadata"] = {"type": "object"}
    return s


def validate_lws(lws, schema_path):
    import json
    with open(schema_path) as f:
        schema = json.load(f)
    v = jsonschema.Draft7Validator(strict(schema))
    errs = sorted(v.iter_errors(lws), key=lambda e: list(e.path))
    for e in errs:
        print(f"FAIL  LWS schema: {'/'.join(map(str, e.path))}: {e.message}")
    check(not errs, f"the LeaderWorkerSet validates against {os.path.basename(schema_path)}")
    bad = copy.deepcopy(lws)
    bad["spec"]["leaderWorkerTemplate"]["sizee"] = 2
    check(any(True for _ in v.iter_errors(bad)), "the strict schema refuses an unknown field")


def write_pods(lws, out):
    tpl = lws["spec"]["leaderWorkerTemplate"]
    name = lws["metadata"]["name"]
    for role in ("leader", "worker"):
        t = tpl[role + "Template"]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{name}-0" + ("" if role == "leader" else "-1"),
                            **t.get("metadata", {})},
               "spec": t["spec"]}
        with open(os.path.join(out, f"{role}-pod.yaml"), "w") as f:
            yaml.safe_dump(pod, f, sort_keys=False)


def container(spec, name, init=False):
    key = "initContainers" if init else "containers"
    found = [c for c in spec.get(key, []) if c["name"] == name]
    if len(found) != 1:
        sys.exit(f"FAIL  want one {key[:-1]} named {name}")
    return found[0]


def mount_of(c, path):
    """The volume mounted at `path`'s folder in container c."""
    return k8s_check.mounts(c).get(os.path.dirname(path))


def check_worker(cfg, lws, wspec):
    tpl = lws["spec"]["leaderWorkerTemplate"]
    remote = [s for s in cfg["stages"] if s.get("host")]
    check(tpl["size"] == 1 + len({s["host"] for s in remote}),
          f"size {tpl['size']} is the leader plus one pod per worker host")
    w = container(wspec, "kvasird")
    args = w["args"]
    listen = args[args.index("--listen") + 1] if "--listen" in args else ""
    check(args[:1] == ["--worker"], "the worker pod runs kvasird --worker")
    port = int(listen.rpartition(":")[2]) if listen else -1
    for i, s in enumerate(remote):
        m = re.fullmatch(r"@WORKER_(\d+)@:(\d+)", s["host"])
        check(m is not None and 1 <= int(m.group(1)) < tpl["size"],
              f"stages host {s['host']} names worker 1..{tpl['size'] - 1}")
        check(m is not None and int(m.group(2)) == port,
              f"stages host {s['host']} is the worker's --listen port {port}")
    check(any(p["containerPort"] == port for p in w.get("ports", [])),
          f"the worker declares containerPort {port}")
    key = args[args.index("--cluster-key") + 1] if "--cluster-key" in args else ""
    check(key == cfg["cluster"]["key"], f"the worker's --cluster-key is cluster.key ({key})")
    return w, key


def check_key_copy(spec, init_name, user_c, key):
    """An init container installs the key 0600 where the kvasird container
    reads it, from the Secret the other pod uses too."""
    init = container(spec, init_name, init=True)
    script = " ".join(init["command"])
    check(re.search(r"install -m 0600 \S+ " + re.escape(key), script) is not None,
          f"{init_name} installs the key 0600 at {key}")
    vols = {v["name"]: v for v in spec["volumes"]}
    check(mount_of(init, key) == mount_of(user_c, key), f"{init_name} writes the volume kvasird reads")
    src = re.search(r"install -m 0600 (\S+) ", script)
    secret = vols.get(mount_of(init, src.group(1)) if src else "", {}).get("secret", {})
    check(secret.get("secretName") == "kvasir-cluster-key", "the key comes from the Secret kvasir-cluster-key")
    check("emptyDir" in vols.get(mount_of(user_c, key), {}), "the key's copy is on an emptyDir")
    return secret


def check_threads(cfg, lspec, wspec):
    for i, s in enumerate(cfg["stages"]):
        pod = wspec if s.get("host") else lspec
        cpu = str(container(pod, "kvasird")["resources"]["limits"]["cpu"])
        check(str(s.get("threads")) == cpu,
              f"stages[{i}].threads {s.get('threads')} is its pod's CPU limit {cpu}")


def check_same_plan(cfg, package_toml):
    with open(package_toml, "rb") as f:
        pkg = tomllib.load(f)
    mine = {k: v for k, v in cfg.items() if k != "cluster"}
    mine["server"] = {**cfg["server"], "http": pkg["server"]["http"]}
    mine["stages"] = [{k: v for k, v in st.items() if k not in ("threads", "host")}
                      | {"threads": p.get("threads")} for st, p in zip(cfg["stages"], pkg["stages"])]
    same = mine == pkg and len(cfg["stages"]) == len(pkg["stages"])
    check(same, "the plan is packaging/kvasir.toml's but for http, threads, host and [cluster] "
          "(structured outputs on, as there: the relay carries the grammar table)")


def render(lspec, cm, lws, work):
    """Runs render-config's script with its mounts mapped into `work`."""
    init = container(lspec, "render-config", init=True)
    script = init["command"][-1]
    ns, group = "default", 0
    name = lws["metadata"]["name"]
    address = f"{name}-{group}.{name}.{ns}"  # as LWS's AddLWSVariables writes it
    for m in init["volumeMounts"]:
        local = os.path.join(work, m["name"])
        os.makedirs(local, exist_ok=True)
        script = script.replace(m["mountPath"] + "/", local + "/")
    tdir = os.path.join(work, "config-template")
    for fname, text in cm["data"].items():
        with open(os.path.join(tdir, fname), "w") as f:
            f.write(text)
    with open(os.path.join(work, "cluster-key-secret", "cluster.key"), "wb") as f:
        f.write(os.urandom(32))
    r = subprocess.run(["sh", "-ec", script], env={"LWS_LEADER_ADDRESS": address, "PATH": os.environ["PATH"]},
                       capture_output=True, text=True)
    check(r.returncode == 0, f"render-config's script runs ({r.stderr.strip()})")
    out = os.path.join(work, "config", "kvasir.toml")
    key = os.path.join(work, "cluster-key", "cluster.key")
    check(os.path.exists(key) and (os.stat(key).st_mode & 0o777) == 0o600, "the key's copy is mode 0600")
    with open(out) as f:
        text = f.read()
    want = f"{name}-{group}-1.{name}.{ns}:"
    check(want in text and "@WORKER" not in text, f"the rendered host is worker 1's pod name {want}...")
    return text


def main():
    folder, schema, pods, out, model, keyfile = sys.argv[1:7]
    objs = k8s_check.load_manifests(folder)
    lws = k8s_check.one(objs, "LeaderWorkerSet")
    cm, svc = k8s_check.one(objs, "ConfigMap"), k8s_check.one(objs, "Service")
    validate_lws(lws, schema)
    write_pods(lws, pods)
    tpl = lws["spec"]["leaderWorkerTemplate"]
    check(lws["spec"].get("startupPolicy") == "LeaderCreated",
          "workers start with the leader (it is ready only after they join)")
    check(lws["spec"]["leaderWorkerTemplate"].get("restartPolicy") == "None",
          "a failed pod restarts alone (the leader rejoins a worker; the group's requests live on)")
    lpod, wpod = tpl["leaderTemplate"], tpl["workerTemplate"]
    lspec, wspec = lpod["spec"], wpod["spec"]
    cfg = tomllib.loads(cm["data"]["kvasir.toml.in"])
    leader = container(lspec, "kvasird")
    args = leader["args"]
    conf = args[args.index("--config") + 1]
    vols = {v["name"]: v for v in lspec["volumes"]}
    tmpl = vols.get("config-template", {}).get("configMap", {}).get("name")
    check(tmpl == cm["metadata"]["name"], "the template volume is the ConfigMap")
    check(mount_of(container(lspec, "render-config", init=True), conf) == mount_of(leader, conf),
          f"render-config writes the --config {conf} kvasird reads")
    w, key = check_worker(cfg, lws, wspec)
    s1 = check_key_copy(lspec, "render-config", leader, cfg["cluster"]["key"])
    s2 = check_key_copy(wspec, "copy-key", w, key)
    check(s1 == s2, "both pods read the same Secret, the same way")
    check_threads(cfg, lspec, wspec)
    # The leader pod as the single-host pod: probes, annotations, Service.
    labels = {**lpod["metadata"]["labels"], LWS_NAME_LABEL: lws["metadata"]["name"],
              LWS_INDEX_LABEL: "0"}
    k8s_check.check_ports(cfg, {"metadata": {**lpod["metadata"], "labels": labels}}, leader, svc)
    wl = {**wpod["metadata"]["labels"], LWS_NAME_LABEL: lws["metadata"]["name"], LWS_INDEX_LABEL: "1"}
    check(not all(wl.get(k) == v for k, v in svc["spec"]["selector"].items()),
          "the Service does not select the worker")
    k8s_check.check_timing(cfg, lspec, leader)
    start = leader["startupProbe"]
    budget = start["periodSeconds"] * start["failureThreshold"]
    join = cfg["cluster"].get("join_timeout", 300)
    check(budget >= join + 300, f"the startupProbe ({budget} s) outwaits the join ({join} s) and a load")
    check_same_plan(cfg, os.path.join(folder, "..", "..", "kvasir.toml"))
    with tempfile.TemporaryDirectory() as work:
        text = render(lspec, cm, lws, work)
    text = text.replace(f'path = "{cfg["model"]["path"]}"', f'path = "{model}"', 1)
    text = text.replace(f'key = "{cfg["cluster"]["key"]}"', f'key = "{keyfile}"', 1)
    with open(out, "w") as f:
        f.write(text)
    if ERRORS:
        print(f"{len(ERRORS)} mismatch(es)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
