/**
 * Test support (`sandpool/testing`): a private redis-server on a unix socket in a temporary
 * directory, and a real sandpoold (as root) that serves it, for integration tests of this package
 * and of packages built on it. Nothing is mocked. Everything is stopped and the directories removed
 * by `stop()`, and also if the test process exits early.
 *
 * A daemon can also run inside a private network namespace ({@link PrivateNetns}: `ip netns add`,
 * loopback only, so nothing it does reaches past this machine), for network templates and
 * exposed ports: `new Deployment({ netns: true, config, extra: NETNS_PREVIEW_ARGS })`. Redis stays
 * on its unix socket, which works across namespaces; preview URLs are fetched from inside the
 * namespace with {@link PrivateNetns.fetch}.
 *
 * Also {@link importCycles} (import_cycles.ts), with which a package's tests check that its
 * modules import one way only.
 *
 * Environment:
 *   SANDPOOLD              the daemon binary (default /work/stable/sandpoold)
 *   REDIS_SERVER           redis-server (default: found in PATH)
 *   SANDPOOL_TEST_LOG_DIR  keep the daemon's log there (it is deleted otherwise)
 */

import { execFile, execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  accessSync,
  chmodSync,
  closeSync,
  constants,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Redis } from "ioredis";

export { importCycles, importGraph } from "./import_cycles.js";

export const SANDPOOLD = process.env.SANDPOOLD || "/work/stable/sandpoold";
export const REDIS_SERVER = process.env.REDIS_SERVER || "redis-server";

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Poll `predicate` until it returns a truthy value; throw with `what` after `timeoutMs`. */
export async function waitFor<T>(
  predicate: () => T | Promise<T>,
  timeoutMs: number,
  what: string,
  intervalMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await predicate();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}

function exited(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((r) => proc.once("exit", () => r()));
}

async function stopProcess(proc: ChildProcess | null, graceMs: number): Promise<void> {
  if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return;
  proc.kill("SIGTERM");
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<"timeout">((r) => {
    timer = setTimeout(() => r("timeout"), graceMs);
  });
  const how = await Promise.race([exited(proc).then(() => "exited" as const), timeout]);
  clearTimeout(timer);
  if (how === "timeout") {
    proc.kill("SIGKILL");
    await exited(proc);
  }
}

// Children, directories and network namespaces to clean up if the test process ends without stop().
const liveChildren = new Set<ChildProcess>();
const liveDirs = new Set<string>();
const liveNetns = new Set<string>();
process.once("exit", () => {
  for (const p of liveChildren) {
    try {
      p.kill("SIGKILL");
    } catch {
      // already gone
    }
  }
  for (const d of liveDirs) {
    unmountUnder(d);
    rmSync(d, { recursive: true, force: true });
  }
  for (const n of liveNetns) {
    try {
      execFileSync("ip", ["netns", "del", n], { stdio: "ignore" });
    } catch {
      // already gone
    }
  }
});

/** PING a unix socket with a raw RESP request; true on PONG. */
function ping(sock: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(sock);
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(1000, () => done(false));
    s.on("error", () => done(false));
    s.on("connect", () => s.write("PING\r\n"));
    s.on("data", (d) => done(d.toString().startsWith("+PONG")));
  });
}

/**
 * A private redis-server on a unix socket (no TCP). With `aof`, every write is fsynced to an
 * append-only file, so {@link restart} loses nothing.
 */
export class RedisServer {
  readonly dir: string;
  readonly sock: string;
  private readonly args: string[];
  private proc: ChildProcess | null = null;

  constructor(opts: { aof?: boolean } = {}) {
    this.dir = mkdtempSync(join(tmpdir(), "sandpool-ts-"));
    liveDirs.add(this.dir);
    chmodSync(this.dir, 0o755);
    this.sock = join(this.dir, "redis.sock");
    this.args = [
      "--port", "0",
      "--unixsocket", this.sock,
      "--unixsocketperm", "700",
      "--dir", this.dir,
      "--save", "",
      "--loglevel", "warning",
      "--logfile", join(this.dir, "redis.log"),
      "--appendonly", opts.aof ? "yes" : "no",
      "--appendfsync", "always",
    ];
  }

  get url(): string {
    return `unix://${this.sock}`;
  }

  async start(): Promise<void> {
    const proc = spawn(REDIS_SERVER, this.args, { stdio: "ignore" });
    this.proc = proc;
    liveChildren.add(proc);
    proc.once("exit", () => liveChildren.delete(proc));
    await waitFor(
      async () => {
        if (proc.exitCode !== null) throw new Error(`redis-server exited: ${this.logTail()}`);
        return ping(this.sock);
      },
      10000,
      "redis-server to answer",
    );
  }

  /** A plain ioredis connection for checks (close it). */
  admin(): Redis {
    const r = new Redis({ path: this.sock, lazyConnect: true, maxRetriesPerRequest: null });
    r.on("error", () => undefined);
    return r;
  }

  /** SIGTERM (Redis writes and fsyncs its AOF), stay down `downForMs`, start again. */
  async restart(downForMs = 1000): Promise<void> {
    await stopProcess(this.proc, 10000);
    await sleep(downForMs);
    await this.start();
  }

  async stopServer(): Promise<void> {
    await stopProcess(this.proc, 10000);
  }

  logTail(): string {
    try {
      return readFileSync(join(this.dir, "redis.log"), "utf8").slice(-2000);
    } catch {
      return "";
    }
  }

  /** Stop redis-server and remove its directory. */
  async stop(): Promise<void> {
    await stopProcess(this.proc, 5000);
    rmSync(this.dir, { recursive: true, force: true });
    liveDirs.delete(this.dir);
  }
}

/**
 * Daemon flags for exposed ports inside a {@link PrivateNetns}: network templates on, the preview
 * proxy on a free port of the namespace's loopback, URLs naming that address.
 */
export const NETNS_PREVIEW_ARGS: readonly string[] = Object.freeze([
  "--net", "on",
  "--net-ip-forward", "set",
  "--net-preview-listen", "127.0.0.1:0",
  "--net-preview-url", "http://127.0.0.1:{port}/",
]);

// Run in a namespace: GET a URL, print "<status> <body>" (HTTP errors too).
const FETCH_PY = `
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=20)
    sys.stdout.write(f"{r.status} {r.read().decode()}")
except urllib.error.HTTPError as e:
    sys.stdout.write(f"{e.code} {e.read().decode()}")
`;

/**
 * A private network namespace (`ip netns add spt-ts-<random>`) with only its loopback up: no
 * route leads anywhere else. {@link remove} deletes it (also done if the test process exits).
 */
export class PrivateNetns {
  readonly name: string;

  constructor(prefix = "spt-ts") {
    this.name = `${prefix}-${randomBytes(3).toString("hex")}`;
  }

  /** The namespace's file, for `nsenter --net=`. */
  get path(): string {
    return `/run/netns/${this.name}`;
  }

  create(): this {
    execFileSync("ip", ["netns", "add", this.name], { stdio: ["ignore", "ignore", "pipe"] });
    liveNetns.add(this.name);
    execFileSync("ip", ["-n", this.name, "link", "set", "lo", "up"], { stdio: ["ignore", "ignore", "pipe"] });
    return this;
  }

  /** `argv` wrapped to run inside the namespace (its network only). */
  argv(argv: readonly string[]): string[] {
    return ["nsenter", `--net=${this.path}`, ...argv];
  }

  /** Run `argv` inside the namespace and collect its output (never rejects for its exit status). */
  run(argv: readonly string[], timeoutMs = 60000): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const [cmd, ...args] = this.argv(argv);
    return new Promise((resolve) => {
      execFile(cmd as string, args, { timeout: timeoutMs, encoding: "utf8" }, (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof (err as { code?: unknown }).code === "number" ? ((err as { code: number }).code) : null;
        resolve({ code, stdout, stderr });
      });
    });
  }

  /** GET `url` from inside the namespace (with /usr/bin/python3): its status (0: no answer) and body. */
  async fetch(url: string): Promise<{ status: number; body: string }> {
    const r = await this.run(["/usr/bin/python3", "-c", FETCH_PY, url]);
    const m = /^(\d{3}) ([\s\S]*)$/.exec(r.stdout);
    if (m === null) return { status: 0, body: r.stderr || r.stdout };
    return { status: Number(m[1]), body: m[2] ?? "" };
  }

  remove(): void {
    try {
      execFileSync("ip", ["netns", "del", this.name], { stdio: "ignore" });
    } catch {
      // already gone
    }
    liveNetns.delete(this.name);
  }
}

let daemonCount = 0;

/**
 * Throw a clear error unless the daemon binary implements sessions (protocol version 2): its
 * `--help` names them. Session tests call this first, so against an older daemon they fail
 * with this message instead of waiting for answers that never come.
 */
export function requireSessions(): void {
  let help = "";
  try {
    help = execFileSync(SANDPOOLD, ["--help"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    const out = e as { stdout?: string; stderr?: string };
    help = `${out.stdout ?? ""}${out.stderr ?? ""}`;
  }
  if (!/session/i.test(help)) {
    throw new Error(
      `${SANDPOOLD} does not implement sessions (protocol version 2): its --help names no session ` +
        "option. Point SANDPOOLD at a daemon with sessions.",
    );
  }
}

/** Unmount whatever is still mounted under `dir` (a daemon killed before it could), deepest first. */
function unmountUnder(dir: string): void {
  let mounts: string[] = [];
  try {
    mounts = readFileSync("/proc/self/mounts", "utf8")
      .split("\n")
      .map((l) => (l.split(" ")[1] ?? "").replace(/\\040/g, " "))
      .filter((m) => m === dir || m.startsWith(`${dir}/`));
  } catch {
    return;
  }
  for (const m of mounts.sort((a, b) => b.length - a.length)) {
    try {
      execFileSync("umount", ["-l", m], { stdio: "ignore" });
    } catch {
      // already gone
    }
  }
}

/** Remove a daemon's state directory (after unmounting what it left mounted there). */
function removeStateDir(dir: string): void {
  unmountUnder(dir);
  rmSync(dir, { recursive: true, force: true });
  liveDirs.delete(dir);
}

/** Options of a test {@link Daemon}. */
export interface DaemonOptions {
  workers?: number;
  /** More daemon flags (after the harness's own). */
  extra?: string[];
  prefix?: string;
  queue?: string;
  consumer?: string;
  stateDir?: string;
  /** A configuration file's text (templates...): written next to the Redis socket, given as `--config`. */
  config?: string;
  /** Run the daemon inside this network namespace (`nsenter --net=`). */
  netns?: PrivateNetns;
  /** Its first host uid (default: a range per test process and daemon). */
  uidBase?: number;
}

/** One sandpoold serving a {@link RedisServer}, with its own consumer name and host uid range. */
export class Daemon {
  readonly consumer: string;
  readonly uidBase: number;
  readonly logPath: string;
  readonly prefix: string;
  /** The daemon's `--state-dir` (a fresh temporary directory, removed by {@link remove}). */
  readonly stateDir: string;
  private readonly args: string[];
  private proc: ChildProcess | null = null;

  /** The network namespace it runs in, or `null` (the host's). */
  readonly netns: PrivateNetns | null;

  constructor(readonly redis: RedisServer, opts: DaemonOptions = {}) {
    this.prefix = opts.prefix ?? "sandpool";
    this.consumer = opts.consumer ?? `ts-${randomBytes(4).toString("hex")}`;
    this.netns = opts.netns ?? null;
    if (opts.stateDir !== undefined) this.stateDir = opts.stateDir;
    else {
      this.stateDir = mkdtempSync(join(tmpdir(), "sandpool-ts-state-"));
      liveDirs.add(this.stateDir);
    }
    // 24 slots + one per template, two uids each: 64 uids; 1000 per daemon is plenty. Daemons in
    // a private namespace (network templates) take a range of their own, away from the other
    // test harnesses' (Python's: 200000, 400000..1000000, 1500000..2000000).
    this.uidBase = opts.uidBase ?? (this.netns ? 2100000 : 600000) + (process.pid % 300) * 1000 + daemonCount++ * 100;
    this.logPath = join(redis.dir, `sandpoold-${this.consumer}.log`);
    let configArgs: string[] = [];
    if (opts.config !== undefined) {
      const path = join(redis.dir, `sandpool-${this.consumer}.conf`);
      writeFileSync(path, opts.config);
      configArgs = ["--config", path];
    }
    this.args = [
      "--redis", redis.url,
      "--metrics-addr", "off",
      "--workers", String(opts.workers ?? 2),
      "--max-sandboxes", "24",
      "--consumer", this.consumer,
      "--uid-base", String(this.uidBase),
      "--log-level", "info",
      "--state-dir", this.stateDir,
      ...(opts.prefix ? ["--prefix", opts.prefix] : []),
      ...(opts.queue ? ["--queue", opts.queue] : []),
      ...configArgs,
      ...(opts.extra ?? []),
    ];
  }

  /** Start the daemon and wait for its heartbeat key. */
  async start(): Promise<void> {
    accessSync(SANDPOOLD, constants.X_OK);
    const fd = openSync(this.logPath, "a");
    const env = { ...process.env };
    delete env.SANDPOOL_REDIS_URL;
    // nsenter joins the namespace and execs the daemon: the child is the daemon itself.
    const [cmd, ...args] = this.netns ? this.netns.argv([SANDPOOLD, ...this.args]) : [SANDPOOLD, ...this.args];
    const proc = spawn(cmd as string, args, { stdio: ["ignore", fd, fd], env });
    closeSync(fd);
    this.proc = proc;
    liveChildren.add(proc);
    proc.once("exit", () => liveChildren.delete(proc));
    const admin = this.redis.admin();
    try {
      await waitFor(
        async () => {
          if (proc.exitCode !== null || proc.signalCode !== null) {
            throw new Error(`sandpoold exited (${proc.exitCode ?? proc.signalCode}): ${this.logTail()}`);
          }
          return (await admin.exists(`${this.prefix}:daemon:${this.consumer}`)) === 1;
        },
        60000,
        "the daemon's heartbeat",
        100,
      );
    } finally {
      admin.disconnect();
    }
  }

  get alive(): boolean {
    return this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  logTail(n = 3000): string {
    try {
      return readFileSync(this.logPath, "utf8").slice(-n);
    } catch {
      return "";
    }
  }

  /** SIGKILL, as a crash would (its state directory stays). */
  async kill(): Promise<void> {
    if (this.proc === null || !this.alive) return;
    const proc = this.proc;
    proc.kill("SIGKILL");
    await exited(proc);
  }

  /** Stop it and remove its state directory. */
  async remove(): Promise<void> {
    await this.stop();
    removeStateDir(this.stateDir);
  }

  /** SIGTERM, SIGKILL after 20 s; keeps the log if SANDPOOL_TEST_LOG_DIR is set. */
  async stop(): Promise<void> {
    await stopProcess(this.proc, 20000);
    const keep = process.env.SANDPOOL_TEST_LOG_DIR;
    if (keep && existsSync(this.logPath)) {
      mkdirSync(keep, { recursive: true });
      copyFileSync(this.logPath, join(keep, `sandpoold-${this.consumer}.log`));
    }
  }
}

/** A private Redis and a daemon serving it, started together and stopped together. */
export class Deployment {
  readonly redis: RedisServer;
  readonly daemon: Daemon;
  /** With `netns: true`: the private network namespace the daemon runs in (removed by `stop()`). */
  readonly netns: PrivateNetns | null;

  constructor(
    opts: Omit<DaemonOptions, "netns" | "stateDir"> & { aof?: boolean; netns?: boolean } = {},
  ) {
    const { aof, netns, ...daemonOpts } = opts;
    this.redis = new RedisServer({ aof: aof ?? false });
    this.netns = netns ? new PrivateNetns() : null;
    this.daemon = new Daemon(this.redis, { ...daemonOpts, ...(this.netns ? { netns: this.netns } : {}) });
  }

  get url(): string {
    return this.redis.url;
  }

  async start(): Promise<this> {
    try {
      this.netns?.create();
      await this.redis.start();
      await this.daemon.start();
    } catch (e) {
      await this.stop();
      throw e;
    }
    return this;
  }

  async stop(): Promise<void> {
    await this.daemon.remove();
    await this.redis.stop();
    this.netns?.remove();
  }
}
