/**
 * Background processes of a session (PROTOCOL.md section 15): the handle returned by
 * `Session.spawn()` and the client's one pattern subscription per session that carries their
 * live output.
 *
 * Live output comes from `sandpool:pout:<sid>:<pid>`, at most once; the `output` operation is the
 * durable view (the last 1 MiB of each stream). The pid is only known once `spawn` answers, but
 * the process may write before that: so the client subscribes to `sandpool:pout:<sid>:*` before
 * sending `spawn` and keeps the messages of pids nobody claimed yet until the spawn answers.
 *
 * A handle delivers output in one of two modes, so that what its listeners get is always a prefix
 * of what the process wrote, each byte once:
 * - live: events in `seq` order as they arrive (a handle made by `spawn` starts here);
 * - durable: after a sequence gap, an undecodable message or a lost subscriber connection, no
 *   more output is taken from events; `refresh()`, `wait()` and the exit deliver what the
 *   `output` operation shows beyond the bytes already delivered. A stream whose durable view was
 *   truncated (over 1 MiB) can no longer be aligned with what was delivered and is not delivered
 *   further (the protocol gives no byte offsets: see the README).
 * A handle made for an existing pid (`Session.process()`) starts in durable mode from the output
 * the daemon kept.
 */

import type { PatternListener, Subscriber } from "./connection.js";
import { NotFoundError, SessionNotFoundError, SessionStoppedError, WaitTimeoutError } from "./errors.js";
import type { Keys } from "./keys.js";
import type { ProcessOutputOptions, ProcessSession } from "./process_session.js";
import {
  decodeProcessEvent,
  ProcessExitedEvent,
  ProcessOutputEvent,
  type ProcessOutput,
} from "./session_protocol.js";

/** Called with each chunk of a background process's output, in order. */
export type ProcessOutputListener = (stream: "stdout" | "stderr", data: Buffer) => void;

/** How long the `output` operation waits for an exit per request in {@link SessionProcess.wait}. */
const WAIT_SLICE_MS = 30000;

/** Output kept for a handle's first listener. */
const MAX_EARLY_BYTES = 4 << 20;

/** Messages kept per unclaimed pid while a spawn is under way. */
const MAX_PENDING_MESSAGES = 10000;

/**
 * A background process of a session. `pid` is the daemon's id for it (`p1`, `p2`, ...), unique for
 * the session's life.
 */
export class SessionProcess {
  /** The session it runs in (the `Session` that made this handle). */
  readonly session: ProcessSession;
  readonly pid: string;
  /** The command line, when known (from `spawn` or `ps`). */
  command: string | null;
  /** `"pipe"` or `"ignore"`, when spawned by this handle. */
  readonly stdinMode: "pipe" | "ignore" | null;

  private _exitCode: number | null = null;
  private _signal: number | null = null;
  private exitKnown = false;
  private final: ProcessOutput | null = null;
  private waiting: Promise<ProcessOutput> | null = null;
  private mode: "live" | "durable";
  private expectedSeq = 0;
  private readonly delivered = { stdout: 0, stderr: 0 };
  /** The stream's delivered bytes are a prefix of the durable view when it is not truncated. */
  private readonly aligned = { stdout: true, stderr: true };
  private readonly listeners = new Set<ProcessOutputListener>();
  /**
   * Output delivered before any listener was added (a spawned process may write before `spawn`
   * returns): kept, up to {@link MAX_EARLY_BYTES}, for the first listener; `null` once given.
   */
  private early: { stream: "stdout" | "stderr"; data: Buffer }[] | null = [];
  private earlyBytes = 0;
  private readonly exitListeners = new Set<() => void>();
  /** Wakes {@link waitLoop} when the exit is known or live events are lost. */
  private readonly wakers = new Set<() => void>();
  private detach: (() => void) | null = null;

  /** @internal Use `Session.spawn()` or `Session.process()`. */
  constructor(
    session: ProcessSession,
    pid: string,
    opts: { command?: string | null; stdinMode?: "pipe" | "ignore" | null; live: boolean },
  ) {
    this.session = session;
    this.pid = pid;
    this.command = opts.command ?? null;
    this.stdinMode = opts.stdinMode ?? null;
    this.mode = opts.live ? "live" : "durable";
  }

  /** The exit code once the process has exited by itself; `null` while running or if killed by a signal. */
  get exitCode(): number | null {
    return this._exitCode;
  }

  /** The signal that ended it, if any. */
  get signal(): number | null {
    return this._signal;
  }

  /** False once this handle knows the process has exited. */
  get running(): boolean {
    return !this.exitKnown;
  }

  /**
   * Listen to its output (Buffers, in order). The first listener also gets the output that came
   * before any listener was added (up to 4 MiB). Returns a function that removes the listener.
   */
  onOutput(listener: ProcessOutputListener): () => void {
    this.listeners.add(listener);
    const early = this.early;
    this.early = null;
    if (early !== null) for (const { stream, data } of early) listener(stream, data);
    return () => this.listeners.delete(listener);
  }

  /** Called once when this handle learns that the process exited. */
  onExit(listener: () => void): () => void {
    if (this.exitKnown) {
      queueMicrotask(listener);
      return () => undefined;
    }
    this.exitListeners.add(listener);
    return () => this.exitListeners.delete(listener);
  }

  /**
   * The durable output (`output` operation): the last 1 MiB of each stream, whether it runs, its
   * exit. With `tailLines`, only the last lines; with `wait`, once it has exited (or
   * `waitTimeoutMs`, default 30 s, has passed: then `running` is still true).
   */
  output(opts: ProcessOutputOptions = {}): Promise<ProcessOutput> {
    return this.session.processOutput(this.pid, opts);
  }

  /**
   * Read the durable view now: learn whether it exited, and in durable mode deliver the output
   * the listeners have not had. Returns that view.
   */
  async refresh(): Promise<ProcessOutput> {
    if (this.final !== null) return this.final;
    let out: ProcessOutput;
    try {
      out = await this.output();
    } catch (e) {
      return this.endedWithSession(e);
    }
    if (!out.running) return this.finish(out);
    if (this.mode === "durable") this.deliverDurable(out);
    return out;
  }

  /**
   * Wait until it exits and return its durable output (repeatable: later calls return the same).
   * `timeoutMs` bounds this call only (`WaitTimeoutError`; the process goes on); aborting `signal`
   * stops waiting (the process goes on: use {@link kill}).
   */
  async wait(opts: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<ProcessOutput> {
    if (this.final !== null) return this.final;
    this.waiting ??= this.waitLoop().finally(() => {
      this.waiting = null;
    });
    const stops: Promise<never>[] = [];
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const started = Date.now();
    if (opts.timeoutMs !== undefined) {
      stops.push(
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new WaitTimeoutError(this.pid, Date.now() - started)), opts.timeoutMs);
          timer.unref();
        }),
      );
    }
    if (opts.signal) {
      const signal = opts.signal;
      stops.push(
        new Promise<never>((_, reject) => {
          onAbort = () => reject(signal.reason ?? new Error("aborted"));
          if (signal.aborted) onAbort();
          else signal.addEventListener("abort", onAbort, { once: true });
        }),
      );
    }
    try {
      return await Promise.race([this.waiting, ...stops]);
    } finally {
      clearTimeout(timer);
      if (onAbort) opts.signal?.removeEventListener("abort", onAbort);
    }
  }

  /**
   * While live events are followed, the `exited` event says when it ends (with a look at the
   * durable view every {@link WAIT_SLICE_MS} in case that event was lost unnoticed); otherwise the
   * `output` operation waits for the exit on the daemon's side.
   */
  private async waitLoop(): Promise<ProcessOutput> {
    for (;;) {
      if (this.final !== null) return this.final;
      const followingLive = this.mode === "live" && this.detach !== null;
      if (followingLive && !this.exitKnown) {
        let timer: NodeJS.Timeout | undefined;
        await new Promise<void>((resolve) => {
          this.wakers.add(resolve);
          timer = setTimeout(resolve, WAIT_SLICE_MS);
          timer.unref();
        });
        clearTimeout(timer);
        this.wakers.clear();
        if (this.mode === "live" && !this.exitKnown && this.detach !== null) {
          // Woken by the slice: make sure it still runs.
          const out = await this.outputOrEnded({});
          if (!out.running) return this.finish(out);
        }
        continue;
      }
      const out = await this.outputOrEnded(this.exitKnown ? {} : { wait: true, waitTimeoutMs: WAIT_SLICE_MS });
      if (!out.running) return this.finish(out);
    }
  }

  private async outputOrEnded(opts: ProcessOutputOptions): Promise<ProcessOutput> {
    try {
      return await this.output(opts);
    } catch (e) {
      return this.endedWithSession(e);
    }
  }

  private wake(): void {
    for (const w of [...this.wakers]) w();
    this.wakers.clear();
  }

  /** Write to its stdin (`stdin` operation). `ProcessExitedError` once it has exited. */
  async write(data: Uint8Array | string): Promise<void> {
    await this.session.writeStdin(this.pid, data);
  }

  /** Close its stdin (EOF). `ProcessExitedError` once it has exited. */
  async closeStdin(): Promise<void> {
    await this.session.writeStdin(this.pid, new Uint8Array(0), { close: true });
  }

  /**
   * Send `signal` (default 15, SIGTERM) to its whole process group. Resolves false if it had
   * already exited.
   */
  async kill(signal = 15): Promise<boolean> {
    if (this.final !== null) return false;
    return this.session.killProcess(this.pid, signal);
  }

  // -- fed by the hub ----------------------------------------------------------------------

  /** @internal */
  setDetach(detach: () => void): void {
    this.detach = detach;
  }

  /** @internal A message of `sandpool:pout:<sid>:<pid>`. */
  onLiveMessage(data: Buffer): void {
    if (this.final !== null) return;
    let ev;
    try {
      ev = decodeProcessEvent(data);
    } catch {
      this.mode = "durable";
      this.wake();
      return;
    }
    if (this.mode === "live") {
      if (ev.seq !== this.expectedSeq) {
        this.mode = "durable";
        this.wake();
      }
      this.expectedSeq = ev.seq + 1;
    }
    if (ev instanceof ProcessExitedEvent) {
      this.noteExit(ev.exitCode, ev.signal);
      // In durable mode, the output not yet delivered comes with the durable view.
      if (this.mode === "durable") void this.refresh().catch(() => undefined);
      else this.detachFromHub();
      return;
    }
    if (this.mode === "live" && ev instanceof ProcessOutputEvent) this.deliver(ev.type, ev.data);
  }

  /** @internal The subscriber connection was lost: events may have been missed. */
  onLiveLost(): void {
    this.mode = "durable";
    this.wake();
  }

  /** @internal A handle joining an existing process: deliver what the daemon kept. */
  startFrom(out: ProcessOutput): void {
    for (const stream of ["stdout", "stderr"] as const) {
      const data = out[stream];
      this.aligned[stream] = !out[`${stream}Truncated`];
      if (data.length > 0) this.deliver(stream, data);
    }
    if (!out.running) this.finish(out);
  }

  // -- internals ---------------------------------------------------------------------------

  private deliver(stream: "stdout" | "stderr", data: Buffer): void {
    this.delivered[stream] += data.length;
    if (this.early !== null) {
      if (this.earlyBytes + data.length <= MAX_EARLY_BYTES) {
        this.early.push({ stream, data });
        this.earlyBytes += data.length;
      }
      return;
    }
    for (const l of [...this.listeners]) l(stream, data);
  }

  private deliverDurable(out: ProcessOutput): void {
    for (const stream of ["stdout", "stderr"] as const) {
      if (out[`${stream}Truncated`] || !this.aligned[stream]) {
        this.aligned[stream] = false;
        continue;
      }
      const full = out[stream];
      if (full.length > this.delivered[stream]) this.deliver(stream, full.subarray(this.delivered[stream]));
    }
  }

  private noteExit(exitCode: number | null, signal: number | null): void {
    if (this.exitKnown) return;
    this.exitKnown = true;
    this._exitCode = exitCode;
    this._signal = signal;
    for (const l of [...this.exitListeners]) l();
    this.exitListeners.clear();
    this.wake();
  }

  private finish(out: ProcessOutput): ProcessOutput {
    if (this.final !== null) return this.final;
    // Events still in flight after the exit are ignored from here on: in durable mode the
    // durable view supplies what was not delivered; in live mode everything came in order.
    if (this.mode === "durable") this.deliverDurable(out);
    this.final = out;
    this.noteExit(out.exitCode, out.signal);
    this.detachFromHub();
    return out;
  }

  /**
   * The session was stopped or destroyed under the process (or, resumed since, no longer knows
   * it): it ended with the session (SIGKILL).
   */
  private endedWithSession(e: unknown): ProcessOutput {
    if (!(e instanceof SessionStoppedError || e instanceof SessionNotFoundError || e instanceof NotFoundError)) throw e;
    const out: ProcessOutput = Object.freeze({
      stdout: Buffer.alloc(0),
      stderr: Buffer.alloc(0),
      stdoutTruncated: false,
      stderrTruncated: false,
      running: false,
      exitCode: this.exitKnown ? this._exitCode : null,
      signal: this.exitKnown ? this._signal : 9,
    });
    return this.finish(out);
  }

  private detachFromHub(): void {
    const d = this.detach;
    this.detach = null;
    d?.();
  }
}

interface HubSession {
  refs: number;
  ready: Promise<void>;
  listener: PatternListener;
  readonly procs: Map<string, SessionProcess>;
  spawning: number;
  /** Messages of pids nobody claimed yet, kept while a spawn is under way. */
  readonly pending: Map<string, Buffer[]>;
  /** The connection was lost while the pending messages were kept. */
  pendingLost: boolean;
}

/**
 * The live output of background processes, for every session this client follows: one
 * PSUBSCRIBE per session on the client's subscriber connection, while a spawn is under way or a
 * process spawned here runs.
 */
export class ProcessHub {
  private readonly sessions = new Map<string, HubSession>();

  constructor(
    private readonly subscriber: () => Subscriber,
    private readonly keys: Keys,
  ) {}

  /** Number of sessions whose processes are followed. */
  get size(): number {
    return this.sessions.size;
  }

  /**
   * Start a spawn in `sid`: the session's pattern is subscribed (confirmed) before this resolves.
   * Pair with {@link endSpawn}.
   */
  async beginSpawn(sid: string): Promise<void> {
    let s = this.sessions.get(sid);
    if (s === undefined) {
      const base = this.keys.processOutput(sid, "");
      const entry: HubSession = {
        refs: 0,
        ready: Promise.resolve(),
        listener: {
          onPatternMessage: (channel, data) => this.dispatch(entry, base, channel, data),
          onConnectionLost: () => {
            for (const p of entry.procs.values()) p.onLiveLost();
            if (entry.spawning > 0) entry.pendingLost = true;
          },
        },
        procs: new Map(),
        spawning: 0,
        pending: new Map(),
        pendingLost: false,
      };
      entry.ready = this.subscriber().addPattern(this.keys.processOutputPattern(sid), entry.listener);
      this.sessions.set(sid, entry);
      s = entry;
    }
    s.refs++;
    s.spawning++;
    try {
      await s.ready;
    } catch (e) {
      this.endSpawn(sid, null);
      throw e;
    }
  }

  /**
   * The spawn ended: with `proc`, that process is followed from its first message (those that
   * arrived before are replayed) until it exits; without (the spawn failed), nothing is.
   */
  endSpawn(sid: string, proc: SessionProcess | null): void {
    const s = this.sessions.get(sid);
    if (s === undefined) return;
    s.spawning--;
    if (proc !== null) {
      s.procs.set(proc.pid, proc);
      const pending = s.pending.get(proc.pid) ?? [];
      s.pending.delete(proc.pid);
      if (s.pendingLost) proc.onLiveLost();
      proc.setDetach(() => {
        if (s.procs.get(proc.pid) === proc) s.procs.delete(proc.pid);
        this.release(sid, s);
      });
      for (const m of pending) proc.onLiveMessage(m);
    } else {
      this.release(sid, s);
    }
    if (s.spawning === 0) {
      s.pending.clear();
      s.pendingLost = false;
    }
  }

  private release(sid: string, s: HubSession): void {
    s.refs--;
    if (s.refs > 0 || this.sessions.get(sid) !== s) return;
    this.sessions.delete(sid);
    this.subscriber().removePattern(this.keys.processOutputPattern(sid), s.listener);
  }

  private dispatch(s: HubSession, base: string, channel: string, data: Buffer): void {
    if (!channel.startsWith(base)) return;
    const pid = channel.slice(base.length);
    if (pid === "" || pid.includes(":")) return; // a process of session "<sid>:..."
    const proc = s.procs.get(pid);
    if (proc !== undefined) {
      proc.onLiveMessage(data);
      return;
    }
    if (s.spawning === 0) return;
    let list = s.pending.get(pid);
    if (list === undefined) {
      list = [];
      s.pending.set(pid, list);
    }
    if (list.length < MAX_PENDING_MESSAGES) list.push(data);
  }

  /** Stop following every process (the client is closing). */
  clear(): void {
    this.sessions.clear();
  }
}
