/**
 * Sessions (PROTOCOL.md sections 12-19): long-lived sandboxes bound to a client-chosen id, driven
 * by operations sent to the daemon that holds them.
 *
 * Longer than 800 lines on purpose: one method per operation of PROTOCOL.md 15 (44 of them), each
 * a few lines over the shared sending path; the encodings (session_protocol.ts), options
 * (session_options.ts) and process handles (process.ts) already live elsewhere.
 *
 * A {@link Session} is a name plus the client's connections: it holds no connection of its own
 * and no state a reconnecting client would need (every operation looks the session's daemon up
 * in its record, `sandpool:session:<sid>`, then sends to that daemon's stream). Each operation
 * gets a random op id; its result is the `exited` event on `sandpool:out:<op id>` or, when that
 * is lost or late, the durable `sandpool:result:<op id>` (read by the client's poller), exactly
 * as for jobs. An op id runs once however often it is sent, so retries after a Redis restart are
 * safe.
 *
 * Errors: an operation that fails rejects with a {@link SessionError} subclass for its protocol
 * code (`NotFoundError` for `not_found`, ...). `exec` and `code` resolve with the job
 * {@link Result} like jobs do (a command that fails, times out or is cancelled is a result), except
 * that errors about the session itself (`session_not_found`, `session_lost`, `session_stopped`,
 * `session_busy`, `host_full`, `template_mismatch`) reject, since the command never ran.
 *
 * Over 800 lines because {@link Session} is one class with a method per operation of section 15
 * (routing, commands, files, processes, ports, snapshots); what it takes is in
 * session_options.ts, its process handles in process.ts.
 */

import { randomBytes } from "node:crypto";

import type { Connections } from "./connection.js";
import { InvalidArgumentError, SandpoolError, SessionError, SessionNotFoundError, sessionError } from "./errors.js";
import type { JobEvent } from "./protocol.js";
import {
  asStr,
  checkAbsolutePath,
  checkEnv,
  checkTemplateName,
  RUNTIMES,
  Result,
  toBytes,
  typeName,
  type BytesInput,
  type Fields,
  type RESULT_STORED,
} from "./protocol.js";
import { ProcessHub, SessionProcess } from "./process.js";
import type { ProcessOutputOptions, ProcessSession } from "./process_session.js";
import type { Keys } from "./keys.js";
import type {
  CodeOptions,
  CreateSessionOptions,
  ExecCommand,
  ExecOptions,
  ExecRunOptions,
  ExposeOptions,
  FileOptions,
  FileSpec,
  OperationOptions,
  SpawnCommand,
  SpawnOptions,
} from "./session_options.js";
import {
  asBigInt,
  asNumber,
  decodeExistsResult,
  decodeListResult,
  decodeOpEvent,
  decodePortEntry,
  decodePorts,
  decodeProcessList,
  decodeProcessOutput,
  decodeReadResult,
  decodeSessionRecord,
  decodeSnapshotInfo,
  decodeStatResult,
  decodeStoredResult,
  decodeWrittenFiles,
  encodeRequest,
  Float64,
  OpResult,
  optBool,
  SessionInfo,
  SessionRecord,
  type ExistsResult,
  type ListResult,
  type Operation,
  type PortEntry,
  type ProcessInfo,
  type ProcessOutput,
  type ReadResult,
  type SnapshotInfo,
  type StatResult,
  type Wire,
  type WrittenFile,
} from "./session_protocol.js";

/** Error codes of an `exec`/`code` result that mean the command never ran in the session. */
export const SESSION_LEVEL_CODES: ReadonlySet<string> = new Set([
  "session_not_found",
  "session_lost",
  "session_stopped",
  "session_busy",
  "host_full",
  "template_mismatch",
]);

/** Largest file data per `write`/`read` call (PROTOCOL.md section 15). */
export const MAX_FILE_CALL_BYTES = 16 << 20;

/** Runtimes of the `code` operation (code contexts). */
export const CONTEXT_RUNTIMES = ["python", "node"] as const;
export type ContextRuntime = (typeof CONTEXT_RUNTIMES)[number];

/** Options of the follow machinery a session borrows from its client. @internal */
export interface FollowOptions {
  signal?: AbortSignal | undefined;
  waitTimeoutMs?: number | undefined;
}

/** The events of an `exec` or `code` operation, as an async iterator; `id` is the op id. */
export interface OperationEventStream extends AsyncIterableIterator<JobEvent> {
  readonly id: string;
}

/** What a {@link Session} uses of its client: connections, keys, following. @internal */
export interface SessionBackend {
  readonly conns: Connections;
  readonly keys: Keys;
  readonly queue: string;
  /** Default wait for an operation's result (not `exec`/`code`, which wait for the command). */
  readonly opTimeoutMs: number;
  readonly processes: ProcessHub;
  checkOpen(): void;
  /** A new operation id (the client's own: its events need no SUBSCRIBE of their own). */
  newId(): string;
  /** Follow job events of `id`, sending it with `submit` once subscribed. */
  events(id: string, submit: () => Promise<void>, options: FollowOptions): OperationEventStream;
  /** Wait for the single result of `id`, sending it with `submit` once subscribed. */
  awaitResult<T>(
    id: string,
    submit: () => Promise<void>,
    decodeEvent: (data: Buffer) => T | typeof RESULT_STORED | null,
    decodeStored: (raw: Buffer) => T,
    options: FollowOptions,
  ): Promise<T>;
}

/** A random 128-bit operation id as 32 lowercase hex digits. */
export function newOpId(): string {
  return randomBytes(16).toString("hex");
}

const SESSION_ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;

/** Throws {@link InvalidArgumentError} unless `id` is a valid session id; returns it. */
export function checkSessionId(id: unknown): string {
  if (typeof id !== "string" || !SESSION_ID_RE.test(id)) {
    throw new InvalidArgumentError(
      `invalid session id ${typeof id === "string" ? JSON.stringify(id) : typeName(id)}: need 1..128 characters of [A-Za-z0-9._:-]`,
    );
  }
  return id;
}

function uint(name: string, v: unknown, minimum = 0): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < minimum) {
    throw new InvalidArgumentError(`${name} must be an integer >= ${minimum} (got ${String(v)})`);
  }
  return v;
}

function text(name: string, v: unknown): string {
  if (typeof v !== "string") throw new InvalidArgumentError(`${name} must be a string, not ${typeName(v)}`);
  if (v.includes("\0")) throw new InvalidArgumentError(`${name} must not contain NUL characters`);
  return v;
}

function labelsMap(v: unknown): Record<string, string> | undefined {
  if (v === undefined) return undefined;
  const out: Record<string, string> = {};
  const entries = v instanceof Map ? [...v.entries()] : v !== null && typeof v === "object" ? Object.entries(v) : null;
  if (entries === null) throw new InvalidArgumentError(`labels must be an object or a Map of string to string, not ${typeName(v)}`);
  for (const [k, val] of entries) out[text("label name", k)] = text(`labels[${JSON.stringify(k)}]`, val);
  return out;
}

// ------------------------------------------------------------------------------------------
// Session
// ------------------------------------------------------------------------------------------

/**
 * One session, by id. Get it from `client.session(id)` (no I/O) or `client.createSession(id)`.
 * Safe to use from many concurrent calls; holds no connection of its own.
 */
export class Session implements ProcessSession {
  readonly id: string;
  /** The info of the last `create`, `connect`, `info` or `stop` of this object. */
  lastInfo: SessionInfo | null = null;
  private readonly backend: SessionBackend;
  /**
   * The holder last read from the session's record. `exec`, `code` and the other operations
   * (not `create`, nor the streams of `execStream`/`codeStream`) are sent there without reading
   * the record again: one round trip less each. A session changes holder only when its host died
   * or it was destroyed and made again; an operation sent to the old holder is answered
   * `session_not_found` without running, and is then sent once more, under a new id, to the
   * holder the record names by then.
   */
  private holderCache: string | null = null;

  /** @internal Use `client.session(id)`. */
  constructor(backend: SessionBackend, id: string) {
    this.backend = backend;
    this.id = checkSessionId(id);
  }

  toString(): string {
    return `Session(${this.id})`;
  }

  // -- sending -----------------------------------------------------------------------------

  /** The daemon holding the session (`consumer` of its record), or `null` without a record. */
  async holder(): Promise<string | null> {
    this.backend.checkOpen();
    const key = this.backend.keys.session(this.id);
    const c = await this.backend.conns.call(`HGET ${key}`, (r) => r.hget(key, "consumer"));
    this.holderCache = c === null || c === "" ? null : c;
    return this.holderCache;
  }

  /** The stream of the cached holder for `op`, or null when `op` must read the record. */
  private cachedRoute(op: Operation): string | null {
    if (op === "create" || this.holderCache === null) return null;
    return this.backend.keys.sessionRequests(this.backend.queue, this.holderCache);
  }

  /**
   * After `session_not_found` for an operation sent to `cached`: whether the record now names
   * another holder (then it was the wrong daemon, which ran nothing: send it again).
   */
  private async movedFrom(cached: string | null, code: string | undefined): Promise<boolean> {
    if (code === "session_lost") this.holderCache = null;
    if (cached === null || code !== "session_not_found") return false;
    const now = await this.holder();
    return now !== null && this.backend.keys.sessionRequests(this.backend.queue, now) !== cached;
  }

  /** The request stream for `op` (PROTOCOL.md section 13, step 2). */
  private async route(op: Operation): Promise<string> {
    const consumer = await this.holder();
    const keys = this.backend.keys;
    if (consumer !== null) return keys.sessionRequests(this.backend.queue, consumer);
    if (op === "create") return keys.sessionRequests(this.backend.queue);
    throw new SessionNotFoundError("session_not_found", "the session has no record", false, { op, sessionId: this.id });
  }

  private async xadd(stream: string, opId: string, payload: Buffer): Promise<void> {
    await this.backend.conns.call(`XADD ${stream} op ${opId}`, (r) =>
      r.xadd(stream, "*", "id", opId, "req", payload),
    );
  }

  /** @internal Send an operation to `stream` (or the session's) and return its value map. */
  async send(
    op: Operation,
    fields: { readonly [key: string]: Wire | undefined },
    opts: { waitTimeoutMs?: number | undefined; signal?: AbortSignal | undefined; stream?: string; session?: string } = {},
    resent = false,
  ): Promise<Fields> {
    this.backend.checkOpen();
    const session = opts.session ?? this.id;
    const opId = this.backend.newId();
    const payload = encodeRequest(opId, op, session, fields);
    const cached = opts.stream === undefined && session === this.id && !resent ? this.cachedRoute(op) : null;
    // As in streamOp: the route is looked up while the channel is being subscribed.
    const route = opts.stream !== undefined ? Promise.resolve(opts.stream) : cached !== null ? Promise.resolve(cached) : this.route(op);
    route.catch(() => undefined);
    const r = await this.backend.awaitResult<OpResult | Result>(
      opId,
      async () => this.xadd(await route, opId, payload),
      (data) => decodeOpEvent(data),
      (raw) => decodeStoredResult(raw),
      { waitTimeoutMs: opts.waitTimeoutMs ?? this.backend.opTimeoutMs, signal: opts.signal },
    );
    const res = r instanceof Result ? OpResult.fromJobResult(r, op, session) : r;
    if (!res.ok) {
      if (await this.movedFrom(cached, res.error?.code)) return this.send(op, fields, opts, true);
      throw sessionError(res.error ?? { code: "internal", message: "", retryable: true }, {
        op,
        sessionId: session,
        opId,
      });
    }
    return res.value ?? {};
  }

  // -- life cycle --------------------------------------------------------------------------

  /**
   * Create the session, or connect to it (PROTOCOL.md section 15, `create`): a running session is
   * returned as it is (its options unchanged), a stopped or failed one is resumed with its files
   * (`template` must match), a lost one rejects with `SessionLostError`.
   */
  async create(options: CreateSessionOptions = {}): Promise<SessionInfo> {
    const o = options;
    const limits = o.limits;
    let limitsMap: { [key: string]: Wire | undefined } | undefined;
    if (limits !== undefined) {
      if (limits === null || typeof limits !== "object") throw new InvalidArgumentError("limits must be an object");
      let cpus: Float64 | undefined;
      if (limits.cpus !== undefined) {
        if (typeof limits.cpus !== "number" || !Number.isFinite(limits.cpus) || limits.cpus <= 0) {
          throw new InvalidArgumentError(`limits.cpus must be a positive number (got ${String(limits.cpus)})`);
        }
        cpus = new Float64(limits.cpus);
      }
      limitsMap = {
        memory_bytes: uint("limits.memoryBytes", limits.memoryBytes, 1),
        pids: uint("limits.pids", limits.pids, 1),
        cpus,
        disk_bytes: uint("limits.diskBytes", limits.diskBytes, 1),
      };
    }
    const value = await this.send(
      "create",
      {
        template: o.template === undefined ? undefined : checkTemplateName("template", o.template),
        env: o.env === undefined ? undefined : checkEnv("env", o.env),
        limits: limitsMap,
        idle_timeout_ms: uint("idleTimeoutMs", o.idleTimeoutMs),
        max_lifetime_ms: uint("maxLifetimeMs", o.maxLifetimeMs),
        ephemeral: optBool("ephemeral", o.ephemeral),
        labels: labelsMap(o.labels),
        wait_ms: uint("waitMs", o.waitMs),
      },
      { waitTimeoutMs: o.waitTimeoutMs ?? Math.max(this.backend.opTimeoutMs, (o.waitMs ?? 30000) + 30000) },
    );
    this.lastInfo = new SessionInfo(value);
    return this.lastInfo;
  }

  /**
   * Connect to an existing session: its info if it runs; a stopped (or failed) one is resumed with
   * the template it has unless `resume` is false. `SessionNotFoundError` if it has no record or
   * was destroyed; `SessionLostError` if its host died.
   */
  async connect(options: OperationOptions & { resume?: boolean } = {}): Promise<SessionInfo> {
    const record = await this.record();
    if (record === null || record.state === "destroyed") {
      throw new SessionNotFoundError("session_not_found", record === null ? "the session has no record" : "the session was destroyed", false, {
        op: "connect",
        sessionId: this.id,
      });
    }
    if ((record.state === "stopped" || record.state === "error") && options.resume !== false) {
      return this.create({ template: record.template || undefined, waitTimeoutMs: options.waitTimeoutMs });
    }
    return this.info(options);
  }

  /** The session info with the holding daemon's live figures (memory, CPU, disk, processes). */
  async info(options: OperationOptions = {}): Promise<SessionInfo> {
    this.lastInfo = new SessionInfo(await this.send("info", {}, options));
    return this.lastInfo;
  }

  /** The session's record as stored in Redis (no operation is sent); `null` if it has none. */
  async record(): Promise<SessionRecord | null> {
    this.backend.checkOpen();
    const key = this.backend.keys.session(this.id);
    const h = await this.backend.conns.call(`HGETALL ${key}`, (r) => r.hgetallBuffer(key));
    return decodeSessionRecord(this.id, h as Record<string, Buffer>);
  }

  /** Stop it: every process ends, every file is kept; `create` resumes it. Idempotent. */
  async stop(options: OperationOptions = {}): Promise<SessionInfo> {
    this.lastInfo = new SessionInfo(await this.send("stop", {}, options));
    return this.lastInfo;
  }

  /** Destroy it: processes and files are gone. Idempotent (no record: nothing is sent). */
  async destroy(options: OperationOptions = {}): Promise<void> {
    try {
      await this.send("destroy", {}, options);
    } catch (e) {
      if (e instanceof SessionNotFoundError) return;
      throw e;
    }
  }

  /**
   * Capture its file-system changes as a new template `name` (PROTOCOL.md section 18): new
   * sessions and jobs can then name it.
   */
  async snapshot(name: string, options: OperationOptions = {}): Promise<SnapshotInfo> {
    return decodeSnapshotInfo(await this.send("snapshot", { name: checkTemplateName("snapshot", name) }, options));
  }

  // -- commands ----------------------------------------------------------------------------

  /**
   * Run a command in the session and resolve with its job {@link Result}; output is delivered live
   * to `onStdout`/`onStderr` (Buffers, in order; chunks lost live are delivered from the result
   * before it resolves). Aborting `signal` cancels it (outcome `cancelled`, output so far kept).
   */
  async exec(command: ExecCommand, options: ExecRunOptions = {}): Promise<Result> {
    const { onStdout, onStderr, ...rest } = options;
    return this.run("exec", execFields(command, rest), rest, onStdout, onStderr);
  }

  /** The events of a command (`started`, `stdout`/`stderr`, `exited`), sent when iteration begins. */
  execStream(command: ExecCommand, options: ExecOptions = {}): OperationEventStream {
    const fields = execFields(command, options);
    return this.streamOp("exec", fields, options);
  }

  /**
   * Run `code` in a code context (an interpreter that keeps its variables and imports between
   * calls of the same context, PROTOCOL.md section 15). Resolves with its job Result (exit code
   * 0, 1 if the code raised, or its own `sys.exit` status); like a REPL, the value of a final
   * expression is printed.
   */
  async code(code: string, runtime: ContextRuntime, options: CodeOptions = {}): Promise<Result> {
    const { onStdout, onStderr, ...rest } = options;
    return this.run("code", codeFields(code, runtime, rest), rest, onStdout, onStderr);
  }

  /** The events of a `code` call. */
  codeStream(code: string, runtime: ContextRuntime, options: Omit<CodeOptions, "onStdout" | "onStderr"> = {}): OperationEventStream {
    return this.streamOp("code", codeFields(code, runtime, options), options);
  }

  /** Start a code context's interpreter afresh (its state is gone). */
  async contextRestart(context: string, runtime: ContextRuntime, options: OperationOptions = {}): Promise<void> {
    await this.send("context_restart", { context: checkTemplateName("context", context), runtime: checkContextRuntime(runtime) }, options);
  }

  /** `exec` or `code` to its result, sent to the cached holder (see {@link holderCache}). */
  private async run(
    op: "exec" | "code",
    fields: { [key: string]: Wire | undefined },
    options: FollowOptions,
    onStdout: ((b: Buffer) => void) | undefined,
    onStderr: ((b: Buffer) => void) | undefined,
  ): Promise<Result> {
    const cached = this.cachedRoute(op);
    try {
      return await this.collect(this.streamOp(op, fields, options, cached), op, onStdout, onStderr);
    } catch (e) {
      if (!(e instanceof SessionError) || !(await this.movedFrom(cached, e.code))) throw e;
      return this.collect(this.streamOp(op, fields, options, null), op, onStdout, onStderr);
    }
  }

  private streamOp(
    op: "exec" | "code",
    fields: { [key: string]: Wire | undefined },
    options: FollowOptions,
    cached: string | null = null,
  ): OperationEventStream {
    this.backend.checkOpen();
    const opId = this.backend.newId();
    const payload = encodeRequest(opId, op, this.id, fields);
    // Without a cached holder, the route is looked up while the op's channel is being subscribed
    // (two connections, so two round trips at once instead of one after the other).
    const route = cached !== null ? Promise.resolve(cached) : this.route(op);
    route.catch(() => undefined);  // awaited by the submit below, or dropped with the stream
    return this.backend.events(
      opId,
      async () => {
        const stream = await route;
        await this.xadd(stream, opId, payload);
      },
      { signal: options.signal, waitTimeoutMs: options.waitTimeoutMs },
    );
  }

  private async collect(
    stream: OperationEventStream,
    op: string,
    onStdout: ((b: Buffer) => void) | undefined,
    onStderr: ((b: Buffer) => void) | undefined,
  ): Promise<Result> {
    for await (const ev of stream) {
      if (ev.type === "stdout") onStdout?.(ev.data);
      else if (ev.type === "stderr") onStderr?.(ev.data);
      else if (ev.type === "exited") {
        const r = ev.result;
        if (r.outcome === "error" && r.error !== null && SESSION_LEVEL_CODES.has(r.error.code)) {
          throw sessionError(r.error, { op, sessionId: this.id, opId: stream.id });
        }
        return r;
      }
    }
    throw new SandpoolError(`the events of ${op} ${stream.id} ended without an exited event`);
  }

  // -- background processes ----------------------------------------------------------------

  /**
   * Start a background process (PROTOCOL.md section 15, `spawn`) and return its handle. Its output
   * is delivered from its first byte to `onOutput`/`onStdout`/`onStderr` and to listeners added
   * with `onOutput()` later (from then on).
   */
  async spawn(command: SpawnCommand | string, options: SpawnOptions = {}): Promise<SessionProcess> {
    const cmd: SpawnCommand = typeof command === "string" ? { shell: command } : command;
    const fields: { [key: string]: Wire | undefined } = {};
    const given = [cmd.argv, cmd.shell].filter((x) => x !== undefined).length;
    if (given !== 1) throw new InvalidArgumentError("exactly one of argv and shell must be given");
    if (cmd.argv !== undefined) fields.argv = checkArgv(cmd.argv);
    else fields.shell = text("shell", cmd.shell);
    fields.env = options.env === undefined ? undefined : checkEnv("env", options.env);
    fields.cwd = options.cwd === undefined ? undefined : checkAbsolutePath("cwd", options.cwd);
    fields.as_root = optBool("asRoot", options.asRoot);
    if (options.stdin !== undefined && options.stdin !== "pipe" && options.stdin !== "ignore") {
      throw new InvalidArgumentError(`stdin must be "pipe" or "ignore" (got ${String(options.stdin)})`);
    }
    fields.stdin = options.stdin;
    const hub = this.backend.processes;
    await hub.beginSpawn(this.id);
    let proc: SessionProcess | null = null;
    try {
      const value = await this.send("spawn", fields, options);
      const pid = asStr(value.pid, "pid");
      if (pid === null || pid === "") throw new SandpoolError(`spawn on session ${this.id} returned no pid`);
      proc = new SessionProcess(this, pid, {
        command: cmd.shell ?? (cmd.argv ?? []).join(" "),
        stdinMode: options.stdin ?? "pipe",
        live: true,
      });
      const { onOutput, onStdout, onStderr } = options;
      if (onOutput) proc.onOutput(onOutput);
      if (onStdout || onStderr) {
        proc.onOutput((stream, data) => (stream === "stdout" ? onStdout?.(data) : onStderr?.(data)));
      }
    } finally {
      hub.endSpawn(this.id, proc);
    }
    return proc;
  }

  /**
   * A handle to an existing background process (spawned by anyone, before a restart...). Its
   * output so far comes from the daemon's durable view; later output with `refresh()`/`wait()`.
   * `NotFoundError` if the session has no such process.
   */
  async process(pid: string, options: OperationOptions = {}): Promise<SessionProcess> {
    const out = await this.processOutput(text("pid", pid));
    const proc = new SessionProcess(this, pid, { live: false });
    const info = (await this.ps(options)).find((p) => p.pid === pid);
    if (info) proc.command = info.command;
    proc.startFrom(out);
    return proc;
  }

  /** The session's background processes, running and exited. */
  async ps(options: OperationOptions = {}): Promise<ProcessInfo[]> {
    return decodeProcessList(await this.send("ps", {}, options));
  }

  /**
   * The durable output of a background process (see `SessionProcess.output`). With `wait`,
   * aborting `signal` cancels the wait.
   */
  async processOutput(pid: string, opts: ProcessOutputOptions = {}): Promise<ProcessOutput> {
    const waitMs = uint("waitTimeoutMs", opts.waitTimeoutMs);
    const wait = optBool("wait", opts.wait);
    const value = await this.send(
      "output",
      { pid: text("pid", pid), tail_lines: uint("tailLines", opts.tailLines), wait, wait_timeout_ms: wait ? waitMs : undefined },
      { waitTimeoutMs: this.backend.opTimeoutMs + (wait ? (waitMs ?? 30000) : 0), signal: wait ? opts.signal : undefined },
    );
    return decodeProcessOutput(value);
  }

  /** Write to a background process's stdin, and with `close` close it. */
  async writeStdin(pid: string, data: BytesInput, opts: { close?: boolean } & OperationOptions = {}): Promise<void> {
    await this.send("stdin", { pid: text("pid", pid), data: toBytes("data", data), close: optBool("close", opts.close) }, opts);
  }

  /** Signal a background process's group (default 15); false if it had already exited. */
  async killProcess(pid: string, signal = 15, options: OperationOptions = {}): Promise<boolean> {
    const value = await this.send("kill", { pid: text("pid", pid), signal: uint("signal", signal, 1) }, options);
    return value.killed === true;
  }

  // -- ports -------------------------------------------------------------------------------

  /**
   * Give a server the session runs on `port` (bound to localhost or to every address) an HTTP
   * preview URL (PROTOCOL.md section 15, "Ports"), and resolve with its entry. Idempotent:
   * exposing a port again gives the same entry (the same URL). Rejects with `UnsupportedError`
   * when the session's template has no `expose = on` or the daemon serves no preview URLs.
   */
  async expose(port: number, options: ExposeOptions = {}): Promise<PortEntry> {
    if (options.protocol !== undefined && options.protocol !== "http") {
      throw new InvalidArgumentError(`protocol must be "http" (got ${String(options.protocol)})`);
    }
    return decodePortEntry(await this.send("expose", { port: checkPort(port), protocol: options.protocol }, options));
  }

  /** End a port's preview URL (its token then answers 404). Idempotent. */
  async unexpose(port: number, options: OperationOptions = {}): Promise<void> {
    await this.send("unexpose", { port: checkPort(port) }, options);
  }

  /** The session's exposed ports, by port. */
  async ports(options: OperationOptions = {}): Promise<PortEntry[]> {
    return decodePorts(await this.send("ports", {}, options));
  }

  // -- files -------------------------------------------------------------------------------

  /**
   * Write files (at most 16 MiB of data per call). The first failing file ends the call (the
   * earlier ones stay written) with its error. Returns each file's size and mtime.
   */
  async write(files: readonly FileSpec[], options: FileOptions = {}): Promise<WrittenFile[]> {
    if (!Array.isArray(files) || files.length === 0) throw new InvalidArgumentError("files must be a non-empty array");
    const list = files.map((f, i) => ({
      path: checkAbsolutePath(`files[${i}].path`, f.path),
      data: toBytes(`files[${i}].data`, f.data),
      mode: uint(`files[${i}].mode`, f.mode),
      parents: optBool(`files[${i}].parents`, f.parents),
      overwrite: optBool(`files[${i}].overwrite`, f.overwrite),
      expected_mtime_ns: checkNs(`files[${i}].expectedMtimeNs`, f.expectedMtimeNs),
    }));
    return decodeWrittenFiles(await this.send("write", { files: list, as_root: optBool("asRoot", options.asRoot) }, options));
  }

  /** Write one file; larger than 16 MiB is written in pieces (a write, then appends). */
  async writeFile(path: string, data: BytesInput, options: FileOptions & Omit<FileSpec, "path" | "data"> = {}): Promise<WrittenFile> {
    const bytes = toBytes("data", data);
    const { mode, parents, overwrite, expectedMtimeNs, ...fileOpts } = options;
    const first = bytes.subarray(0, MAX_FILE_CALL_BYTES);
    let written = (await this.write([{ path, data: first, mode, parents, overwrite, expectedMtimeNs }], fileOpts))[0];
    for (let off = MAX_FILE_CALL_BYTES; off < bytes.length; off += MAX_FILE_CALL_BYTES) {
      const r = await this.append(path, bytes.subarray(off, off + MAX_FILE_CALL_BYTES), fileOpts);
      written = { path, size: r.size, mtimeNs: r.mtimeNs };
    }
    if (written === undefined) throw new SandpoolError(`write of ${path} returned no file`);
    return written;
  }

  /** Append to a file (created if missing; `parents` creates its directories). */
  async append(path: string, data: BytesInput, options: FileOptions & { parents?: boolean } = {}): Promise<{ size: number; mtimeNs: bigint }> {
    const v = await this.send(
      "append",
      {
        path: checkAbsolutePath("path", path),
        data: toBytes("data", data),
        parents: optBool("parents", options.parents),
        as_root: optBool("asRoot", options.asRoot),
      },
      options,
    );
    return { size: asNumber(v.size, "size") ?? 0, mtimeNs: asBigInt(v.mtime_ns, "mtime_ns") ?? 0n };
  }

  /** Read (part of) a file: at most 16 MiB per call; `size` is the whole file's. */
  async read(path: string, options: FileOptions & { offset?: number; length?: number } = {}): Promise<ReadResult> {
    return decodeReadResult(
      await this.send(
        "read",
        {
          path: checkAbsolutePath("path", path),
          offset: uint("offset", options.offset),
          length: uint("length", options.length),
          as_root: optBool("asRoot", options.asRoot),
        },
        options,
      ),
    );
  }

  /** A whole file's bytes (several `read` calls for files over 16 MiB). */
  async readFile(path: string, options: FileOptions = {}): Promise<Buffer> {
    // Ask for at most 16 MiB per call: a larger read is refused, not shortened.
    const first = await this.read(path, { ...options, length: MAX_FILE_CALL_BYTES });
    if (first.data.length >= first.size) return first.data;
    const parts = [first.data];
    let off = first.data.length;
    while (off < first.size) {
      const r = await this.read(path, { ...options, offset: off, length: MAX_FILE_CALL_BYTES });
      if (r.data.length === 0) break;
      parts.push(r.data);
      off += r.data.length;
    }
    return Buffer.concat(parts);
  }

  /** A whole file as UTF-8 text. */
  async readText(path: string, options: FileOptions = {}): Promise<string> {
    return (await this.readFile(path, options)).toString("utf8");
  }

  /** List a directory (`recursive`, `depth`, `limit` as in PROTOCOL.md section 15). */
  async list(path: string, options: FileOptions & { recursive?: boolean; depth?: number; limit?: number } = {}): Promise<ListResult> {
    return decodeListResult(
      await this.send(
        "list",
        {
          path: checkAbsolutePath("path", path),
          recursive: optBool("recursive", options.recursive),
          depth: uint("depth", options.depth),
          limit: uint("limit", options.limit),
          as_root: optBool("asRoot", options.asRoot),
        },
        options,
      ),
    );
  }

  /** A path's metadata (of a link itself unless `follow`). */
  async stat(path: string, options: FileOptions & { follow?: boolean } = {}): Promise<StatResult> {
    return decodeStatResult(
      await this.send(
        "stat",
        { path: checkAbsolutePath("path", path), follow: optBool("follow", options.follow), as_root: optBool("asRoot", options.asRoot) },
        options,
      ),
    );
  }

  /** Whether a path exists, and its type. */
  async exists(path: string, options: FileOptions = {}): Promise<ExistsResult> {
    return decodeExistsResult(
      await this.send("exists", { path: checkAbsolutePath("path", path), as_root: optBool("asRoot", options.asRoot) }, options),
    );
  }

  /** Make a directory (with its parents unless `parents` is false); an existing one is fine. */
  async mkdir(path: string, options: FileOptions & { parents?: boolean; mode?: number } = {}): Promise<void> {
    await this.send(
      "mkdir",
      {
        path: checkAbsolutePath("path", path),
        parents: optBool("parents", options.parents),
        mode: uint("mode", options.mode),
        as_root: optBool("asRoot", options.asRoot),
      },
      options,
    );
  }

  /** Remove a path (`recursive` for a directory's contents; `force`: a missing path is fine). Returns the entries removed. */
  async remove(path: string, options: FileOptions & { recursive?: boolean; force?: boolean } = {}): Promise<number> {
    const v = await this.send(
      "remove",
      {
        path: checkAbsolutePath("path", path),
        recursive: optBool("recursive", options.recursive),
        force: optBool("force", options.force),
        as_root: optBool("asRoot", options.asRoot),
      },
      options,
    );
    return typeof v.removed === "number" ? v.removed : Number(v.removed ?? 0);
  }

  /** Copy a file (a directory with `recursive`); `overwrite` defaults to false. */
  async copy(from: string, to: string, options: FileOptions & { recursive?: boolean; overwrite?: boolean } = {}): Promise<void> {
    await this.send(
      "copy",
      {
        from: checkAbsolutePath("from", from),
        to: checkAbsolutePath("to", to),
        recursive: optBool("recursive", options.recursive),
        overwrite: optBool("overwrite", options.overwrite),
        as_root: optBool("asRoot", options.asRoot),
      },
      options,
    );
  }

  /** Move a path (across directories too); `overwrite` defaults to false. */
  async rename(from: string, to: string, options: FileOptions & { overwrite?: boolean } = {}): Promise<void> {
    await this.send(
      "rename",
      {
        from: checkAbsolutePath("from", from),
        to: checkAbsolutePath("to", to),
        overwrite: optBool("overwrite", options.overwrite),
        as_root: optBool("asRoot", options.asRoot),
      },
      options,
    );
  }
}

function checkContextRuntime(runtime: unknown): ContextRuntime {
  if (!(CONTEXT_RUNTIMES as readonly unknown[]).includes(runtime)) {
    throw new InvalidArgumentError(`runtime must be one of ${CONTEXT_RUNTIMES.join(", ")} (got ${String(runtime)})`);
  }
  return runtime as ContextRuntime;
}

function checkArgv(argv: unknown): string[] {
  if (typeof argv !== "object" || argv === null || argv instanceof Uint8Array || !(Symbol.iterator in argv)) {
    throw new InvalidArgumentError("argv must be an array of strings (use shell for a command line)");
  }
  const items = [...(argv as Iterable<unknown>)].map((a, i) => text(`argv[${i}]`, a));
  if (items.length === 0 || items[0] === "") throw new InvalidArgumentError("argv must not be empty");
  return items;
}

function checkPort(port: unknown): number {
  if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new InvalidArgumentError(`port must be an integer in 1..65535 (got ${typeof port === "number" ? port : typeName(port)})`);
  }
  return port;
}

function checkNs(name: string, v: unknown): bigint | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== "bigint" || v < 0n) throw new InvalidArgumentError(`${name} must be a non-negative bigint`);
  return v;
}

/** The fields of a `code` request, in PROTOCOL.md order. */
function codeFields(code: string, runtime: ContextRuntime, o: Omit<CodeOptions, "onStdout" | "onStderr">): { [key: string]: Wire | undefined } {
  return {
    code: text("code", code),
    runtime: checkContextRuntime(runtime),
    context: o.context === undefined ? undefined : checkTemplateName("context", o.context),
    timeout_ms: uint("timeoutMs", o.timeoutMs, 1),
    max_output_bytes: uint("maxOutputBytes", o.maxOutputBytes),
  };
}

/** The fields of an `exec` request, in PROTOCOL.md order. */
function execFields(command: ExecCommand, o: ExecOptions): { [key: string]: Wire | undefined } {
  if (command === null || typeof command !== "object") throw new InvalidArgumentError("the command must be an object");
  const { argv, shell, code, runtime } = command as { argv?: unknown; shell?: unknown; code?: unknown; runtime?: unknown };
  const given = [argv, shell, code].filter((x) => x !== undefined).length;
  if (given !== 1) throw new InvalidArgumentError("exactly one of argv, shell and code must be given");
  if ((code === undefined) !== (runtime === undefined)) throw new InvalidArgumentError("code and runtime go together");
  if (runtime !== undefined && !(RUNTIMES as readonly unknown[]).includes(runtime)) {
    throw new InvalidArgumentError(`runtime must be one of ${RUNTIMES.join(", ")} (got ${String(runtime)})`);
  }
  return {
    argv: argv === undefined ? undefined : checkArgv(argv),
    shell: shell === undefined ? undefined : text("shell", shell),
    code: code === undefined ? undefined : text("code", code),
    runtime: runtime as string | undefined,
    env: o.env === undefined ? undefined : checkEnv("env", o.env),
    cwd: o.cwd === undefined ? undefined : checkAbsolutePath("cwd", o.cwd),
    stdin: o.stdin === undefined ? undefined : toBytes("stdin", o.stdin),
    timeout_ms: uint("timeoutMs", o.timeoutMs, 1),
    max_output_bytes: uint("maxOutputBytes", o.maxOutputBytes),
    as_root: optBool("asRoot", o.asRoot),
  };
}
