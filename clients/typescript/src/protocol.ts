/**
 * Protocol v1 codecs (docs/PROTOCOL.md): the job map, the result map and live events.
 *
 * Longer than 800 lines on purpose: it is the one place every job field, result field and event
 * is encoded and checked, each next to its table (as Python's protocol.py); split, the field
 * lists and their decoders would drift apart, which is what one source of truth prevents.
 *
 * Pure data and functions, no I/O. Contracts (the same as the Python client's protocol.py):
 *
 * - {@link buildJobMap} returns an object whose key order is the field order of PROTOCOL.md
 *   section 3 (`v, id, argv|shell|code+runtime, env, cwd, stdin, timeout_ms, max_output_bytes,
 *   retries, template, memory_bytes, pids, cpu_time_ms`), so {@link encodeJob} reproduces the
 *   section 11 test vectors byte for byte. It throws {@link InvalidArgumentError} for input that is
 *   wrong whatever the server's limits (wrong types, NUL characters, bad names, both/neither of
 *   argv and shell, negative numbers); limits that depend on the server (sizes, the largest
 *   timeout) are left to the daemon, which clamps or rejects with `too_large`.
 * - {@link decodeResult} and {@link decodeEvent} accept msgpack str where bytes are expected (and
 *   bin where strings are expected), ignore unknown fields and event types, and throw
 *   {@link ProtocolError} only when the input is not a msgpack map or a known field has an
 *   unusable type.
 * - {@link decodeJob} checks a job payload the way PROTOCOL.md says a daemon does and throws
 *   {@link JobDecodeError} with the code the daemon would store.
 *
 * Over 800 lines because the job map's encoder and its checks, the result and the events are
 * one source of truth for version 1 (session_protocol.ts builds version 2 on it).
 */

import { Decoder, Encoder } from "@msgpack/msgpack";

import { InvalidArgumentError, JobDecodeError, ProtocolError } from "./errors.js";

/** The version this client writes in a job map (a v2 daemon accepts 1 and 2 for the same map). */
export const PROTOCOL_VERSION = 1;

/** Versions a daemon accepts in a job map (PROTOCOL.md section 3: `1` or `2`, the same map). */
export const JOB_MAP_VERSIONS: readonly number[] = Object.freeze([1, 2]);

/** Event types of PROTOCOL.md section 6. */
export const EVENT_TYPES = ["started", "stdout", "stderr", "exited"] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** Outcomes of PROTOCOL.md section 5. */
export const OUTCOMES = [
  "exit",
  "signal",
  "timeout",
  "cancelled",
  "output_limit",
  "memory_limit",
  "pids_limit",
  "cpu_limit",
  "disk_limit",
  "seccomp",
  "worker_lost",
  "error",
] as const;
/** A known outcome, or a string a newer daemon may send. */
export type Outcome = (typeof OUTCOMES)[number] | (string & {});

/** Error codes of PROTOCOL.md section 8 and whether each is retryable. */
export const ERROR_CODES: Readonly<Record<string, boolean>> = Object.freeze({
  bad_payload: false,
  bad_version: false,
  bad_field: false,
  too_large: false,
  exec_failed: false,
  cancelled: false,
  worker_lost: true,
  sandbox_failed: true,
  shutdown: true,
  internal: true,
});

/** Runtimes a `code` job may name. */
export const RUNTIMES = ["python", "node", "bash"] as const;
export type Runtime = (typeof RUNTIMES)[number];

const JOB_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
/** @internal */
export const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const TEMPLATE_RE = /^[A-Za-z0-9._-]{1,64}$/;
const LONE_SURROGATE_RE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

// ------------------------------------------------------------------------------------------
// Jobs
// ------------------------------------------------------------------------------------------

/** Bytes for `stdin`: binary data, or a string (sent UTF-8 encoded). */
export type BytesInput = Uint8Array | ArrayBuffer | string;

/** Everything of a job but its command. Fields left `undefined` take the daemon's defaults. */
export interface JobOptions {
  /** The job id: 1..128 characters of `[A-Za-z0-9._:-]`; a random 128-bit hex id if not given. */
  id?: string | undefined;
  /** The template (environment) to run in, `[A-Za-z0-9._-]{1,64}`. */
  template?: string | undefined;
  /** Environment variables; the job sees only these plus `PATH`, `HOME`, `LANG` (section 3). */
  env?: Readonly<Record<string, string>> | ReadonlyMap<string, string> | undefined;
  /** Absolute working directory inside the sandbox (default `/work`). */
  cwd?: string | undefined;
  /** Written to the job's stdin, which is then closed. */
  stdin?: BytesInput | undefined;
  /** Wall timeout; the daemon clamps it to its `max_timeout_ms`. */
  timeoutMs?: number | undefined;
  /** Output kept per stream (stdout and stderr each); clamped by the daemon. */
  maxOutputBytes?: number | undefined;
  /** How often the job may be re-run if its worker is lost (0..5). */
  retries?: number | undefined;
  /** Memory (and swap) limit of the sandbox; clamped by the daemon. */
  memoryBytes?: number | undefined;
  /** Processes + threads the job may have at once; clamped by the daemon. */
  pids?: number | undefined;
  /** CPU time (user + system) the job may use; clamped by the daemon. */
  cpuTimeMs?: number | undefined;
}

/** Run `argv` directly (no shell); `argv[0]` is looked up in `PATH` if it has no `/`. */
export interface ArgvCommand {
  argv: readonly string[];
  shell?: undefined;
  code?: undefined;
  runtime?: undefined;
}

/** Run a command line as `/bin/sh -c` would. */
export interface ShellCommand {
  shell: string;
  argv?: undefined;
  code?: undefined;
  runtime?: undefined;
}

/** Run source code as `python3 -c`, `node -e` or `bash -c` would, in a warm interpreter. */
export interface CodeCommand {
  code: string;
  runtime: Runtime;
  argv?: undefined;
  shell?: undefined;
}

/** A job: exactly one of `argv`, `shell` and `code` (with `runtime`), plus {@link JobOptions}. */
export type Job = JobOptions & (ArgvCommand | ShellCommand | CodeCommand);

/** The job map of PROTOCOL.md section 3, with its wire names, in wire order. */
export interface JobMap {
  v: number;
  id: string;
  argv?: string[];
  shell?: string;
  code?: string;
  runtime?: string;
  env?: Record<string, string>;
  cwd?: string;
  stdin?: Uint8Array;
  timeout_ms?: number;
  max_output_bytes?: number;
  retries?: number;
  template?: string;
  memory_bytes?: number;
  pids?: number;
  cpu_time_ms?: number;
}

/** The fields of a {@link Job}. @internal */
export const JOB_KEYS: ReadonlySet<string> = new Set([
  "id",
  "argv",
  "shell",
  "code",
  "runtime",
  "template",
  "env",
  "cwd",
  "stdin",
  "timeoutMs",
  "maxOutputBytes",
  "retries",
  "memoryBytes",
  "pids",
  "cpuTimeMs",
]);

/** True when `id` is a string of 1..128 characters from `[A-Za-z0-9._:-]`. */
export function validJobId(id: unknown): id is string {
  return typeof id === "string" && JOB_ID_RE.test(id);
}

/** Throws {@link InvalidArgumentError} unless `id` is a valid job id; returns it. */
export function checkJobId(id: unknown): string {
  if (!validJobId(id)) {
    throw new InvalidArgumentError(
      `invalid job id ${describe(id)}: need 1..128 characters of [A-Za-z0-9._:-]`,
    );
  }
  return id;
}

/** @internal */
export function describe(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v.length > 80 ? v.slice(0, 80) + "..." : v);
  if (typeof v === "bigint") return `${v}n`;
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "object") return `a ${v.constructor?.name ?? "object"}`;
  return String(v);
}

/** @internal */
export function typeName(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (v instanceof Uint8Array) return "Uint8Array";
  return typeof v;
}

/** @internal */
export function checkText(name: string, value: unknown): string {
  if (typeof value !== "string") {
    throw new InvalidArgumentError(`${name} must be a string, not ${typeName(value)}`);
  }
  if (value.includes("\0")) throw new InvalidArgumentError(`${name} must not contain NUL characters`);
  if (LONE_SURROGATE_RE.test(value)) {
    throw new InvalidArgumentError(`${name} is not valid Unicode (it has a lone surrogate)`);
  }
  return value;
}

/** @internal */
export function checkUint(name: string, value: unknown, minimum = 0): number {
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw new InvalidArgumentError(`${name} must be an integer, not ${describe(value)}`);
  }
  if (value < minimum) throw new InvalidArgumentError(`${name} must be >= ${minimum} (got ${value})`);
  if (!Number.isSafeInteger(value)) {
    throw new InvalidArgumentError(`${name} must be at most ${Number.MAX_SAFE_INTEGER} (got ${value})`);
  }
  return value;
}

/** Bytes of a {@link BytesInput} as a Uint8Array (strings UTF-8 encoded). */
export function toBytes(name: string, value: unknown): Uint8Array {
  if (typeof value === "string") return Buffer.from(checkWellFormed(name, value), "utf8");
  if (value instanceof Uint8Array) return value;
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  throw new InvalidArgumentError(`${name} must be a Uint8Array, an ArrayBuffer or a string, not ${typeName(value)}`);
}

function checkWellFormed(name: string, value: string): string {
  if (LONE_SURROGATE_RE.test(value)) {
    throw new InvalidArgumentError(`${name} is not valid Unicode (it has a lone surrogate)`);
  }
  return value;
}

/**
 * An environment (object or Map of string to string) as a plain object in the caller's order.
 * Throws {@link InvalidArgumentError} for a bad name or value. @internal
 */
export function checkEnv(name: string, env: unknown): Record<string, string> {
  let entries: Iterable<[unknown, unknown]>;
  if (env instanceof Map) entries = env.entries();
  else if (env !== null && typeof env === "object" && !Array.isArray(env) && !(env instanceof Uint8Array)) {
    entries = Object.entries(env);
  } else {
    throw new InvalidArgumentError(`${name} must be an object or a Map of string to string, not ${typeName(env)}`);
  }
  const out: Record<string, string> = {};
  for (const [k, v] of entries) {
    if (typeof k !== "string" || !ENV_NAME_RE.test(k)) {
      throw new InvalidArgumentError(`invalid environment variable name ${describe(k)}`);
    }
    out[k] = checkText(`${name}[${JSON.stringify(k)}]`, v);
  }
  return out;
}

/** An absolute path without NUL characters. @internal */
export function checkAbsolutePath(name: string, value: unknown): string {
  const path = checkText(name, value);
  if (!path.startsWith("/")) {
    throw new InvalidArgumentError(`${name} must be an absolute path (got ${JSON.stringify(path)})`);
  }
  return path;
}

/** A template (or snapshot, or code context) name: `[A-Za-z0-9._-]{1,64}`. @internal */
export function checkTemplateName(name: string, value: unknown): string {
  if (typeof value !== "string" || !TEMPLATE_RE.test(value)) {
    throw new InvalidArgumentError(`invalid ${name} name ${describe(value)}: need 1..64 characters of [A-Za-z0-9._-]`);
  }
  return value;
}

/**
 * Build the job map of PROTOCOL.md section 3 from a {@link Job} that has its `id`, fields in the
 * documented order. Fields that are `undefined` are left out (the daemon applies its defaults).
 * `env` keeps the caller's order. Throws {@link InvalidArgumentError} for input no daemon could
 * accept.
 */
export function buildJobMap(job: Job & { id: string }): JobMap {
  if (job === null || typeof job !== "object" || Array.isArray(job)) {
    throw new InvalidArgumentError(`a job must be an object, not ${typeName(job)}`);
  }
  for (const key of Object.keys(job)) {
    if (!JOB_KEYS.has(key) && (job as unknown as Record<string, unknown>)[key] !== undefined) {
      throw new InvalidArgumentError(
        `unknown job field ${JSON.stringify(key)} (known: ${[...JOB_KEYS].join(", ")})`,
      );
    }
  }
  const id = checkJobId(job.id);
  const { argv, shell, code, runtime } = job as {
    argv?: unknown;
    shell?: unknown;
    code?: unknown;
    runtime?: unknown;
  };
  const given = [argv, shell, code].filter((x) => x !== undefined).length;
  if (given !== 1) throw new InvalidArgumentError("exactly one of argv, shell and code must be given");
  if ((code === undefined) !== (runtime === undefined)) {
    throw new InvalidArgumentError("code and runtime go together");
  }
  if (runtime !== undefined && !(RUNTIMES as readonly unknown[]).includes(runtime)) {
    throw new InvalidArgumentError(`runtime must be one of ${RUNTIMES.join(", ")} (got ${describe(runtime)})`);
  }
  const m: JobMap = { v: PROTOCOL_VERSION, id };
  if (code !== undefined) {
    m.code = checkText("code", code);
    m.runtime = runtime as string;
  } else if (argv !== undefined) {
    if (
      typeof argv !== "object" ||
      argv === null ||
      argv instanceof Uint8Array ||
      !(Symbol.iterator in argv)
    ) {
      throw new InvalidArgumentError("argv must be an array of strings (use shell for a command line)");
    }
    const items = [...(argv as Iterable<unknown>)];
    if (items.length === 0) throw new InvalidArgumentError("argv must not be empty");
    m.argv = items.map((a, i) => checkText(`argv[${i}]`, a));
    if (m.argv[0] === "") throw new InvalidArgumentError("argv[0] must not be empty");
  } else {
    m.shell = checkText("shell", shell);
  }
  if (job.env !== undefined) m.env = checkEnv("env", job.env);
  if (job.cwd !== undefined) m.cwd = checkAbsolutePath("cwd", job.cwd);
  if (job.stdin !== undefined) m.stdin = toBytes("stdin", job.stdin);
  if (job.timeoutMs !== undefined) m.timeout_ms = checkUint("timeoutMs", job.timeoutMs, 1);
  if (job.maxOutputBytes !== undefined) m.max_output_bytes = checkUint("maxOutputBytes", job.maxOutputBytes);
  if (job.retries !== undefined) m.retries = checkUint("retries", job.retries);
  if (job.template !== undefined) m.template = checkTemplateName("template", job.template);
  if (job.memoryBytes !== undefined) m.memory_bytes = checkUint("memoryBytes", job.memoryBytes, 1);
  if (job.pids !== undefined) m.pids = checkUint("pids", job.pids, 1);
  if (job.cpuTimeMs !== undefined) m.cpu_time_ms = checkUint("cpuTimeMs", job.cpuTimeMs, 1);
  return m;
}

// Plain numbers only (the smallest msgpack int encodings: fixint, uint8/16/32/64), strings as
// str, Uint8Array as bin, object keys in insertion order. See the section 11 vectors.
const encoder = new Encoder({ ignoreUndefined: true });

/** msgpack-encode a job map: str as msgpack str, bytes as msgpack bin, keys in object order. */
export function encodeJob(jobMap: JobMap): Buffer {
  const out = encoder.encode(jobMap);
  return Buffer.from(out.buffer, out.byteOffset, out.byteLength);
}

// ------------------------------------------------------------------------------------------
// Decoding helpers
// ------------------------------------------------------------------------------------------

/** Stands for map keys that are neither strings nor numbers: never a known field. */
/** @internal */
export const ODD_KEY = "\u0000non-string-key";

/**
 * What an event decoder returns for an `exited` event that names its stored result instead of
 * carrying it (PROTOCOL.md section 16: a result over 64 KiB): read the result key now.
 */
export const RESULT_STORED: unique symbol = Symbol("sandpool.resultStored");

// str values come back as raw bytes (rawStrings): bytes fields keep them exactly (a daemon that
// sends bytes as str, even invalid UTF-8, loses nothing); text fields are decoded here.
// Limitation of @msgpack/msgpack: a map key "__proto__" makes decoding fail (ProtocolError).
const tolerantDecoder = new Decoder({
  rawStrings: true,
  mapKeyConverter: (key: unknown) => (typeof key === "string" || typeof key === "number" ? key : ODD_KEY),
});

/** @internal */
export const utf8 = new TextDecoder("utf-8", { fatal: false });

/** A decoded msgpack map. @internal */
export type Fields = Record<string, unknown>;

/** @internal */
export function isPlainMap(v: unknown): v is Fields {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);
}

/** @internal */
export function get(m: Fields, key: string): unknown {
  return Object.hasOwn(m, key) ? m[key] : undefined;
}

function unpackMap(data: Uint8Array, what: string): Fields {
  let obj: unknown;
  try {
    obj = tolerantDecoder.decode(data);
  } catch (e) {
    throw new ProtocolError(`${what} is not valid msgpack: ${(e as Error).message}`);
  }
  if (!isPlainMap(obj)) throw new ProtocolError(`${what} is not a msgpack map (got ${typeName(obj)})`);
  return obj;
}

/** @internal */
export function asBytes(v: unknown, field: string): Buffer {
  if (v === undefined || v === null) return Buffer.alloc(0);
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  throw new ProtocolError(`field ${JSON.stringify(field)} must be bytes, got ${typeName(v)}`);
}

/** @internal */
export function asStr(v: unknown, field: string): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v === "string") return v;
  if (v instanceof Uint8Array) return utf8.decode(v);
  throw new ProtocolError(`field ${JSON.stringify(field)} must be a string, got ${typeName(v)}`);
}

/** @internal */
export function asInt(v: unknown, field: string): number | null {
  if (v === undefined || v === null) return null;
  if (typeof v === "bigint") return Number(v);
  if (typeof v !== "number" || !Number.isInteger(v)) {
    throw new ProtocolError(`field ${JSON.stringify(field)} must be an integer, got ${typeName(v)}`);
  }
  return v;
}

/** @internal */
export function asBool(v: unknown, field: string): boolean {
  if (v === undefined || v === null) return false;
  if (typeof v === "boolean") return v;
  if (typeof v === "number") return v !== 0;
  throw new ProtocolError(`field ${JSON.stringify(field)} must be a bool, got ${typeName(v)}`);
}

// ------------------------------------------------------------------------------------------
// Results
// ------------------------------------------------------------------------------------------

/** The `error` map of a result (PROTOCOL.md sections 5 and 8). Data, not an exception. */
export interface ErrorInfo {
  readonly code: string;
  readonly message: string;
  readonly retryable: boolean;
}

/** The fields of a {@link Result}; see PROTOCOL.md section 5 for each wire name. */
export interface ResultFields {
  v?: number;
  id: string;
  outcome: Outcome;
  exitCode?: number | null;
  signal?: number | null;
  timedOut?: boolean;
  killed?: boolean;
  stdout?: Buffer;
  stderr?: Buffer;
  stdoutTruncated?: boolean;
  stderrTruncated?: boolean;
  stdoutDroppedBytes?: number;
  stderrDroppedBytes?: number;
  execTimeUs?: number;
  cpuTimeUs?: number;
  peakMemoryBytes?: number;
  queueWaitUs?: number;
  worker?: string;
  attempt?: number;
  error?: ErrorInfo | null;
}

/**
 * The final result of a job (PROTOCOL.md section 5). Every field of the result map is here, in
 * camelCase (`exit_code` is `exitCode`, ...); fields missing from the map take the zero value
 * (`null` for nil-able ones). `stdout`/`stderr` are the bytes kept by the daemon (the first
 * `max_output_bytes` of each stream); `stdoutText`/`stderrText` decode them as UTF-8.
 */
export class Result {
  readonly v: number;
  readonly id: string;
  readonly outcome: Outcome;
  /** The main process's exit status whenever it exited; `null` if it died of a signal or never ran. */
  readonly exitCode: number | null;
  /** The signal that ended the main process, if any. */
  readonly signal: number | null;
  readonly timedOut: boolean;
  readonly killed: boolean;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
  readonly stdoutDroppedBytes: number;
  readonly stderrDroppedBytes: number;
  readonly execTimeUs: number;
  readonly cpuTimeUs: number;
  readonly peakMemoryBytes: number;
  readonly queueWaitUs: number;
  readonly worker: string;
  readonly attempt: number;
  readonly error: ErrorInfo | null;

  constructor(f: ResultFields) {
    this.v = f.v ?? PROTOCOL_VERSION;
    this.id = f.id;
    this.outcome = f.outcome;
    this.exitCode = f.exitCode ?? null;
    this.signal = f.signal ?? null;
    this.timedOut = f.timedOut ?? false;
    this.killed = f.killed ?? false;
    this.stdout = f.stdout ?? Buffer.alloc(0);
    this.stderr = f.stderr ?? Buffer.alloc(0);
    this.stdoutTruncated = f.stdoutTruncated ?? false;
    this.stderrTruncated = f.stderrTruncated ?? false;
    this.stdoutDroppedBytes = f.stdoutDroppedBytes ?? 0;
    this.stderrDroppedBytes = f.stderrDroppedBytes ?? 0;
    this.execTimeUs = f.execTimeUs ?? 0;
    this.cpuTimeUs = f.cpuTimeUs ?? 0;
    this.peakMemoryBytes = f.peakMemoryBytes ?? 0;
    this.queueWaitUs = f.queueWaitUs ?? 0;
    this.worker = f.worker ?? "";
    this.attempt = f.attempt ?? 0;
    this.error = f.error ?? null;
  }

  /** True exactly when the process exited with status 0. */
  get ok(): boolean {
    return this.outcome === "exit" && this.exitCode === 0;
  }

  /** `stdout` decoded as UTF-8 (invalid sequences become U+FFFD). */
  get stdoutText(): string {
    return utf8.decode(this.stdout);
  }

  /** `stderr` decoded as UTF-8 (invalid sequences become U+FFFD). */
  get stderrText(): string {
    return utf8.decode(this.stderr);
  }

  /** Build a Result from a decoded result map; unknown fields are ignored. */
  static fromMap(m: Fields): Result {
    const err = get(m, "error");
    let error: ErrorInfo | null = null;
    if (isPlainMap(err)) {
      error = Object.freeze({
        code: asStr(get(err, "code"), "error.code") ?? "",
        message: asStr(get(err, "message"), "error.message") ?? "",
        retryable: asBool(get(err, "retryable"), "error.retryable"),
      });
    } else if (err !== undefined && err !== null) {
      throw new ProtocolError(`field "error" must be a map or nil, got ${typeName(err)}`);
    }
    let outcome = asStr(get(m, "outcome"), "outcome");
    // An operation result map (v2: `ok` false with an `error`) where a job result was expected
    // reads as outcome `error` with that error.
    if (outcome === null && get(m, "ok") === false && error !== null) outcome = "error";
    if (outcome === null) throw new ProtocolError("result has no 'outcome'");
    return new Result({
      v: asInt(get(m, "v"), "v") ?? PROTOCOL_VERSION,
      id: asStr(get(m, "id"), "id") ?? "",
      outcome,
      exitCode: asInt(get(m, "exit_code"), "exit_code"),
      signal: asInt(get(m, "signal"), "signal"),
      timedOut: asBool(get(m, "timed_out"), "timed_out"),
      killed: asBool(get(m, "killed"), "killed"),
      stdout: asBytes(get(m, "stdout"), "stdout"),
      stderr: asBytes(get(m, "stderr"), "stderr"),
      stdoutTruncated: asBool(get(m, "stdout_truncated"), "stdout_truncated"),
      stderrTruncated: asBool(get(m, "stderr_truncated"), "stderr_truncated"),
      stdoutDroppedBytes: asInt(get(m, "stdout_dropped_bytes"), "stdout_dropped_bytes") ?? 0,
      stderrDroppedBytes: asInt(get(m, "stderr_dropped_bytes"), "stderr_dropped_bytes") ?? 0,
      execTimeUs: asInt(get(m, "exec_time_us"), "exec_time_us") ?? 0,
      cpuTimeUs: asInt(get(m, "cpu_time_us"), "cpu_time_us") ?? 0,
      peakMemoryBytes: asInt(get(m, "peak_memory_bytes"), "peak_memory_bytes") ?? 0,
      queueWaitUs: asInt(get(m, "queue_wait_us"), "queue_wait_us") ?? 0,
      worker: asStr(get(m, "worker"), "worker") ?? "",
      attempt: asInt(get(m, "attempt"), "attempt") ?? 0,
      error,
    });
  }
}

/** Decode the msgpack result map stored at `sandpool:result:<id>`. */
export function decodeResult(data: Uint8Array): Result {
  return Result.fromMap(unpackMap(data, "result"));
}

// ------------------------------------------------------------------------------------------
// Events
// ------------------------------------------------------------------------------------------

/**
 * `seq` of every event is the daemon's sequence number, or `null` for an event this client
 * rebuilt from the stored result after live events were lost (or for a job that had already
 * finished when it was followed).
 */
export class StartedEvent {
  readonly type = "started" as const;
  constructor(
    readonly seq: number | null,
    /** The consumer name of the daemon running the job. */
    readonly worker: string,
    /** Which run of the job this is (1 for the first). */
    readonly attempt: number,
  ) {}
}

/** A chunk of the job's stdout or stderr (at most 64 KiB per live event). */
export class OutputEvent {
  constructor(
    readonly type: "stdout" | "stderr",
    readonly seq: number | null,
    readonly data: Buffer,
  ) {}

  /** `data` decoded as UTF-8 (a multi-byte character split across chunks shows as U+FFFD). */
  get text(): string {
    return utf8.decode(this.data);
  }
}

/** The last event of a job: its result is stored. */
export class ExitedEvent {
  readonly type = "exited" as const;
  constructor(
    readonly seq: number | null,
    readonly result: Result,
  ) {}
}

/** An event type this client does not know (a newer protocol version); it is never yielded. */
export class UnknownEvent {
  constructor(
    readonly type: string,
    readonly seq: number,
  ) {}
}

/** An event yielded by {@link Client.events}: `started`, `stdout`/`stderr`, then `exited`. */
export type JobEvent = StartedEvent | OutputEvent | ExitedEvent;

/** Decode one pub/sub message of `sandpool:out:<id>`; unknown fields are ignored. */
export function decodeEvent(data: Uint8Array): JobEvent | UnknownEvent {
  const m = unpackMap(data, "event");
  const type = asStr(get(m, "type"), "type");
  if (type === null) throw new ProtocolError("event has no 'type'");
  const seq = asInt(get(m, "seq"), "seq");
  if (seq === null) throw new ProtocolError("event has no 'seq'");
  switch (type) {
    case "started":
      return new StartedEvent(seq, asStr(get(m, "worker"), "worker") ?? "", asInt(get(m, "attempt"), "attempt") ?? 0);
    case "stdout":
    case "stderr":
      return new OutputEvent(type, seq, asBytes(get(m, "data"), "data"));
    case "exited": {
      const r = get(m, "result");
      if (!isPlainMap(r)) throw new ProtocolError("exited event has no result map");
      return new ExitedEvent(seq, Result.fromMap(r));
    }
    default:
      return new UnknownEvent(type, seq);
  }
}

// ------------------------------------------------------------------------------------------
// Decoding a job payload (what a daemon checks)
// ------------------------------------------------------------------------------------------

const MIB = 1 << 20;
/** The kernel's limit for one argument or one `NAME=value` string (section 3), without its NUL. */
const MAX_ARG_BYTES = 131071;

const strictDecoder = new Decoder({
  mapKeyConverter: (key: unknown) => (typeof key === "string" ? key : ODD_KEY),
});

// The same fields as the job map spells them (PROTOCOL.md section 3), plus the two only the wire has.
const WIRE_JOB_KEYS = new Set([
  "v",
  "queue",
  ...[...JOB_KEYS].map((k) => k.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase())),
]);

function utf8Length(s: string): number {
  return Buffer.byteLength(s, "utf8");
}

/**
 * Decode and check a job payload (the `job` field of a stream entry) the way PROTOCOL.md
 * sections 3 and 8 say a daemon does, and return it as a {@link Job}. Throws
 * {@link JobDecodeError} whose `code` is the error a daemon stores for these bytes: `bad_payload`
 * (not msgpack, not a map, trailing bytes), `bad_version`, `bad_field` or `too_large`. Checks
 * that depend on the daemon (its templates, `max_payload_bytes`, the entry's `id` field) and the
 * UTF-8 validity of strings are not made here.
 */
export function decodeJob(data: Uint8Array): Job & { id: string } {
  let obj: unknown;
  try {
    obj = strictDecoder.decode(data);
  } catch (e) {
    throw new JobDecodeError("bad_payload", `not msgpack: ${(e as Error).message}`);
  }
  if (!isPlainMap(obj)) throw new JobDecodeError("bad_payload", `not a map (got ${typeName(obj)})`);
  const m = obj;
  const v = get(m, "v");
  if (v === undefined) throw new JobDecodeError("bad_version", "no 'v'");
  if (typeof v !== "number" || !JOB_MAP_VERSIONS.includes(v)) {
    throw new JobDecodeError("bad_version", `unsupported version ${describe(v)}`);
  }
  const bad = (msg: string): never => {
    throw new JobDecodeError("bad_field", msg);
  };
  const tooLarge = (msg: string): never => {
    throw new JobDecodeError("too_large", msg);
  };
  for (const key of Object.keys(m)) {
    if (key === ODD_KEY) bad("a map key is not a string");
    if (!WIRE_JOB_KEYS.has(key)) bad(`unknown field ${JSON.stringify(key)}`);
  }
  const str = (key: string): string | undefined => {
    const x = get(m, key);
    if (x === undefined) return undefined;
    if (typeof x !== "string") return bad(`${key}: not a string`);
    if (x.includes("\0")) bad(`${key}: contains NUL`);
    return x;
  };
  const uint = (key: string): number | undefined => {
    const x = get(m, key);
    if (x === undefined) return undefined;
    if (typeof x !== "number" || !Number.isInteger(x) || x < 0) return bad(`${key}: not an unsigned integer`);
    return x;
  };
  const id = str("id");
  if (id === undefined) return bad("no 'id'");
  if (!validJobId(id)) bad("id: not 1..128 characters of [A-Za-z0-9._:-]");
  const job: Record<string, unknown> = { id };
  const argv = get(m, "argv");
  const shell = str("shell");
  const code = str("code");
  const runtime = str("runtime");
  const commands = [argv, shell, code].filter((x) => x !== undefined).length;
  if (commands !== 1) bad("exactly one of argv, shell and code is required");
  if (argv !== undefined) {
    if (!Array.isArray(argv)) return bad("argv: not an array");
    if (argv.length === 0) bad("argv: empty");
    if (argv.length > 4096) tooLarge(`argv: ${argv.length} elements (at most 4096)`);
    let total = 0;
    for (const a of argv) {
      if (typeof a !== "string") return bad("argv: an element is not a string");
      if (a.includes("\0")) bad("argv: an element contains NUL");
      const n = utf8Length(a);
      if (n > MAX_ARG_BYTES) tooLarge(`argv: an element of ${n} bytes (at most ${MAX_ARG_BYTES})`);
      total += n;
    }
    if (total > MIB) tooLarge("argv: over 1 MiB");
    job.argv = argv;
  }
  if (shell !== undefined) {
    if (utf8Length(shell) > MIB) tooLarge("shell: over 1 MiB");
    job.shell = shell;
  }
  if ((code === undefined) !== (runtime === undefined)) bad("code and runtime go together");
  if (code !== undefined) {
    if (utf8Length(code) > MIB) tooLarge("code: over 1 MiB");
    if (!(RUNTIMES as readonly string[]).includes(runtime ?? "")) bad(`runtime: unknown ${describe(runtime)}`);
    job.code = code;
    job.runtime = runtime;
  }
  const template = str("template");
  if (template !== undefined) {
    if (!TEMPLATE_RE.test(template)) bad("template: not 1..64 characters of [A-Za-z0-9._-]");
    job.template = template;
  }
  const env = get(m, "env");
  if (env !== undefined) {
    if (!isPlainMap(env)) return bad("env: not a map");
    const names = Object.keys(env);
    if (names.length > 1024) tooLarge(`env: ${names.length} entries (at most 1024)`);
    let total = 0;
    for (const k of names) {
      const val = env[k];
      if (k === ODD_KEY || !ENV_NAME_RE.test(k)) bad(`env: invalid name ${describe(k)}`);
      if (typeof val !== "string") return bad(`env: value of ${k} is not a string`);
      if (val.includes("\0")) bad(`env: value of ${k} contains NUL`);
      const n = utf8Length(k) + utf8Length(val);
      if (n + 1 > MAX_ARG_BYTES) tooLarge(`env: ${k}=... is ${n + 1} bytes (at most ${MAX_ARG_BYTES})`);
      total += n;
    }
    if (total > 256 * 1024) tooLarge("env: over 256 KiB");
    job.env = env;
  }
  const cwd = str("cwd");
  if (cwd !== undefined) {
    if (!cwd.startsWith("/")) bad("cwd: not an absolute path");
    if (utf8Length(cwd) > 4096) bad("cwd: over 4096 bytes");
    job.cwd = cwd;
  }
  const stdin = get(m, "stdin");
  if (stdin !== undefined) {
    const bytes = typeof stdin === "string" ? Buffer.from(stdin, "utf8") : stdin;
    if (!(bytes instanceof Uint8Array)) return bad("stdin: not bytes");
    if (bytes.byteLength > 16 * MIB) tooLarge("stdin: over 16 MiB");
    job.stdin = bytes;
  }
  const timeoutMs = uint("timeout_ms");
  if (timeoutMs !== undefined) {
    if (timeoutMs === 0) bad("timeout_ms: 0");
    job.timeoutMs = timeoutMs;
  }
  const maxOutputBytes = uint("max_output_bytes");
  if (maxOutputBytes !== undefined) job.maxOutputBytes = maxOutputBytes;
  const retries = uint("retries");
  if (retries !== undefined) {
    if (retries > 5) bad("retries: over 5");
    job.retries = retries;
  }
  // Limits are clamped by the daemon, but 0 is no limit a sandbox can run under (section 3).
  const positive = (key: string): number | undefined => {
    const x = uint(key);
    if (x === 0) bad(`${key}: 0`);
    return x;
  };
  const memoryBytes = positive("memory_bytes");
  if (memoryBytes !== undefined) job.memoryBytes = memoryBytes;
  const pids = positive("pids");
  if (pids !== undefined) job.pids = pids;
  const cpuTimeMs = positive("cpu_time_ms");
  if (cpuTimeMs !== undefined) job.cpuTimeMs = cpuTimeMs;
  if (get(m, "queue") !== undefined) str("queue");
  return job as unknown as Job & { id: string };
}
