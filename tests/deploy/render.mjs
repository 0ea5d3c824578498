// A small Kustomize renderer for what deploy/kubernetes uses, because Debian 12 packages neither
// kustomize nor kubectl: `resources` (files, or directories with a kustomization.yaml) and
// `patches` given by `path` (strategic merge patches, matched to their object by apiVersion, kind
// and name). Any other key of a kustomization.yaml is refused, so that the layout cannot start
// to depend on a feature this renderer would silently skip. Where kubectl is installed, the test
// compares this renderer's output with `kubectl kustomize`.
import fs from "node:fs";
import path from "node:path";
import YAML from "yaml";

const KEYS = new Set(["apiVersion", "kind", "resources", "patches"]);
const PATCH_KEYS = new Set(["path"]);

// Lists that strategic merge patches merge by a key (the Kubernetes API's patchMergeKey for the
// fields the layout patches); every other list is replaced.
const MERGE_KEYS = {
  containers: "name",
  initContainers: "name",
  volumes: "name",
  env: "name",
  volumeMounts: "mountPath",
  ports: "containerPort",
  sysctls: "name",
};

function readDocs(file) {
  return YAML.parseAllDocuments(fs.readFileSync(file, "utf8")).map((d) => {
    if (d.errors.length) throw new Error(`${file}: ${d.errors[0].message}`);
    return d.toJS();
  }).filter((d) => d != null);
}

function merge(base, patch) {
  if (Array.isArray(patch) || typeof patch !== "object" || patch === null) return structuredClone(patch);
  const out = typeof base === "object" && base !== null && !Array.isArray(base) ? structuredClone(base) : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) {
      delete out[k];
    } else if (Array.isArray(v) && MERGE_KEYS[k] && Array.isArray(out[k])) {
      const key = MERGE_KEYS[k];
      const list = out[k];
      const added = [];
      for (const item of v) {
        const i = list.findIndex((x) => x[key] === item[key]);
        if (i >= 0) list[i] = merge(list[i], item);
        else added.push(structuredClone(item));
      }
      out[k] = [...added, ...list];  // kustomize puts the patch's new items first
    } else if (typeof v === "object" && !Array.isArray(v)) {
      out[k] = merge(out[k], v);
    } else {
      out[k] = structuredClone(v);
    }
  }
  return out;
}

export function render(dir) {
  const file = path.join(dir, "kustomization.yaml");
  const [k] = readDocs(file);
  for (const key of Object.keys(k)) {
    if (!KEYS.has(key)) throw new Error(`${file}: key '${key}' is not supported by this renderer`);
  }
  if (k.apiVersion !== "kustomize.config.k8s.io/v1beta1" || k.kind !== "Kustomization") {
    throw new Error(`${file}: not a kustomize.config.k8s.io/v1beta1 Kustomization`);
  }
  const objects = [];
  for (const r of k.resources ?? []) {
    const p = path.resolve(dir, r);
    if (!fs.existsSync(p)) throw new Error(`${file}: resource ${r} does not exist`);
    objects.push(...(fs.statSync(p).isDirectory() ? render(p) : readDocs(p)));
  }
  const id = (o) => `${o.apiVersion}/${o.kind}/${o.metadata?.name}`;
  const seen = new Set();
  for (const o of objects) {
    if (seen.has(id(o))) throw new Error(`${file}: ${id(o)} is defined twice`);
    seen.add(id(o));
  }
  for (const p of k.patches ?? []) {
    for (const key of Object.keys(p)) {
      if (!PATCH_KEYS.has(key)) throw new Error(`${file}: patch key '${key}' is not supported by this renderer`);
    }
    for (const patch of readDocs(path.resolve(dir, p.path))) {
      const i = objects.findIndex((o) => id(o) === id(patch));
      if (i < 0) throw new Error(`${file}: patch ${p.path} matches no object (${id(patch)})`);
      objects[i] = merge(objects[i], patch);
    }
  }
  return objects;
}
