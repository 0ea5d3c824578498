/**
 * `SandpoolSandbox`: a Mastra sandbox (`MastraSandbox`) on one sandpool session.
 *
 * The sandbox's `id` is the session id: `start()` creates the session or connects to it (and
 * resumes it when it was stopped), so a sandbox constructed with a known id, in any process,
 * finds the same files and background processes. `stop()` stops the session (processes end,
 * files stay); `destroy()` removes it. Commands run with the session's `exec` operation (a shell
 * line, so pipes and redirections work); background processes with `spawn` (see processes.ts).
 * If the session was stopped or destroyed from outside, the next command starts it again and
 * runs (once). `networking.getPortUrl(port)` gives a server in the session a preview URL (the
 * session's `expose` operation; templates with `expose = on`).
 */

import {
  MastraSandbox,
  SandboxAbortError,
  validateSandboxFileMode,
  type CommandResult,
  type ExecuteCommandOptions,
  type MastraSandboxOptions,
  type ProviderStatus,
  type SandboxCloneOptions,
  type SandboxFileInput,
  type SandboxInfo,
  type SandboxNetworking,
  type SandboxStartResult,
  type WriteFilesOptions,
} from "@mastra/core/workspace";
import type { RequestContext } from "@mastra/core/request-context";
import {
  Client,
  ExistsError,
  MAX_FILE_CALL_BYTES,
  SessionBusyError,
  SessionNotFoundError,
  SessionStoppedError,
  UnsupportedError,
  type ClientOptions,
  type Session,
  type SessionInfo,
  type SessionLimits,
} from "sandpool";

import { SandpoolProcessManager } from "./processes.js";
import { commandLine, commandResultOf, mergeEnv, resolveIn, templateNameFrom, TextChunks } from "./results.js";
import type { SessionSandbox } from "./session_sandbox.js";

/** Options of {@link SandpoolSandbox}. */
export interface SandpoolSandboxOptions extends Omit<MastraSandboxOptions, "processes"> {
  /**
   * The session id (1..128 characters of `[A-Za-z0-9._:-]`). Give a known one to reconnect to
   * its session; default: a new random id.
   */
  id?: string;
  /** Redis URL of the sandpool deployment (default `$SANDPOOL_REDIS_URL`, else `redis://127.0.0.1:6379`). */
  redisUrl?: string;
  /** A sandpool client to share (not closed by this sandbox); `redisUrl`, `prefix`, `queue` are then ignored. */
  client?: Client;
  /** Key prefix and queue of the deployment (the daemons' `--prefix`, `--queue`). */
  prefix?: string;
  queue?: string;
  /** More sandpool client options (timeouts, connection name, TLS...). */
  clientOptions?: Omit<ClientOptions, "url" | "prefix" | "queue">;
  /** The template a new session starts from (default `default`). */
  template?: string;
  /** Resource limits of a new session (bytes, CPUs); the daemon clamps them. */
  limits?: SessionLimits;
  /** Session-wide environment given to `create` (the `env` option is the per-command overlay). */
  sessionEnv?: Record<string, string>;
  /** Stop the session after this long unused (default: the daemon's, 30 min; 0 for never). */
  idleTimeoutMs?: number;
  /** Stop it after this long in all (default none). */
  maxLifetimeMs?: number;
  /** Destroy the session instead of stopping it (on `stop()`, idle or lifetime). */
  ephemeral?: boolean;
  /** Labels of the session (`client.listSessions({labels})`). */
  labels?: Record<string, string>;
  /** How long a command may run when it names no timeout (default 300000 ms; the daemon clamps). */
  timeout?: number;
  /** Output kept per stream of a command (default 16 MiB; the daemon clamps to its maximum). */
  maxOutputBytes?: number;
  /** Snapshot name `snapshot()` writes (default `mastra-<id>`); a new session starts from it when it exists. */
  checkpointName?: string;
  /** Snapshot a new session starts from when `checkpointName` has none yet. */
  seedCheckpointName?: string;
  /** How long `create` may wait for a daemon with room (`wait_ms`). */
  createWaitMs?: number;
  /** Replace (string) or extend (function) the instructions given to agents. */
  instructions?: string | ((opts: { defaultInstructions: string; requestContext?: RequestContext | undefined }) => string);
}

const DEFAULT_COMMAND_TIMEOUT_MS = 300_000;
const DEFAULT_MAX_OUTPUT_BYTES = 16 << 20;
const MIB = 1 << 20;

/** A Mastra workspace sandbox on a sandpool session. */
export class SandpoolSandbox extends MastraSandbox implements SessionSandbox {
  readonly id: string;
  readonly name = "SandpoolSandbox";
  readonly provider = "sandpool";
  status: ProviderStatus = "pending";
  override readonly supportsCheckpoints = true;
  declare readonly processes: SandpoolProcessManager;
  /**
   * Preview URLs: `getPortUrl(port)` exposes `port` of the session (a server bound to localhost
   * or to every address) and resolves with its URL; `null` when the sandbox is not running, or
   * its template or daemon serves no preview URLs (sandpool answers `unsupported`).
   */
  override readonly networking: SandboxNetworking = { getPortUrl: (port: number) => this.getPortUrl(port) };

  /** The sandpool client (shared with the filesystem on this sandbox). */
  readonly client: Client;
  /** The session this sandbox drives. */
  readonly session: Session;
  private readonly ownsClient: boolean;
  private readonly opts: SandpoolSandboxOptions;
  private readonly commandTimeoutMs: number;
  private readonly maxOutputBytes: number;
  private readonly checkpoint: string;
  private info: SessionInfo | null = null;
  private cpuSample: { cpuTimeUs: number; at: number } | null = null;

  constructor(options: SandpoolSandboxOptions = {}) {
    const processes = new SandpoolProcessManager();
    super({ ...options, name: "SandpoolSandbox", processes, workingDirectory: options.workingDirectory ?? "/work" });
    this.opts = { ...options };
    this.id = options.id ?? `mastra-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
    if (options.client) {
      this.client = options.client;
      this.ownsClient = false;
    } else {
      this.client = new Client({
        ...options.clientOptions,
        url: options.redisUrl,
        prefix: options.prefix,
        queue: options.queue,
        connectionName: options.clientOptions?.connectionName ?? "sandpool-mastra",
      });
      this.ownsClient = true;
    }
    this.session = this.client.session(this.id);
    this.commandTimeoutMs = options.timeout ?? DEFAULT_COMMAND_TIMEOUT_MS;
    this.maxOutputBytes = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    this.checkpoint = templateNameFrom(options.checkpointName ?? `mastra-${this.id}`);
  }

  // -- life cycle --------------------------------------------------------------------------

  /**
   * Create the session or connect to it (resume it if stopped). Reports `created` when no
   * session had this id, else `connected`.
   */
  override async start(): Promise<SandboxStartResult> {
    const record = await this.session.record();
    const fresh = record === null || record.state === "destroyed";
    // Resuming must name the template the session has; a new one may start from a checkpoint.
    const template = fresh ? await this.newSessionTemplate() : record.template || undefined;
    this.info = await this.withBusyRetry(() =>
      this.session.create({
        template,
        env: this.opts.sessionEnv,
        limits: this.opts.limits,
        idleTimeoutMs: this.opts.idleTimeoutMs,
        maxLifetimeMs: this.opts.maxLifetimeMs,
        ephemeral: this.opts.ephemeral,
        labels: this.opts.labels,
        waitMs: this.opts.createWaitMs,
      }),
    );
    this.cpuSample = null;
    if (this.info.state !== "running") {
      throw new Error(`sandpool session ${this.id} is ${this.info.state || "in no known state"} after create`);
    }
    return { outcome: fresh ? "created" : "connected" };
  }

  /** Stop the session: its processes end, its files (including /tmp) stay. */
  override async stop(): Promise<void> {
    try {
      this.info = await this.withBusyRetry(() => this.session.stop());
    } catch (e) {
      if (!(e instanceof SessionNotFoundError)) throw e;
    }
    await this.processes.endAll();
  }

  /** Destroy the session (processes and files) and close this sandbox's own Redis connections. */
  override async destroy(): Promise<void> {
    await this.withBusyRetry(() => this.session.destroy());
    await this.processes.endAll();
    if (this.ownsClient) await this.client.close();
  }

  /**
   * Close this sandbox's Redis connections without touching the session (it keeps running or
   * stays stopped; a sandbox with the same id reconnects to it later). A shared client is not closed.
   */
  async close(): Promise<void> {
    if (this.ownsClient) await this.client.close();
  }

  /**
   * Run `fn` on the running session. If the session turns out to have been stopped or destroyed
   * from outside, start it again (create-or-resume) and run `fn` once more.
   * @internal
   */
  async withSession<T>(fn: (session: Session) => Promise<T>): Promise<T> {
    await this.ensureRunning();
    try {
      return await this.withBusyRetry(() => fn(this.session));
    } catch (e) {
      if (!(e instanceof SessionNotFoundError || e instanceof SessionStoppedError)) throw e;
      this.logger.warn(`sandpool session ${this.id} was ${e instanceof SessionStoppedError ? "stopped" : "removed"} from outside; starting it again`);
      await this.processes.endAll();
      if (this.status === "running") this.status = "stopped";
      await this.ensureRunning();
      return await this.withBusyRetry(() => fn(this.session));
    }
  }

  private async withBusyRetry<T>(fn: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fn();
      } catch (e) {
        if (!(e instanceof SessionBusyError) || attempt >= 50) throw e;
        await new Promise((r) => setTimeout(r, Math.min(100 * (attempt + 1), 1000)));
      }
    }
  }

  private async newSessionTemplate(): Promise<string | undefined> {
    const wanted = [this.opts.checkpointName === undefined ? null : this.checkpoint, this.opts.seedCheckpointName ?? null];
    if (wanted.every((n) => n === null)) return this.opts.template;
    const have = new Set((await this.client.listSnapshots()).map((s) => s.name));
    for (const n of wanted) if (n !== null && have.has(n)) return n;
    return this.opts.template;
  }

  // -- commands ----------------------------------------------------------------------------

  /** An absolute working directory for a command (relative ones resolve against `workingDirectory`). */
  resolveCwd(cwd: string | undefined): string {
    const base = this.workingDirectory ?? "/work";
    return cwd ? resolveIn(base, cwd) : base;
  }

  /**
   * Run a command through `/bin/sh` (`args` are shell-quoted onto it) and resolve with its result.
   * A timeout is exit code 124 with `timedOut` and `killed`; an abort ends it at once, keeping its
   * output so far (`killed`, exit code 130). Never throws for what the command does.
   */
  override async executeCommand(command: string, args: string[] = [], options: ExecuteCommandOptions = {}): Promise<CommandResult> {
    const full = commandLine(command, args);
    const startedAt = Date.now();
    if (options.abortSignal?.aborted) {
      return { success: false, exitCode: 130, stdout: "", stderr: "", executionTimeMs: 0, killed: true, command: full, args };
    }
    const timeoutMs = options.timeout ?? this.commandTimeoutMs;
    const env = mergeEnv(this.getEnv(), options.env);
    const cwd = this.resolveCwd(options.cwd);
    const stdout = new TextChunks(options.onStdout);
    const stderr = new TextChunks(options.onStderr);
    const result = await this.withSession((s) =>
      s.exec(
        { shell: full },
        {
          env,
          cwd,
          timeoutMs,
          maxOutputBytes: this.maxOutputBytes,
          signal: options.abortSignal,
          // The daemon ends every command within its timeout plus a margin.
          waitTimeoutMs: timeoutMs + 120_000,
          onStdout: (b) => stdout.write(b),
          onStderr: (b) => stderr.write(b),
        },
      ),
    );
    stdout.end();
    stderr.end();
    return commandResultOf(result, { command: full, args, startedAt, maxRetainedBytes: options.maxRetainedBytes });
  }

  /** Bulk-write files into the session (paths relative to the working directory allowed). */
  override async writeFiles(files: SandboxFileInput[], options: WriteFilesOptions = {}): Promise<void> {
    if (options.abortSignal?.aborted) throw new SandboxAbortError("writeFiles", options.abortSignal.reason);
    for (const f of files) if (f.mode !== undefined) validateSandboxFileMode(f.mode);
    const specs = files.map((f) => ({
      path: this.resolveCwd(f.path),
      data: typeof f.content === "string" ? Buffer.from(f.content, "utf8") : Buffer.from(f.content),
      mode: f.mode,
    }));
    let batch: typeof specs = [];
    let bytes = 0;
    const flush = async (): Promise<void> => {
      if (batch.length === 0) return;
      if (options.abortSignal?.aborted) throw new SandboxAbortError("writeFiles", options.abortSignal.reason);
      const b = batch;
      batch = [];
      bytes = 0;
      await this.withSession((s) => s.write(b));
    };
    for (const spec of specs) {
      if (spec.data.length > MAX_FILE_CALL_BYTES) {
        await flush();
        await this.withSession((s) => s.writeFile(spec.path, spec.data, { mode: spec.mode }));
        continue;
      }
      if (bytes + spec.data.length > MAX_FILE_CALL_BYTES) await flush();
      batch.push(spec);
      bytes += spec.data.length;
    }
    await flush();
  }

  // -- networking --------------------------------------------------------------------------

  /**
   * The preview URL of `port` in the session, exposing it (`expose` is idempotent: the same URL
   * each time, until the session stops). `null` when this sandbox is not running (nothing is
   * started for it: a URL would have no server behind it), when the session was stopped or removed
   * from outside, and when the session's template has no `expose = on` or its daemon serves no
   * preview URLs. A port outside 1..65535 throws.
   */
  async getPortUrl(port: number): Promise<string | null> {
    if (this.status !== "running") return null;
    try {
      return (await this.withBusyRetry(() => this.session.expose(port))).url;
    } catch (e) {
      if (e instanceof UnsupportedError || e instanceof SessionStoppedError || e instanceof SessionNotFoundError) return null;
      throw e;
    }
  }

  /** End the preview URL of `port` (it answers 404 from then on). Idempotent. */
  async closePort(port: number): Promise<void> {
    if (this.status !== "running") return;
    try {
      await this.withBusyRetry(() => this.session.unexpose(port));
    } catch (e) {
      if (e instanceof UnsupportedError || e instanceof SessionStoppedError || e instanceof SessionNotFoundError) return;
      throw e;
    }
  }

  // -- information -------------------------------------------------------------------------

  /**
   * Status and the session's figures: memory and disk (limits and use, MB), CPUs, and the CPU
   * use since the previous `getInfo()` (percent of one CPU).
   */
  override async getInfo(): Promise<SandboxInfo> {
    let info = this.info;
    if (this.status === "running") {
      try {
        info = this.info = await this.session.info();
      } catch {
        // keep the last known figures
      }
    }
    const out: SandboxInfo = {
      id: this.id,
      name: this.name,
      provider: this.provider,
      status: this.status,
      createdAt: info ? new Date(info.createdMs) : new Date(),
      mounts: [],
      metadata: {
        sessionId: this.id,
        template: info?.template ?? this.opts.template ?? "default",
        host: info?.host ?? null,
        state: info?.state ?? null,
        ephemeral: info?.ephemeral ?? this.opts.ephemeral ?? false,
        labels: { ...(info?.labels ?? this.opts.labels ?? {}) },
        processes: info?.processes ?? null,
      },
    };
    if (info) {
      if (info.lastUsedMs > 0) out.lastUsedAt = new Date(info.lastUsedMs);
      if (info.timeoutAtMs > 0) out.timeoutAt = new Date(info.timeoutAtMs);
      const resources: NonNullable<SandboxInfo["resources"]> = {};
      if (info.memoryLimitBytes !== null) resources.memoryMB = info.memoryLimitBytes / MIB;
      if (info.memoryBytes !== null) resources.memoryUsedMB = info.memoryBytes / MIB;
      if (info.cpus !== null) resources.cpuCores = info.cpus;
      if (info.diskLimitBytes !== null) resources.diskMB = info.diskLimitBytes / MIB;
      if (info.diskBytes !== null) resources.diskUsedMB = info.diskBytes / MIB;
      if (info.cpuTimeUs !== null) {
        const now = Date.now();
        const prev = this.cpuSample;
        if (prev !== null && now > prev.at && info.cpuTimeUs >= prev.cpuTimeUs) {
          resources.cpuPercent = ((info.cpuTimeUs - prev.cpuTimeUs) / 1000 / (now - prev.at)) * 100;
        }
        this.cpuSample = { cpuTimeUs: info.cpuTimeUs, at: now };
      }
      out.resources = resources;
    }
    return out;
  }

  /** What agents are told about this sandbox (in tool descriptions). */
  override getInstructions(opts?: { requestContext?: RequestContext }): string {
    const parts = [
      `Isolated Linux sandbox (sandpool session "${this.id}", template "${this.info?.template ?? this.opts.template ?? "default"}").`,
      `Commands run with /bin/sh as an unprivileged user; the default working directory is ${this.workingDirectory ?? "/work"}.`,
      "Files anywhere in the sandbox (including /tmp) persist across commands and sandbox restarts until it is destroyed.",
      "Use background: true for servers and watchers: they keep running between commands and are reachable on localhost from later commands.",
      `A command without a timeout may run for ${Math.round(this.commandTimeoutMs / 1000)} s.`,
    ];
    const defaultInstructions = parts.join(" ");
    const o = this.opts.instructions;
    if (typeof o === "string") return o;
    if (typeof o === "function") return o({ defaultInstructions, requestContext: opts?.requestContext });
    return defaultInstructions;
  }

  // -- checkpoints -------------------------------------------------------------------------

  /** The snapshot name {@link snapshot} writes. */
  get checkpointName(): string {
    return this.checkpoint;
  }

  /**
   * Capture the session's files as the snapshot template `checkpointName` (replacing an earlier
   * one of that name). A new sandbox whose `checkpointName` names it starts from it.
   */
  override async snapshot(): Promise<void> {
    try {
      await this.withSession((s) => s.snapshot(this.checkpoint));
    } catch (e) {
      if (!(e instanceof ExistsError)) throw e;
      await this.client.deleteSnapshot(this.checkpoint);
      await this.withSession((s) => s.snapshot(this.checkpoint));
    }
  }

  /**
   * A sibling sandbox with this one's configuration and its own session (no I/O until it starts).
   * `checkpointName`/`seedCheckpointName` choose the snapshot it starts from and writes;
   * `idleTimeoutMinutes` sets its idle timeout.
   */
  clone(options: SandboxCloneOptions = {}): SandpoolSandbox {
    const o: SandpoolSandboxOptions = { ...this.opts };
    delete o.id;
    if (!this.ownsClient) o.client = this.client;
    if (options.id !== undefined) o.id = options.id;
    else if (options.sandboxId !== undefined) o.id = options.sandboxId;
    if (options.env !== undefined) o.env = options.env;
    if (options.workingDirectory !== undefined) o.workingDirectory = options.workingDirectory;
    if (options.idleTimeoutMinutes !== undefined) o.idleTimeoutMs = options.idleTimeoutMinutes * 60_000;
    if (options.checkpointName !== undefined) o.checkpointName = options.checkpointName;
    if (options.seedCheckpointName !== undefined) o.seedCheckpointName = options.seedCheckpointName;
    return new SandpoolSandbox(o);
  }
}
