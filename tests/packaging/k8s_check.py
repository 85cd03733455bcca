#!/usr/bin/env python3
"""tests/packaging/k8s_check.py MANIFEST_DIR CPACK_CONFIG ARCH MODEL OUT_TOML

What the Kubernetes schemas cannot check about packaging/kubernetes/: that
the manifests, the ConfigMap's kvasir.toml and the Containerfile agree with
each other and with the Debian package. Run by test_k8s.sh, with the
kubernetes-validate venv's Python (PyYAML; tomllib is Python 3.11's).

Writes the ConfigMap's kvasir.toml to OUT_TOML with model.path replaced by
MODEL, for `kvasird --check`. Exit 0, or 1 after printing every mismatch.
"""
import glob
import os
import re
import sys
import tomllib

import yaml

ERRORS = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        ERRORS.append(what)


def load_manifests(folder):
    objs = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.yaml"))):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc:
                    objs[(doc["kind"], doc["metadata"]["name"])] = doc
    return objs


def one(objs, kind):
    found = [o for (k, _), o in objs.items() if k == kind]
    if len(found) != 1:
        sys.exit(f"FAIL  want one {kind} in the manifests, found {len(found)}")
    return found[0]


def size_bytes(text):
    """Kubernetes quantities (Mi, Gi) and kvasir sizes ("512MiB")."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(Ki|Mi|Gi|KiB|MiB|GiB)?\s*", str(text))
    if not m:
        sys.exit(f"FAIL  cannot read the size {text!r}")
    unit = (m.group(2) or "").rstrip("B")
    return float(m.group(1)) * {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}[unit]


def port_of(container, port):
    """A probe's or Service's port: a number, or the name of a containerPort."""
    if isinstance(port, int):
        return port
    named = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    return named.get(port)


def check_ports(cfg, pod, kvasird, service):
    host, _, port = cfg["server"]["http"].rpartition(":")
    port = int(port)
    check(host == "0.0.0.0", f"server.http listens on every address ({cfg['server']['http']})")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = kvasird.get(probe, {}).get("httpGet", {})
        check(get.get("path") == "/health", f"{probe} is GET /health")
        check(port_of(kvasird, get.get("port")) == port,
              f"{probe} port {get.get('port')} is server.http's {port}")
    for p in service["spec"]["ports"]:
        check(port_of(kvasird, p["targetPort"]) == port,
              f"Service targetPort {p['targetPort']} is server.http's {port}")
    labels = pod["metadata"]["labels"]
    sel = service["spec"]["selector"]
    check(all(labels.get(k) == v for k, v in sel.items()), "Service selector matches the pod")
    ann = pod["metadata"].get("annotations", {})
    check(ann.get("prometheus.io/scrape") == "true", "prometheus.io/scrape is \"true\"")
    check(ann.get("prometheus.io/port") == str(port), f"prometheus.io/port is {port}")
    check(ann.get("prometheus.io/path") == "/metrics", "prometheus.io/path is /metrics")


def mounts(container):
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}


def check_volumes(cfg, cm, spec, kvasird, fetch):
    vols = {v["name"]: v for v in spec["volumes"]}
    mine = mounts(kvasird)
    args = kvasird.get("args", [])
    conf = args[args.index("--config") + 1] if "--config" in args else ""
    vol = vols.get(mine.get(os.path.dirname(conf)), {})
    check(vol.get("configMap", {}).get("name") == cm["metadata"]["name"]
          and os.path.basename(conf) in cm["data"],
          f"--config {conf} is the ConfigMap's {os.path.basename(conf)}")
    models = os.path.dirname(cfg["model"]["path"])
    check(mine.get(models) == "models", f"model.path's folder {models} is the models volume")
    check(mounts(fetch).get(models) == "models", f"fetch-model writes to {models} too")
    env = {e["name"]: e.get("value") for e in fetch.get("env", [])}
    check(env.get("KVASIR_MODELS") == models, f"fetch-model's KVASIR_MODELS is {models}")
    sock = os.path.dirname(cfg["server"]["socket"])
    check("emptyDir" in vols.get(mine.get(sock), {}), f"server.socket's folder {sock} is writable")
    shm = vols.get(mine.get("/dev/shm"), {}).get("emptyDir", {})
    check(shm.get("medium") == "Memory", "/dev/shm is a memory-backed emptyDir")
    check(kvasird["image"] == fetch["image"], "fetch-model runs the kvasird image")
    return shm


def check_resources(cfg, kvasird, shm):
    res = kvasird["resources"]
    check(res["requests"] == res["limits"], "requests equal limits (Guaranteed QoS)")
    cpu = str(res["limits"]["cpu"])
    check(cpu.isdigit(), f"the CPU limit {cpu} is whole cores (static CPU manager)")
    for i, st in enumerate(cfg["stages"]):
        check(str(st.get("threads")) == cpu, f"stages[{i}].threads is the CPU limit {cpu}")
    kv = size_bytes(cfg["kv"]["memory"]) * len(cfg["stages"])
    mem = size_bytes(res["limits"]["memory"])
    shm_size = size_bytes(shm.get("sizeLimit", "0"))
    check(mem > kv + shm_size, f"the memory limit exceeds KV ({kv / 2**20:.0f} MiB) + /dev/shm")


def check_timing(cfg, spec, kvasird):
    drain = cfg["server"].get("drain_timeout", 30)
    pre = kvasird.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    pause = int(pre[1]) if pre[:1] == ["sleep"] else 0
    grace = spec.get("terminationGracePeriodSeconds", 30)
    # The drain, up to 5 s for the last bytes, the stages' stop.
    check(grace >= pause + drain + 5 + 1,
          f"terminationGracePeriodSeconds {grace} >= preStop {pause} + drain {drain} + 6")
    live = kvasird["livenessProbe"]
    patience = live.get("periodSeconds", 10) * live.get("failureThreshold", 3)
    check(patience > drain + 5, f"liveness gives up after {patience} s, past a whole drain")
    start = kvasird["startupProbe"]
    budget = start.get("periodSeconds", 10) * start.get("failureThreshold", 3)
    check(budget >= 300, f"the startupProbe waits {budget} s, as the unit's status --wait 300")


def check_same_plan(cfg, package_toml):
    """The ConfigMap runs the package's plan: only what a pod needs differs."""
    with open(package_toml, "rb") as f:
        pkg = tomllib.load(f)
    mine = {**cfg, "server": {**cfg["server"], "http": pkg["server"]["http"]},
            "stages": [{**st, "threads": p.get("threads")}
                       for st, p in zip(cfg["stages"], pkg["stages"])]}
    same = mine == pkg and len(cfg["stages"]) == len(pkg["stages"])
    check(same, "the plan is packaging/kvasir.toml's but for server.http and threads")


def check_containerfile(path, cpack, arch, spec):
    text = open(path).read()
    conf = dict(re.findall(r'set\((CPACK_PACKAGE_\w+) "([^"]*)"\)', open(cpack).read()))
    deb = f"{conf.get('CPACK_PACKAGE_NAME')}_{conf.get('CPACK_PACKAGE_VERSION')}_{arch}.deb"
    arg = re.search(r"^ARG KVASIR_DEB=(\S+)$", text, re.M)
    check(arg is not None and arg.group(1) == deb, f"the Containerfile's KVASIR_DEB is {deb}")
    check(re.search(r"apt-get install -y /tmp/\$\{KVASIR_DEB\}", text) is not None,
          "the Containerfile installs ${KVASIR_DEB}")
    sc = spec["securityContext"]
    user = re.search(r"^USER (\d+):(\d+)$", text, re.M)
    made = re.search(r"--uid (\d+) --gid kvasir", text)
    group = re.search(r"groupadd --system --gid (\d+) kvasir", text)
    ids = (sc.get("runAsUser"), sc.get("runAsGroup"))
    check(user is not None and (int(user.group(1)), int(user.group(2))) == ids,
          f"the image's USER is runAsUser:runAsGroup {ids}")
    check(made is not None and int(made.group(1)) == ids[0], "the kvasir user has runAsUser's id")
    check(group is not None and int(group.group(1)) == ids[1] == sc.get("fsGroup"),
          "the kvasir group has runAsGroup's and fsGroup's id")
    check(sc.get("runAsNonRoot") is True, "runAsNonRoot")


def main():
    folder, cpack, arch, model, out = sys.argv[1:6]
    objs = load_manifests(folder)
    cm, dep, svc = one(objs, "ConfigMap"), one(objs, "Deployment"), one(objs, "Service")
    toml_text = cm["data"]["kvasir.toml"]
    cfg = tomllib.loads(toml_text)
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    kvasird = next(c for c in spec["containers"] if c["name"] == "kvasird")
    fetch = next(c for c in spec["initContainers"] if c["name"] == "fetch-model")
    check_ports(cfg, pod, kvasird, svc)
    shm = check_volumes(cfg, cm, spec, kvasird, fetch)
    check_resources(cfg, kvasird, shm)
    check_timing(cfg, spec, kvasird)
    check_same_plan(cfg, os.path.join(folder, "..", "kvasir.toml"))
    check_containerfile(os.path.join(folder, "Containerfile"), cpack, arch, spec)
    path = cfg["model"]["path"]
    with open(out, "w") as f:
        f.write(toml_text.replace(f'path = "{path}"', f'path = "{model}"', 1))
    if ERRORS:
        print(f"{len(ERRORS)} mismatch(es)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
