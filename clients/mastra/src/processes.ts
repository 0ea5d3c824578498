/**
 * Background processes of a `SandpoolSandbox`: Mastra's `SandboxProcessManager` and
 * `ProcessHandle` over the session's `spawn`, `ps`, `output`, `stdin` and `kill` operations.
 *
 * Contract points (see README): `pid` is the session's process id (`p1`, `p2`, ...), a string;
 * `exitCode` is undefined while it runs, its exit code once it exits by itself, 128 + the signal
 * when a signal ended it, 124 after the spawn's `timeout`; `kill()` sends SIGKILL to the process
 * group and resolves false once it had exited; `sendStdin` and `closeStdin` throw once it has
 * exited (or when it was spawned with `stdinMode: 'ignore'`); `wait()` is repeatable. `get(pid)`
 * of a pid this manager did not spawn (another process of the agent's, or a client that
 * restarted) attaches to it with the output the daemon kept.
 */

import type { Readable } from "node:stream";

import { ProcessHandle, SandboxProcessManager } from "@mastra/core/workspace";
import type { CommandResult, ProcessInfo, SpawnProcessOptions } from "@mastra/core/workspace";
import { NotFoundError, ProcessExitedError, SessionError, type SessionProcess } from "sandpool";

import { mergeEnv, processExitCode, TextChunks } from "./results.js";
import type { SessionSandbox } from "./session_sandbox.js";

/** A Mastra process handle on a sandpool background process. */
export class SandpoolProcessHandle extends ProcessHandle {
  readonly pid: string;
  /** The sandpool handle (output, refresh, kill with any signal...). */
  readonly process: SessionProcess;
  private readonly startedAt = Date.now();
  private readonly stdinMode: "pipe" | "ignore";
  private readonly stdoutText: TextChunks;
  private readonly stderrText: TextChunks;
  private timer: NodeJS.Timeout | undefined;
  private timedOut = false;
  private killedHere = false;
  private result: CommandResult | null = null;
  private waiting: Promise<CommandResult> | null = null;
  private readerMade = false;

  constructor(proc: SessionProcess, options: SpawnProcessOptions = {}, stdinMode: "pipe" | "ignore" = "pipe") {
    super(options);
    this.pid = proc.pid;
    this.process = proc;
    this.stdinMode = stdinMode;
    if (proc.command !== null) this.command = proc.command;
    this.stdoutText = new TextChunks((t) => this.emitStdout(t));
    this.stderrText = new TextChunks((t) => this.emitStderr(t));
    proc.onOutput((stream, data) => (stream === "stdout" ? this.stdoutText : this.stderrText).write(data));
    if (options.timeout !== undefined && options.timeout > 0) {
      this.timer = setTimeout(() => {
        this.timedOut = true;
        this.kill().catch(() => undefined);
      }, options.timeout);
      this.timer.unref();
      proc.onExit(() => clearTimeout(this.timer));
    }
  }

  /**
   * stdout as a stream: what the handle has retained so far first (a sandpool process may have
   * written before this getter is first used), then what follows.
   */
  override get reader(): Readable {
    const first = !this.readerMade;
    this.readerMade = true;
    const r = super.reader;
    if (first && this.stdout !== "") r.push(this.stdout);
    return r;
  }

  /** Undefined while it runs (as far as this handle knows: `get()` refreshes it). */
  get exitCode(): number | undefined {
    if (this.process.running) return undefined;
    if (this.timedOut) return 124;
    return processExitCode(this.process.exitCode, this.process.signal);
  }

  /** Learn whether it exited, and catch up on output lost live. */
  async refresh(): Promise<void> {
    await this.process.refresh();
  }

  override async wait(): Promise<CommandResult> {
    if (this.result !== null) return this.result;
    this.waiting ??= (async () => {
      try {
        await this.process.wait();
        clearTimeout(this.timer);
        this.stdoutText.end();
        this.stderrText.end();
        const exitCode = this.exitCode ?? 1;
        const r: CommandResult = {
          success: exitCode === 0,
          exitCode,
          stdout: this.stdout,
          stderr: this.stderr,
          executionTimeMs: Date.now() - this.startedAt,
        };
        if (this.killedHere || this.timedOut || this.process.signal !== null) r.killed = true;
        if (this.timedOut) r.timedOut = true;
        this.result = r;
        return r;
      } finally {
        this.waiting = null;
      }
    })();
    return this.waiting;
  }

  /** SIGKILL to its process group; false if it had already exited. */
  async kill(): Promise<boolean> {
    if (this.exitCode !== undefined) return false;
    this.killedHere = true;
    const killed = await this.process.kill(9);
    if (!killed) this.killedHere = false;
    return killed;
  }

  async sendStdin(data: string): Promise<void> {
    this.assertStdin();
    try {
      await this.process.write(data);
    } catch (e) {
      throw this.stdinError(e);
    }
  }

  override async closeStdin(): Promise<void> {
    this.assertStdin();
    try {
      await this.process.closeStdin();
    } catch (e) {
      throw this.stdinError(e);
    }
  }

  private assertStdin(): void {
    const code = this.exitCode;
    if (code !== undefined) throw new Error(`Process ${this.pid} has already exited with code ${code}`);
    if (this.stdinMode === "ignore") throw new Error(`Process ${this.pid} was spawned with stdinMode 'ignore': it has no stdin`);
  }

  private stdinError(e: unknown): unknown {
    if (e instanceof ProcessExitedError) {
      return new Error(`Process ${this.pid} has already exited`, { cause: e });
    }
    return e;
  }
}

/** Mastra's process manager for a `SandpoolSandbox` (through {@link SessionSandbox}). */
export class SandpoolProcessManager extends SandboxProcessManager<SessionSandbox> {
  override async spawn(command: string, options: SpawnProcessOptions = {}): Promise<ProcessHandle> {
    const sandbox = this.sandbox;
    // The base class merged the sandbox's env overlay into options.env (per-spawn values win).
    const env = mergeEnv(this.env, options.env);
    const cwd = sandbox.resolveCwd(options.cwd);
    const stdinMode = options.stdinMode ?? "pipe";
    const proc = await sandbox.withSession((s) => s.spawn({ shell: command }, { env, cwd, stdin: stdinMode }));
    proc.command = command;
    const handle = new SandpoolProcessHandle(proc, options, stdinMode);
    this._tracked.set(handle.pid, handle);
    return handle;
  }

  /** Every background process of the session (this client's or not), running and exited. */
  override async list(): Promise<ProcessInfo[]> {
    const ps = await this.sandbox.withSession((s) => s.ps());
    return ps.map((p) => {
      const running = p.state === "running";
      const info: ProcessInfo = { pid: p.pid, running };
      if (p.command) info.command = p.command;
      if (!running) info.exitCode = processExitCode(p.exitCode, p.signal);
      return info;
    });
  }

  /**
   * The handle of `pid`, refreshed (exit status, output lost live); for a pid not spawned here,
   * a new handle attached to it; undefined for a pid the session does not have.
   */
  override async get(pid: string | number): Promise<ProcessHandle | undefined> {
    const key = String(pid);
    const tracked = this._tracked.get(key);
    if (tracked instanceof SandpoolProcessHandle) {
      await tracked.refresh();
      return tracked;
    }
    if (tracked !== undefined) return tracked;
    try {
      const proc = await this.sandbox.withSession((s) => s.process(key));
      const handle = new SandpoolProcessHandle(proc);
      this._tracked.set(key, handle);
      return handle;
    } catch (e) {
      if (e instanceof NotFoundError || (e instanceof SessionError && e.code === "bad_field")) return undefined;
      throw e;
    }
  }

  /** @internal Forget every handle (the session was stopped or destroyed: they ended with it). */
  async endAll(): Promise<void> {
    const handles = [...this._tracked.values()];
    await Promise.all(
      handles.map(async (h) => {
        if (h instanceof SandpoolProcessHandle) await h.refresh().catch(() => undefined);
      }),
    );
  }
}
