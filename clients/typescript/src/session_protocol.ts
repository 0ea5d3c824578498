/**
 * Protocol v2 codecs (docs/PROTOCOL.md sections 12-19): request maps of session operations,
 * operation results, the values each operation returns, process output events, session and
 * snapshot records. Pure data and functions, no I/O.
 *
 * Contracts:
 * - {@link encodeRequest} writes `v, id, op, session` first, then the operation's fields in the
 *   order given, leaving out `undefined` ones. Integers take their smallest msgpack form, bigints
 *   are uint64 (or int64 when negative), {@link Float64} is always a msgpack float 64, strings are
 *   str and byte arrays bin.
 * - Decoders are tolerant like the v1 ones: str where bytes are expected (and bin where strings
 *   are), unknown fields ignored, uint64 values read exactly (`*_ns` fields stay bigints).
 * - {@link decodeAnyResult} accepts either result shape under an operation id: the operation
 *   result map (`ok`, `value`) and the job result map (`outcome`), because `exec`/`code` end with
 *   the latter and a request that cannot be decoded "ends like a rejected job" (section 13).
 */

import { Decoder, Encoder } from "@msgpack/msgpack";

import { InvalidArgumentError, ProtocolError } from "./errors.js";
import {
  asBool,
  asBytes,
  asInt,
  asStr,
  type ErrorInfo,
  type Fields,
  get,
  isPlainMap,
  ODD_KEY,
  RESULT_STORED,
  Result,
  typeName,
  utf8,
} from "./protocol.js";

/** The version written in every request map. */
export const SESSION_PROTOCOL_VERSION = 2;

/** Operations of PROTOCOL.md section 15 (and `snapshot_delete`, section 18). */
export const OPERATIONS = [
  "create",
  "info",
  "stop",
  "destroy",
  "snapshot",
  "exec",
  "code",
  "context_restart",
  "spawn",
  "ps",
  "output",
  "stdin",
  "kill",
  "write",
  "append",
  "read",
  "list",
  "stat",
  "exists",
  "mkdir",
  "remove",
  "copy",
  "rename",
  "expose",
  "unexpose",
  "ports",
  "snapshot_delete",
] as const;
export type Operation = (typeof OPERATIONS)[number];

/** Error codes of PROTOCOL.md section 19 (beyond section 8's) and whether each is retryable. */
export const SESSION_ERROR_CODES: Readonly<Record<string, boolean>> = Object.freeze({
  session_not_found: false,
  session_lost: false,
  session_stopped: false,
  session_busy: true,
  host_full: true,
  template_mismatch: false,
  not_found: false,
  exists: false,
  is_a_directory: false,
  not_a_directory: false,
  not_a_file: false,
  permission: false,
  no_space: false,
  conflict: false,
  process_exited: false,
  worker_lost: true,
  not_empty: false,
  unsupported: false,
});

/** Session states of PROTOCOL.md section 14. */
export const SESSION_STATES = [
  "creating",
  "running",
  "stopping",
  "stopped",
  "destroying",
  "destroyed",
  "lost",
  "error",
] as const;
/** A known session state, or a string a newer daemon may write. */
export type SessionState = (typeof SESSION_STATES)[number] | (string & {});

// ------------------------------------------------------------------------------------------
// Encoding requests
// ------------------------------------------------------------------------------------------

/** A number sent as a msgpack float 64 even when it is integral (`limits.cpus`). */
export class Float64 {
  constructor(readonly value: number) {}
}

/** A value of a request map. Maps are plain objects (key order kept) or `Map`s. */
export type Wire =
  | string
  | number
  | bigint
  | boolean
  | null
  | Uint8Array
  | Float64
  | readonly Wire[]
  | { readonly [key: string]: Wire | undefined }
  | ReadonlyMap<string, Wire>;

const leafEncoder = new Encoder({ useBigInt64: true });

function header(small: number, tag16: number, n: number): Buffer {
  if (n < 16) return Buffer.from([small | n]);
  const b = Buffer.alloc(n < 0x10000 ? 3 : 5);
  if (n < 0x10000) {
    b[0] = tag16;
    b.writeUInt16BE(n, 1);
  } else {
    b[0] = tag16 + 1;
    b.writeUInt32BE(n, 1);
  }
  return b;
}

function encodeWire(v: Wire, out: Buffer[]): void {
  if (v instanceof Float64) {
    const b = Buffer.alloc(9);
    b[0] = 0xcb;
    b.writeDoubleBE(v.value, 1);
    out.push(b);
  } else if (v instanceof Uint8Array || v === null || typeof v !== "object") {
    if (typeof v === "number" && Number.isInteger(v) && Math.abs(v) >= 2 ** 32) {
      // With useBigInt64 the encoder would write a float here; integers stay integers.
      v = BigInt(v);
    }
    const u = leafEncoder.encode(v);
    out.push(Buffer.from(u.buffer, u.byteOffset, u.byteLength));
  } else if (Array.isArray(v)) {
    const items = v as readonly Wire[];
    out.push(header(0x90, 0xdc, items.length));
    for (const item of items) encodeWire(item, out);
  } else {
    const entries: [string, Wire][] = [];
    const source = v instanceof Map ? [...(v as ReadonlyMap<string, Wire>).entries()] : Object.entries(v);
    for (const [k, val] of source) if (val !== undefined) entries.push([k, val as Wire]);
    out.push(header(0x80, 0xde, entries.length));
    for (const [k, val] of entries) {
      encodeWire(k, out);
      encodeWire(val, out);
    }
  }
}

/** msgpack-encode one value with the rules above. */
export function encodeWireValue(v: Wire): Buffer {
  const out: Buffer[] = [];
  encodeWire(v, out);
  return Buffer.concat(out);
}

/**
 * The request map of PROTOCOL.md section 13: `{v: 2, id, op, session, ...fields}`, fields in the
 * order given, `undefined` ones left out.
 */
export function encodeRequest(
  opId: string,
  op: Operation,
  session: string,
  fields: { readonly [key: string]: Wire | undefined } = {},
): Buffer {
  return encodeWireValue({ v: SESSION_PROTOCOL_VERSION, id: opId, op, session, ...fields });
}

// ------------------------------------------------------------------------------------------
// Decoding
// ------------------------------------------------------------------------------------------

// str values come back as raw bytes (rawStrings), so bytes fields accept str; uint64/int64
// values as bigints, so nanosecond times keep every digit.
const v2Decoder = new Decoder({
  rawStrings: true,
  useBigInt64: true,
  mapKeyConverter: (key: unknown) => (typeof key === "string" || typeof key === "number" ? key : ODD_KEY),
});

// Free-form maps of a record (`options`): strings as strings.
const plainDecoder = new Decoder({
  useBigInt64: true,
  mapKeyConverter: (key: unknown) => (typeof key === "string" || typeof key === "number" ? key : ODD_KEY),
});

/** Decode a msgpack map of the daemon (a result, an event, a record field). */
export function unpackV2Map(data: Uint8Array, what: string): Fields {
  let obj: unknown;
  try {
    obj = v2Decoder.decode(data);
  } catch (e) {
    throw new ProtocolError(`${what} is not valid msgpack: ${(e as Error).message}`);
  }
  if (!isPlainMap(obj)) throw new ProtocolError(`${what} is not a msgpack map (got ${typeName(obj)})`);
  return obj;
}

/** A number (int, bigint within the safe range, or float); `null` for nil or absent. */
export function asNumber(v: unknown, field: string): number | null {
  if (v === undefined || v === null) return null;
  if (typeof v === "number") return v;
  if (typeof v === "bigint") return Number(v);
  throw new ProtocolError(`field ${JSON.stringify(field)} must be a number, got ${typeName(v)}`);
}

/** An integer as a bigint (exact for uint64); `null` for nil or absent. */
export function asBigInt(v: unknown, field: string): bigint | null {
  if (v === undefined || v === null) return null;
  if (typeof v === "bigint") return v;
  if (typeof v === "number" && Number.isInteger(v)) return BigInt(v);
  throw new ProtocolError(`field ${JSON.stringify(field)} must be an integer, got ${typeName(v)}`);
}

/** A map of string to string (labels). */
export function asStringMap(v: unknown, field: string): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (!isPlainMap(v)) throw new ProtocolError(`field ${JSON.stringify(field)} must be a map, got ${typeName(v)}`);
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) out[k] = asStr(val, `${field}.${k}`) ?? "";
  return out;
}

function asMap(v: unknown, field: string): Fields | null {
  if (v === undefined || v === null) return null;
  if (!isPlainMap(v)) throw new ProtocolError(`field ${JSON.stringify(field)} must be a map, got ${typeName(v)}`);
  return v;
}

function asList(v: unknown, field: string): unknown[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw new ProtocolError(`field ${JSON.stringify(field)} must be an array, got ${typeName(v)}`);
  return v;
}

function errorInfo(v: unknown, field: string): ErrorInfo | null {
  const m = asMap(v, field);
  if (m === null) return null;
  const code = asStr(get(m, "code"), `${field}.code`) ?? "";
  const known = SESSION_ERROR_CODES[code];
  return Object.freeze({
    code,
    message: asStr(get(m, "message"), `${field}.message`) ?? "",
    retryable: get(m, "retryable") === undefined && known !== undefined ? known : asBool(get(m, "retryable"), `${field}.retryable`),
  });
}

/**
 * The operation result map of PROTOCOL.md section 13. `value` is the operation's own map (read
 * it with the typed decoders below); `error` is set when `ok` is false.
 */
export class OpResult {
  constructor(
    readonly v: number,
    readonly id: string,
    readonly op: string,
    readonly session: string,
    readonly ok: boolean,
    readonly error: ErrorInfo | null,
    readonly value: Fields | null,
  ) {}

  /** Build an OpResult from a decoded map; unknown fields are ignored. */
  static fromMap(m: Fields): OpResult {
    const ok = asBool(get(m, "ok"), "ok");
    const error = errorInfo(get(m, "error"), "error");
    return new OpResult(
      asInt(get(m, "v"), "v") ?? SESSION_PROTOCOL_VERSION,
      asStr(get(m, "id"), "id") ?? "",
      asStr(get(m, "op"), "op") ?? "",
      asStr(get(m, "session"), "session") ?? "",
      ok,
      ok ? null : (error ?? { code: "internal", message: "the operation failed without an error map", retryable: true }),
      asMap(get(m, "value"), "value"),
    );
  }

  /**
   * An operation that was rejected as a job (a job result map with outcome `error`, section 13)
   * read as a failed OpResult.
   */
  static fromJobResult(r: Result, op: string, session: string): OpResult {
    const error = r.error ?? { code: "internal", message: `the operation ended with outcome ${r.outcome}`, retryable: true };
    return new OpResult(r.v, r.id, op, session, false, error, null);
  }
}

/** Either result shape stored under an operation id (see the module comment). */
export function decodeAnyResult(m: Fields): OpResult | Result {
  if (Object.hasOwn(m, "outcome") && !Object.hasOwn(m, "ok")) return Result.fromMap(m);
  return OpResult.fromMap(m);
}

/** The result key of an operation. */
export function decodeStoredResult(raw: Uint8Array): OpResult | Result {
  return decodeAnyResult(unpackV2Map(raw, "result"));
}

/**
 * A message on `sandpool:out:<op id>` of a non-streaming operation: its result if it is the
 * `exited` event (section 16), {@link RESULT_STORED} if that event names a result too large to
 * carry (read the result key), `null` for any other event type.
 */
export function decodeOpEvent(data: Uint8Array): OpResult | Result | typeof RESULT_STORED | null {
  const m = unpackV2Map(data, "event");
  const type = asStr(get(m, "type"), "type");
  if (type === null) throw new ProtocolError("event has no 'type'");
  if (type !== "exited") return null;
  if (get(m, "result") === undefined && asInt(get(m, "result_bytes"), "result_bytes") !== null) return RESULT_STORED;
  const r = asMap(get(m, "result"), "result");
  if (r === null) throw new ProtocolError("exited event has no result map");
  return decodeAnyResult(r);
}

// ------------------------------------------------------------------------------------------
// Values of operations
// ------------------------------------------------------------------------------------------

/** The session info of `create`, `info` and `stop` (PROTOCOL.md section 15). */
export class SessionInfo {
  /** The session id. */
  readonly session: string;
  readonly state: SessionState;
  readonly template: string;
  /** When it was created (ms since the epoch). */
  readonly createdMs: number;
  /** When an operation last reached it. */
  readonly lastUsedMs: number;
  /** When it stops (or is destroyed, if ephemeral) on its own if unused; 0 for never. */
  readonly timeoutAtMs: number;
  readonly labels: Readonly<Record<string, string>>;
  readonly ephemeral: boolean;
  /** Memory used now (bytes); `null` when the daemon sent none (a stopped session). */
  readonly memoryBytes: number | null;
  readonly memoryLimitBytes: number | null;
  /** CPU time used so far in this run (microseconds). */
  readonly cpuTimeUs: number | null;
  /** CPU quota in CPUs. */
  readonly cpus: number | null;
  /** Disk used (bytes). */
  readonly diskBytes: number | null;
  readonly diskLimitBytes: number | null;
  /** Background processes running. */
  readonly processes: number | null;
  /** The daemon (host) that holds it. */
  readonly host: string;
  /** Every field of the map as decoded (for fields newer than this client). */
  readonly fields: Readonly<Fields>;

  constructor(m: Fields) {
    this.fields = m;
    this.session = asStr(get(m, "session"), "session") ?? "";
    this.state = asStr(get(m, "state"), "state") ?? "";
    this.template = asStr(get(m, "template"), "template") ?? "";
    this.createdMs = asNumber(get(m, "created_ms"), "created_ms") ?? 0;
    this.lastUsedMs = asNumber(get(m, "last_used_ms"), "last_used_ms") ?? 0;
    this.timeoutAtMs = asNumber(get(m, "timeout_at_ms"), "timeout_at_ms") ?? 0;
    this.labels = Object.freeze(asStringMap(get(m, "labels"), "labels"));
    this.ephemeral = asBool(get(m, "ephemeral"), "ephemeral");
    this.memoryBytes = asNumber(get(m, "memory_bytes"), "memory_bytes");
    this.memoryLimitBytes = asNumber(get(m, "memory_limit_bytes"), "memory_limit_bytes");
    this.cpuTimeUs = asNumber(get(m, "cpu_time_us"), "cpu_time_us");
    this.cpus = asNumber(get(m, "cpus"), "cpus");
    this.diskBytes = asNumber(get(m, "disk_bytes"), "disk_bytes");
    this.diskLimitBytes = asNumber(get(m, "disk_limit_bytes"), "disk_limit_bytes");
    this.processes = asNumber(get(m, "processes"), "processes");
    this.host = asStr(get(m, "host"), "host") ?? "";
  }
}

/** `sandpool:session:<sid>` (section 14), as read by {@link decodeSessionRecord}. */
export class SessionRecord {
  constructor(
    readonly id: string,
    readonly state: SessionState,
    readonly template: string,
    readonly consumer: string,
    readonly createdMs: number,
    readonly lastUsedMs: number,
    readonly idleTimeoutMs: number,
    readonly maxLifetimeMs: number,
    readonly timeoutAtMs: number,
    readonly ephemeral: boolean,
    readonly labels: Readonly<Record<string, string>>,
    /** The create request's options as given (`env`, `limits`, ...). */
    readonly options: Readonly<Fields>,
    readonly error: string | null,
    /** Every field of the hash (msgpack fields undecoded). */
    readonly fields: Readonly<Record<string, Buffer>>,
  ) {}
}

function numField(h: Record<string, Buffer>, key: string): number {
  const v = h[key];
  if (v === undefined) return 0;
  const n = Number(v.toString("utf8"));
  return Number.isFinite(n) ? n : 0;
}

/** Decode the fields of a session hash (HGETALL as Buffers); `null` for an empty hash. */
export function decodeSessionRecord(id: string, h: Record<string, Buffer>): SessionRecord | null {
  if (Object.keys(h).length === 0) return null;
  const text = (key: string): string | null => (h[key] === undefined ? null : h[key].toString("utf8"));
  const msgpackMap = (key: string): Fields => {
    const raw = h[key];
    if (raw === undefined || raw.length === 0) return {};
    try {
      const m = plainDecoder.decode(raw);
      return isPlainMap(m) ? m : {};
    } catch {
      return {};
    }
  };
  let labels: Record<string, string> = {};
  try {
    labels = asStringMap(msgpackMap("labels"), "labels");
  } catch {
    labels = {};
  }
  return new SessionRecord(
    id,
    text("state") ?? "",
    text("template") ?? "",
    text("consumer") ?? "",
    numField(h, "created_ms"),
    numField(h, "last_used_ms"),
    numField(h, "idle_timeout_ms"),
    numField(h, "max_lifetime_ms"),
    numField(h, "timeout_at_ms"),
    text("ephemeral") === "1",
    Object.freeze(labels),
    Object.freeze(msgpackMap("options")),
    text("error"),
    Object.freeze({ ...h }),
  );
}

/** `sandpool:snapshot:<name>` (section 18), without the archive. */
export class SnapshotRecord {
  constructor(
    readonly name: string,
    readonly base: string,
    readonly host: string,
    readonly createdMs: number,
    readonly bytes: number,
    readonly sha256: string,
  ) {}
}

/** Decode a snapshot hash (HGETALL as Buffers); `null` for an empty hash. */
export function decodeSnapshotRecord(name: string, h: Record<string, Buffer>): SnapshotRecord | null {
  if (Object.keys(h).length === 0) return null;
  const text = (key: string): string => h[key]?.toString("utf8") ?? "";
  return new SnapshotRecord(text("name") || name, text("base"), text("host"), numField(h, "created_ms"), numField(h, "bytes"), text("sha256"));
}

/** The value of `snapshot`: `{name, template, bytes}`. */
export interface SnapshotInfo {
  readonly name: string;
  readonly template: string;
  readonly bytes: number;
}

export function decodeSnapshotInfo(v: Fields): SnapshotInfo {
  return Object.freeze({
    name: asStr(get(v, "name"), "name") ?? "",
    template: asStr(get(v, "template"), "template") ?? "",
    bytes: asNumber(get(v, "bytes"), "bytes") ?? 0,
  });
}

/**
 * An exposed port (PROTOCOL.md section 15, "Ports"): the value of `expose` and each entry of
 * `ports`. `url` is `<base>/<token>/`; a request to it reaches `127.0.0.1:<port>` in the session.
 */
export interface PortEntry {
  readonly port: number;
  /** `http` (the only protocol so far). */
  readonly protocol: string;
  /** The preview URL (a bearer token: anyone who has it can use it). */
  readonly url: string;
  /** A port of the host serving it directly: always `null` for now (not served yet). */
  readonly hostPort: number | null;
  readonly createdMs: number;
}

export function decodePortEntry(v: Fields): PortEntry {
  return Object.freeze({
    port: asNumber(get(v, "port"), "port") ?? 0,
    protocol: asStr(get(v, "protocol"), "protocol") ?? "",
    url: asStr(get(v, "url"), "url") ?? "",
    hostPort: asNumber(get(v, "host_port"), "host_port"),
    createdMs: asNumber(get(v, "created_ms"), "created_ms") ?? 0,
  });
}

/** The value of `ports`: `{ports: [entry...]}`, by port. */
export function decodePorts(v: Fields): PortEntry[] {
  return asList(get(v, "ports"), "ports").map((p, i) => decodePortEntry(asMap(p, `ports[${i}]`) ?? {}));
}

/** One entry of `ps`. */
export interface ProcessInfo {
  readonly pid: string;
  readonly command: string;
  /** `running` or `exited`. */
  readonly state: string;
  readonly exitCode: number | null;
  readonly signal: number | null;
  readonly startedMs: number;
  readonly endedMs: number | null;
}

export function decodeProcessList(v: Fields): ProcessInfo[] {
  return asList(get(v, "processes"), "processes").map((p, i) => {
    const m = asMap(p, `processes[${i}]`) ?? {};
    return Object.freeze({
      pid: asStr(get(m, "pid"), "pid") ?? "",
      command: asStr(get(m, "command"), "command") ?? "",
      state: asStr(get(m, "state"), "state") ?? "",
      exitCode: asInt(get(m, "exit_code"), "exit_code"),
      signal: asInt(get(m, "signal"), "signal"),
      startedMs: asNumber(get(m, "started_ms"), "started_ms") ?? 0,
      endedMs: asNumber(get(m, "ended_ms"), "ended_ms"),
    });
  });
}

/** The value of `output`: the durable view of a background process's output. */
export interface ProcessOutput {
  readonly stdout: Buffer;
  readonly stderr: Buffer;
  /** More was written than the daemon keeps (the last 1 MiB of each stream). */
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
  readonly running: boolean;
  readonly exitCode: number | null;
  readonly signal: number | null;
}

export function decodeProcessOutput(v: Fields): ProcessOutput {
  return Object.freeze({
    stdout: asBytes(get(v, "stdout"), "stdout"),
    stderr: asBytes(get(v, "stderr"), "stderr"),
    stdoutTruncated: asBool(get(v, "stdout_truncated"), "stdout_truncated"),
    stderrTruncated: asBool(get(v, "stderr_truncated"), "stderr_truncated"),
    running: asBool(get(v, "running"), "running"),
    exitCode: asInt(get(v, "exit_code"), "exit_code"),
    signal: asInt(get(v, "signal"), "signal"),
  });
}

/** A file as `write` and `append` report it. */
export interface WrittenFile {
  readonly path: string;
  readonly size: number;
  readonly mtimeNs: bigint;
}

export function decodeWrittenFiles(v: Fields): WrittenFile[] {
  return asList(get(v, "files"), "files").map((f, i) => {
    const m = asMap(f, `files[${i}]`) ?? {};
    return Object.freeze({
      path: asStr(get(m, "path"), "path") ?? "",
      size: asNumber(get(m, "size"), "size") ?? 0,
      mtimeNs: asBigInt(get(m, "mtime_ns"), "mtime_ns") ?? 0n,
    });
  });
}

/** The value of `read`. */
export interface ReadResult {
  readonly data: Buffer;
  /** The whole file's size. */
  readonly size: number;
  readonly mtimeNs: bigint;
}

export function decodeReadResult(v: Fields): ReadResult {
  return Object.freeze({
    data: asBytes(get(v, "data"), "data"),
    size: asNumber(get(v, "size"), "size") ?? 0,
    mtimeNs: asBigInt(get(v, "mtime_ns"), "mtime_ns") ?? 0n,
  });
}

/** File types of `stat`, `list` and `exists`. */
export type FileType = "file" | "dir" | "link" | "fifo" | "socket" | "char" | "block" | (string & {});

/** One entry of `list`. */
export interface ListEntry {
  readonly path: string;
  readonly name: string;
  readonly type: FileType;
  readonly size: number;
  readonly mode: number;
  readonly mtimeNs: bigint;
  /** The link's target, for links. */
  readonly target: string | null;
}

export interface ListResult {
  readonly entries: ListEntry[];
  /** More entries than `limit` exist. */
  readonly truncated: boolean;
}

export function decodeListResult(v: Fields): ListResult {
  const entries = asList(get(v, "entries"), "entries").map((e, i) => {
    const m = asMap(e, `entries[${i}]`) ?? {};
    return Object.freeze({
      path: asStr(get(m, "path"), "path") ?? "",
      name: asStr(get(m, "name"), "name") ?? "",
      type: asStr(get(m, "type"), "type") ?? "",
      size: asNumber(get(m, "size"), "size") ?? 0,
      mode: asNumber(get(m, "mode"), "mode") ?? 0,
      mtimeNs: asBigInt(get(m, "mtime_ns"), "mtime_ns") ?? 0n,
      target: asStr(get(m, "target"), "target"),
    });
  });
  return Object.freeze({ entries, truncated: asBool(get(v, "truncated"), "truncated") });
}

/** The value of `stat`. */
export interface StatResult {
  readonly path: string;
  readonly type: FileType;
  readonly size: number;
  readonly mode: number;
  readonly mtimeNs: bigint;
  readonly atimeNs: bigint;
  readonly ctimeNs: bigint;
  readonly target: string | null;
  readonly uid: number;
  readonly gid: number;
}

export function decodeStatResult(v: Fields): StatResult {
  return Object.freeze({
    path: asStr(get(v, "path"), "path") ?? "",
    type: asStr(get(v, "type"), "type") ?? "",
    size: asNumber(get(v, "size"), "size") ?? 0,
    mode: asNumber(get(v, "mode"), "mode") ?? 0,
    mtimeNs: asBigInt(get(v, "mtime_ns"), "mtime_ns") ?? 0n,
    atimeNs: asBigInt(get(v, "atime_ns"), "atime_ns") ?? 0n,
    ctimeNs: asBigInt(get(v, "ctime_ns"), "ctime_ns") ?? 0n,
    target: asStr(get(v, "target"), "target"),
    uid: asNumber(get(v, "uid"), "uid") ?? 0,
    gid: asNumber(get(v, "gid"), "gid") ?? 0,
  });
}

/** The value of `exists`. */
export interface ExistsResult {
  readonly exists: boolean;
  readonly type: FileType | null;
}

export function decodeExistsResult(v: Fields): ExistsResult {
  return Object.freeze({ exists: asBool(get(v, "exists"), "exists"), type: asStr(get(v, "type"), "type") });
}

// ------------------------------------------------------------------------------------------
// Background process events (`sandpool:pout:<sid>:<pid>`, section 15)
// ------------------------------------------------------------------------------------------

/** A chunk of a background process's output. */
export class ProcessOutputEvent {
  constructor(
    readonly type: "stdout" | "stderr",
    readonly seq: number,
    readonly data: Buffer,
  ) {}

  get text(): string {
    return utf8.decode(this.data);
  }
}

/** The last event of a background process. */
export class ProcessExitedEvent {
  readonly type = "exited" as const;
  constructor(
    readonly seq: number,
    readonly exitCode: number | null,
    readonly signal: number | null,
  ) {}
}

/** An event type this client does not know (skipped, but its `seq` still counts). */
export class UnknownProcessEvent {
  constructor(
    readonly type: string,
    readonly seq: number,
  ) {}
}

export type ProcessEvent = ProcessOutputEvent | ProcessExitedEvent;

/** Decode one message of `sandpool:pout:<sid>:<pid>`. */
export function decodeProcessEvent(data: Uint8Array): ProcessEvent | UnknownProcessEvent {
  const m = unpackV2Map(data, "process event");
  const type = asStr(get(m, "type"), "type");
  if (type === null) throw new ProtocolError("process event has no 'type'");
  const seq = asInt(get(m, "seq"), "seq");
  if (seq === null) throw new ProtocolError("process event has no 'seq'");
  switch (type) {
    case "stdout":
    case "stderr":
      return new ProcessOutputEvent(type, seq, asBytes(get(m, "data"), "data"));
    case "exited":
      return new ProcessExitedEvent(seq, asInt(get(m, "exit_code"), "exit_code"), asInt(get(m, "signal"), "signal"));
    default:
      return new UnknownProcessEvent(type, seq);
  }
}

// ------------------------------------------------------------------------------------------
// Checks shared by the operations
// ------------------------------------------------------------------------------------------

/** A boolean option, or `undefined`. */
export function optBool(name: string, v: unknown): boolean | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "boolean") throw new InvalidArgumentError(`${name} must be a boolean, not ${typeName(v)}`);
  return v;
}
