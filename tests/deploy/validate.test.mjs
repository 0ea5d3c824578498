// deploy/kubernetes against the Kubernetes and KEDA schemas. Two checks per object, because each
// misses what the other catches:
//  1. kubernetes-models' validate(): the OpenAPI schemas (types, required fields, enums, formats)
//     of kubernetes-models 5.1 (with hostUsers and appArmorProfile) and @kubernetes-models/keda
//     2.0 (with scalingModifiers). These schemas allow unknown fields.
//  2. the same packages' TypeScript types, through tsc: every object becomes a typed object
//     literal, and excess-property checks refuse any field the schema does not name (what
//     `kubeconform -strict` does), at any depth.
// The Kustomize layout is rendered by a small renderer (render.mjs; Debian has no kustomize),
// and where a `kubectl` with kustomize is on PATH its output must equal ours. Negative cases
// prove that a typo'd field, a wrong type and an unknown kustomization key each fail.
// sandpoold's arguments in the rendered Deployments are parsed by the real daemon ($SANDPOOLD).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";

import { render } from "./render.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const k8s = path.join(repo, "deploy/kubernetes");
const layouts = [path.join(k8s, "base"), path.join(k8s, "overlays/network")];

// apiVersion/kind -> [module, class name]; an object of any other kind fails the test.
const MODELS = {
  "v1/Secret": ["kubernetes-models/v1/Secret", "Secret"],
  "v1/ConfigMap": ["kubernetes-models/v1/ConfigMap", "ConfigMap"],
  "apps/v1/Deployment": ["kubernetes-models/apps/v1/Deployment", "Deployment"],
  "policy/v1/PodDisruptionBudget": ["kubernetes-models/policy/v1/PodDisruptionBudget", "PodDisruptionBudget"],
  "keda.sh/v1alpha1/ScaledObject": ["@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject", "ScaledObject"],
  "keda.sh/v1alpha1/TriggerAuthentication": ["@kubernetes-models/keda/keda.sh/v1alpha1/TriggerAuthentication", "TriggerAuthentication"],
};

function modelOf(doc) {
  const key = `${doc.apiVersion}/${doc.kind}`;
  const m = MODELS[key];
  if (!m) throw new Error(`no schema for ${key} (${doc.metadata?.name})`);
  return m;
}

// 1. The OpenAPI schemas.
async function schemaErrors(docs) {
  const errors = [];
  for (const doc of docs) {
    const [mod, cls] = modelOf(doc);
    const Model = (await import(mod))[cls];
    try {
      new Model(doc).validate();
    } catch (e) {
      errors.push(`${doc.kind}/${doc.metadata?.name}: ${e.message}`);
    }
  }
  return errors;
}

// 2. The types, with unknown fields refused: one .ts file, tsc --noEmit.
function typeErrors(docs) {
  const dir = fs.mkdtempSync(path.join(here, ".tsc-"));
  try {
    const lines = [];
    docs.forEach((doc, i) => {
      const [mod, cls] = modelOf(doc);
      lines.push(`import type { I${cls} as T${i} } from "${mod}";`);
      lines.push(`export const o${i}: T${i} = ${JSON.stringify(doc)};`);
    });
    fs.writeFileSync(path.join(dir, "objects.ts"), lines.join("\n") + "\n");
    const tsc = path.join(here, "node_modules/typescript/bin/tsc");
    const out = spawnSync(process.execPath, [tsc, "--noEmit", "--strict", "--skipLibCheck", "--module", "nodenext",
      "--moduleResolution", "nodenext", "--target", "es2022", path.join(dir, "objects.ts")], { cwd: here, encoding: "utf8" });
    if (out.status === 0) return [];
    return out.stdout.split("\n").filter((l) => l.includes("error TS")).map((l) => {
      const m = /objects\.ts\((\d+),/.exec(l);
      const doc = m ? docs[Math.floor((Number(m[1]) - 1) / 2)] : undefined;
      return `${doc ? `${doc.kind}/${doc.metadata?.name}: ` : ""}${l.replace(/^.*error /, "error ")}`;
    });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const rendered = Object.fromEntries(layouts.map((dir) => [path.relative(k8s, dir), render(dir)]));

test("every object of the base and the overlay matches the Kubernetes and KEDA schemas", async () => {
  for (const [name, docs] of Object.entries(rendered)) {
    assert.ok(docs.length >= 5, `${name} rendered ${docs.length} objects`);
    assert.deepEqual(await schemaErrors(docs), [], name);
  }
});

test("no object has a field the schemas do not know", () => {
  for (const [name, docs] of Object.entries(rendered)) assert.deepEqual(typeErrors(docs), [], name);
});

test("every YAML file is part of a layout (nothing unchecked lies around)", () => {
  const used = new Set();
  for (const dir of layouts) {
    used.add(path.join(dir, "kustomization.yaml"));
    const k = YAML.parse(fs.readFileSync(path.join(dir, "kustomization.yaml"), "utf8"));
    for (const r of k.resources ?? []) used.add(path.resolve(dir, r));
    for (const p of k.patches ?? []) used.add(path.resolve(dir, p.path));
  }
  const all = [];
  const walk = (d) => fs.readdirSync(d, { withFileTypes: true }).forEach((e) =>
    e.isDirectory() ? walk(path.join(d, e.name)) : e.name.endsWith(".yaml") && all.push(path.join(d, e.name)));
  walk(k8s);
  assert.deepEqual(all.filter((f) => !used.has(f)), []);
});

test("a typo'd field, a wrong type and an unknown kustomization key each fail", async () => {
  const deployment = rendered.base.find((d) => d.kind === "Deployment");
  const typo = structuredClone(deployment);
  const c = typo.spec.template.spec.containers[0];
  c.securityContxt = c.securityContext;
  delete c.securityContext;
  const typeErrs = typeErrors([typo]);
  assert.equal(typeErrs.length, 1);
  assert.match(typeErrs[0], /securityContxt/);

  const so = structuredClone(rendered.base.find((d) => d.kind === "ScaledObject"));
  so.spec.advanced.scalingModifiers.formla = so.spec.advanced.scalingModifiers.formula;
  assert.match(typeErrors([so]).join("\n"), /formla/);

  const wrongType = structuredClone(deployment);
  wrongType.spec.replicas = "two";
  assert.match((await schemaErrors([wrongType])).join("\n"), /replicas must be integer/);
  const missing = structuredClone(deployment);
  delete missing.spec.selector;
  assert.match((await schemaErrors([missing])).join("\n"), /selector/);

  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kustomize-"));
  try {
    fs.cpSync(path.join(k8s, "base"), tmp, { recursive: true });
    const kfile = path.join(tmp, "kustomization.yaml");
    fs.writeFileSync(kfile, fs.readFileSync(kfile, "utf8").replace("resources:", "resourcse:"));
    assert.throws(() => render(tmp), /resourcse/);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

function kubectlKustomize() {
  const which = spawnSync("sh", ["-c", "command -v kubectl"], { encoding: "utf8" });
  if (which.status !== 0) return null;
  const probe = spawnSync("kubectl", ["kustomize", "--help"], { encoding: "utf8" });
  return probe.status === 0 ? "kubectl" : null;
}

test("the renderer agrees with kustomize (where kubectl is installed)", (t) => {
  const kubectl = kubectlKustomize();
  if (!kubectl) {
    t.skip("no kubectl with kustomize on PATH (Debian has none): the renderer alone is used");
    return;
  }
  const key = (d) => `${d.kind}/${d.metadata.name}`;
  for (const dir of layouts) {
    const theirs = YAML.parseAllDocuments(execFileSync(kubectl, ["kustomize", dir], { encoding: "utf8" })).map((d) => d.toJS());
    const ours = render(dir);
    assert.deepEqual(ours.map(key).sort(), theirs.map(key).sort(), dir);
    for (const d of ours) assert.deepEqual(d, theirs.find((x) => key(x) === key(d)), `${dir}: ${key(d)}`);
  }
});

test("sandpoold parses the arguments every Deployment gives it; the drain fits the grace period", () => {
  const sandpoold = process.env.SANDPOOLD ?? path.join(repo, "build/bin/sandpoold");
  assert.ok(fs.existsSync(sandpoold), `no daemon at ${sandpoold} (set SANDPOOLD)`);
  const parses = (args) => spawnSync(sandpoold, [...args, "--help"], { encoding: "utf8" });
  for (const [name, docs] of Object.entries(rendered)) {
    const dep = docs.find((d) => d.kind === "Deployment");
    const c = dep.spec.template.spec.containers.find((x) => x.name === "sandpoold");
    const out = parses(c.args);
    assert.equal(out.status, 0, `${name}: ${out.stderr}`);
    const flag = (n) => Number(c.args.find((a) => a.startsWith(`--${n}=`))?.split("=")[1]);
    const graceS = flag("grace-ms") / 1000, longestS = flag("max-timeout-ms") / 1000;
    // Every job that started can end on its own before the kill; then kills, result writes and
    // the pool's reaping (up to 12 s) still fit.
    assert.ok(graceS >= longestS, `${name}: --grace-ms below --max-timeout-ms`);
    assert.ok(dep.spec.template.spec.terminationGracePeriodSeconds >= graceS + 12 + 30, name);
    const sc = c.securityContext;
    assert.equal(sc.privileged, false);
    assert.deepEqual(sc.capabilities.drop, ["ALL"]);
  }
  const bad = parses(["--wrokers=16"]);
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /wrokers/);
});

test("KEDA scales each queue on lag + pending of the same stream and group", () => {
  for (const so of rendered.base.filter((d) => d.kind === "ScaledObject")) {
    const byName = Object.fromEntries(so.spec.triggers.map((t) => [t.name, t]));
    assert.equal(so.spec.advanced.scalingModifiers.formula, "lag + pending");
    assert.ok(byName.lag.metadata.lagCount && byName.pending.metadata.pendingEntriesCount);
    for (const k of ["address", "stream", "consumerGroup"]) assert.equal(byName.lag.metadata[k], byName.pending.metadata[k]);
    assert.equal(byName.lag.metadata.consumerGroup, "workers");  // queue/keys.h kGroup
    assert.match(byName.lag.metadata.stream, /^sandpool:q:/);
  }
});

test("every Deployment runs the image scripts/build-image.sh tags, as the image runs sandpoold", () => {
  // sandpool:<the top CMakeLists.txt's project VERSION>, what build-image.sh and the
  // Containerfile's version label use; the container's command ends by exec-ing the image's
  // entrypoint binary (after the cgroup remount, docs/SECURITY.md section 5.1).
  const version = fs.readFileSync(path.join(repo, "CMakeLists.txt"), "utf8").match(/project\(sandpool VERSION ([0-9.]+)/)[1];
  const containerfile = fs.readFileSync(path.join(repo, "deploy/container/Containerfile"), "utf8");
  const entrypoint = JSON.parse(containerfile.match(/^ENTRYPOINT (.*)$/m)[1]);
  assert.deepEqual(entrypoint, ["/usr/local/bin/sandpoold"]);
  for (const [name, docs] of Object.entries(rendered)) {
    const dep = docs.find((d) => d.kind === "Deployment");
    const c = dep.spec.template.spec.containers.find((x) => x.name === "sandpoold");
    assert.equal(c.image, `sandpool:${version}`, name);
    assert.match(c.command.join(" "), /exec sandpoold "\$@"/, name);
  }
});
