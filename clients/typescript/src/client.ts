/**
 * The sandpool client: submit jobs, follow them live, fetch results, cancel.
 *
 * Everything here follows docs/PROTOCOL.md; the daemon is never contacted directly, only Redis.
 * A {@link Client} owns two connections, shared by every call: one for commands and one
 * subscriber connection that carries the live events of every job being followed. Batches
 * (`submitMany`, `map`, `completions`) are batch.ts (what to do) and batch_io.ts (doing it).
 */

import { randomBytes } from "node:crypto";

import type { ChainableCommander } from "ioredis";

import { asJob, encodeEntry, mapDefaultsOf, MapState, type Completion, type JobLike, type MapDefaults, type MapProgress } from "./batch.js";
import { completionRecords, runMap, xaddEntries, type BatchBackend } from "./batch_io.js";
import { Connections, isConnectionError, replies, type ExtraRedisOptions } from "./connection.js";
import { ClientClosedError, InvalidArgumentError, SandpoolError, WaitTimeoutError } from "./errors.js";
import { Follower, ResultWaiter, type Pollable } from "./follower.js";
import { Keys } from "./keys.js";
import {
  buildJobMap,
  checkJobId,
  checkTemplateName,
  decodeResult,
  encodeJob,
  type Job,
  type JobEvent,
  type Result,
  type RESULT_STORED,
} from "./protocol.js";
import { ProcessHub } from "./process.js";
import { checkSessionId, Session, type FollowOptions, type OperationEventStream, type SessionBackend } from "./session.js";
import type { CreateSessionOptions } from "./session_options.js";
import {
  decodeSessionRecord,
  decodeSnapshotRecord,
  type SessionRecord,
  type SessionState,
  type SnapshotRecord,
} from "./session_protocol.js";
import { DEFAULT_URL, parseRedisUrl, type RedisAddress } from "./url.js";

/** Environment variable holding the Redis URL when none is given. */
export const URL_ENV = "SANDPOOL_REDIS_URL";

/** TTL the cancel block of PROTOCOL.md section 7 puts on the job hash. */
export const CANCEL_TTL_SECONDS = 86400;

/** Called with each chunk of a job's output, in order. */
export type OutputCallback = (chunk: Buffer) => void;

export interface ClientOptions {
  /**
   * `redis://[user:password@]host[:port][/db]` or `unix:///path[?db=N][&user=U][&password=P]`;
   * default: `$SANDPOOL_REDIS_URL`, else `redis://127.0.0.1:6379`.
   */
  url?: string | undefined;
  /** Key prefix; must match the daemon's `--prefix`. Default `sandpool`. */
  prefix?: string | undefined;
  /** Queue name; must match the daemon's `--queue`. Default `default`. */
  queue?: string | undefined;
  /**
   * How long a followed job may be quiet on its channel (or have lost live events) before the
   * client reads its result key, the durable record. Default 1000 ms.
   */
  pollIntervalMs?: number | undefined;
  /**
   * How long a command may keep failing because Redis is unreachable (a restart) before the call
   * fails with `RedisUnavailableError`. Default 30000 ms.
   */
  retryWindowMs?: number | undefined;
  /**
   * How long a session operation (other than `exec`/`code`, which wait for their command) may
   * take before it rejects with `WaitTimeoutError`. Default 120000 ms.
   */
  opTimeoutMs?: number | undefined;
  /** Name of the client's connections in CLIENT LIST (`<name>:cmd`, `<name>:sub`). Default `sandpool-ts`. */
  connectionName?: string | undefined;
  /**
   * Extra ioredis options (TLS, timeouts...). The address, database and credentials come from
   * `url`; `keyPrefix` is ignored (use `prefix`), and so are the options that make reconnection
   * work (retries, offline queue, resubscription).
   */
  redisOptions?: ExtraRedisOptions | undefined;
}

export interface EventsOptions {
  /**
   * Aborting cancels the job (PROTOCOL.md section 7); following goes on until its `exited`
   * event, which then carries the result (outcome `cancelled` unless the job ended first). To
   * stop following without cancelling, break out of the loop instead.
   */
  signal?: AbortSignal | undefined;
  /** Give up waiting after this long with `WaitTimeoutError` (the job goes on). */
  waitTimeoutMs?: number | undefined;
}

export interface RunOptions extends EventsOptions {
  /** Called with each stdout chunk as it arrives. */
  onStdout?: OutputCallback | undefined;
  /** Called with each stderr chunk as it arrives. */
  onStderr?: OutputCallback | undefined;
}

export interface SubmitManyOptions {
  /** A completion stream name: every job's end is recorded on it (PROTOCOL.md section 21). */
  notify?: string | undefined;
  /** The records carry the results (up to 64 KiB each). */
  notifyResult?: boolean | undefined;
}

export interface CompletionsOptions {
  /** Read the records after this stream id (default "0", from the first). */
  after?: string | undefined;
  /** How long one XREAD blocks (default 1000 ms); the signal is looked at between reads. */
  blockMs?: number | undefined;
  /** Aborting ends the iteration. */
  signal?: AbortSignal | undefined;
}

/**
 * Options of {@link Client.map}. The job options ({@link MapDefaults}: `template`, `env`, `cwd`,
 * `timeoutMs`, ...) are defaults for the jobs that leave them unset.
 */
export interface MapOptions extends MapDefaults {
  /** At most this many jobs submitted and not finished. Default 64. */
  concurrency?: number | undefined;
  /** Yield in input order (default: as they finish). */
  ordered?: boolean | undefined;
  /** Called after each result. */
  onProgress?: ((p: MapProgress) => void) | undefined;
  /** Aborting stops the map and cancels the jobs in flight. */
  signal?: AbortSignal | undefined;
}

export interface ResultOptions {
  /** Wait until the result exists. */
  wait?: boolean | undefined;
  /** With `wait`: give up after this long and return `null`. */
  timeoutMs?: number | undefined;
}

/**
 * A snapshot of `sandpool:job:<id>` plus whether `sandpool:result:<id>` exists.
 *
 * `state` is `null` while the job is queued (no hash, or only `cancel`), then `"running"`, then
 * `"done"`. The job is terminal exactly when `hasResult` is true. `fields` holds every field of
 * the hash, decoded as UTF-8.
 */
export class JobStatus {
  constructor(
    readonly jobId: string,
    readonly state: string | null,
    readonly entry: string | null,
    readonly consumer: string | null,
    readonly attempt: number | null,
    readonly cancelRequested: boolean,
    readonly hasResult: boolean,
    readonly fields: Readonly<Record<string, string>>,
  ) {}

  /** True once the result is stored (PROTOCOL.md section 4). */
  get terminal(): boolean {
    return this.hasResult;
  }
}

/**
 * The events of one job, as an async iterator: `started`, `stdout`/`stderr` chunks, and last
 * `exited` with the result. `id` is the job's id (useful when {@link Client.events} generated it).
 */
export class JobEventStream implements AsyncIterableIterator<JobEvent> {
  constructor(
    readonly id: string,
    private readonly gen: AsyncGenerator<JobEvent, void, undefined>,
  ) {}

  next(): Promise<IteratorResult<JobEvent, void>> {
    return this.gen.next();
  }

  /** Stop following (the job is not affected). */
  return(): Promise<IteratorResult<JobEvent, void>> {
    return this.gen.return(undefined);
  }

  [Symbol.asyncIterator](): JobEventStream {
    return this;
  }
}

/** A random 128-bit job id as 32 lowercase hex digits. */
export function newJobId(): string {
  return randomBytes(16).toString("hex");
}

function checkPositive(name: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) {
    throw new InvalidArgumentError(`${name} must be a positive number of milliseconds (got ${String(v)})`);
  }
  return v;
}

function checkName(name: string, v: unknown): string {
  if (typeof v !== "string" || v === "") throw new InvalidArgumentError(`${name} must be a non-empty string`);
  return v;
}

/**
 * A connection to one sandpool deployment (a Redis server, a key prefix and a queue).
 *
 * No connection is made until the first command. Close the client with {@link Client.close}
 * when done: its connections keep the process alive.
 */
export class Client {
  readonly address: RedisAddress;
  readonly prefix: string;
  readonly queue: string;
  readonly keys: Keys;
  readonly pollIntervalMs: number;
  readonly retryWindowMs: number;
  readonly opTimeoutMs: number;
  private readonly conns: Connections;
  /**
   * The first 12 hex digits of every id this client makes (jobs without an id of their own,
   * session operations): their events come through one pattern subscription (connection.ts).
   */
  private readonly idTag = randomBytes(6).toString("hex");
  private hub: ProcessHub | null = null;
  private backendCache: SessionBackend | null = null;
  private batchCache: BatchBackend | null = null;
  private readonly followers = new Set<Pollable>();
  private pollTimer: NodeJS.Timeout | null = null;
  private polling = false;
  private closed = false;

  constructor(url?: string | ClientOptions, options: ClientOptions = {}) {
    const opts: ClientOptions = typeof url === "object" && url !== null ? { ...url } : { ...options, url };
    const u = opts.url ?? (process.env[URL_ENV] || DEFAULT_URL);
    this.address = parseRedisUrl(u);
    this.prefix = checkName("prefix", opts.prefix ?? "sandpool");
    this.queue = checkName("queue", opts.queue ?? "default");
    this.pollIntervalMs = checkPositive("pollIntervalMs", opts.pollIntervalMs ?? 1000);
    this.retryWindowMs = checkPositive("retryWindowMs", opts.retryWindowMs ?? 30000);
    this.opTimeoutMs = checkPositive("opTimeoutMs", opts.opTimeoutMs ?? 120000);
    this.keys = new Keys(this.prefix);
    this.conns = new Connections(this.address, {
      retryWindowMs: this.retryWindowMs,
      redisOptions: opts.redisOptions,
      connectionName: opts.connectionName ?? "sandpool-ts",
      ownChannelPrefix: this.keys.out(this.idTag),
    });
  }

  toString(): string {
    return `Client(${this.address.redacted()}, prefix=${this.prefix}, queue=${this.queue})`;
  }

  /** A new id of this client's: its tag and 96 random bits, 36 lowercase hex digits. */
  private newId(): string {
    return this.idTag + randomBytes(12).toString("hex");
  }

  // -- lifecycle ---------------------------------------------------------------------------

  /**
   * Close the client's connections. Calls still waiting reject with `ClientClosedError`; jobs
   * are not affected.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.pollTimer) clearInterval(this.pollTimer);
    this.pollTimer = null;
    for (const f of [...this.followers]) f.fail(new ClientClosedError());
    this.hub?.clear();
    await this.conns.close();
  }

  private checkOpen(): void {
    if (this.closed) throw new ClientClosedError();
  }

  // -- submitting --------------------------------------------------------------------------

  /**
   * Enqueue a job and return its id (a random 128-bit hex id unless `job.id` is given).
   *
   * Throws `InvalidArgumentError` for input no daemon could accept; limits are judged by the
   * daemon (it clamps, or stores an error result). Submitting an id that already ran is a no-op
   * on the daemon side (idempotency): the original result stands. Does not wait; see
   * {@link result} and {@link events}.
   */
  async submit(job: Job): Promise<string> {
    this.checkOpen();
    const [id, payload] = this.encode(job);
    await this.xadd(id, payload);
    return id;
  }

  /**
   * Enqueue many jobs in pipelined round trips (a pipeline of XADDs per 1000) and return their
   * ids in order. A job is a {@link Job} or a shell line. Every job is checked before anything
   * is sent. With `notify`, every job's end is recorded on that completion stream: follow it
   * with {@link completions}. Resubmitting the same ids after a crash runs nothing twice.
   */
  async submitMany(jobs: Iterable<JobLike>, options: SubmitManyOptions = {}): Promise<string[]> {
    this.checkOpen();
    const notify = options.notify ?? null;
    const encoded: [string, (string | Buffer)[]][] = [];
    let i = 0;
    for (const j of jobs) {
      try {
        const job = asJob(j);
        encoded.push(encodeEntry(job, job.id ?? this.newId(), notify, options.notifyResult ?? false));
      } catch (e) {
        if (e instanceof InvalidArgumentError) throw new InvalidArgumentError(`jobs[${i}]: ${e.message}`);
        throw e;
      }
      i++;
    }
    await xaddEntries(this.batchBackend, encoded);
    return encoded.map(([id]) => id);
  }

  /**
   * The records of the completion stream `notify` (PROTOCOL.md section 21) from `after`
   * (default "0"), forever: stop iterating (or abort) when you have what you need. Remember
   * `streamId` to go on from there after a reconnect. Reads on a connection of its own.
   */
  async *completions(notify: string, options: CompletionsOptions = {}): AsyncGenerator<{ streamId: string; completion: Completion }, void> {
    this.checkOpen();
    checkJobId(notify);
    yield* completionRecords(this.batchBackend, notify, options.after ?? "0", options.blockMs ?? 1000, options.signal);
  }

  /**
   * Run many jobs and yield each {@link Result} as it finishes (`ordered`: in input order), with at
   * most `concurrency` (default 64) submitted and not finished. Jobs are {@link Job}s or shell
   * lines, read lazily; the job options in `options` are defaults for jobs that leave them unset.
   * A job's failure is its Result (errors as values); only the client's own problems throw.
   * `onProgress` gets a {@link MapProgress} after each result. Stopping early (`break`,
   * `return()`, an exception, or `signal` aborting, which a Ctrl-C handler can do: it ends a
   * wait for records at once) cancels the jobs in flight. Follows one completion stream
   * (PROTOCOL.md section 21), deleted at the end (records of jobs it cancelled that come later
   * make it again; it then expires after the daemon's result TTL).
   */
  async *map(jobs: Iterable<JobLike>, options: MapOptions = {}): AsyncGenerator<Result, void> {
    this.checkOpen();
    const defaults = mapDefaultsOf(options);
    const total = Array.isArray(jobs) ? jobs.length : null;
    const state = new MapState(jobs, options.concurrency ?? 64, options.ordered ?? false, total, options.onProgress, defaults);
    yield* runMap(this.batchBackend, state, options.signal);
  }

  private encode(job: Job): [string, Buffer] {
    if (job === null || typeof job !== "object") {
      throw new InvalidArgumentError(`a job must be an object, not ${job === null ? "null" : typeof job}`);
    }
    const id = job.id ?? this.newId();
    return [id, encodeJob(buildJobMap({ ...job, id }))];
  }

  private async xadd(id: string, payload: Buffer): Promise<void> {
    const queueKey = this.keys.queue(this.queue);
    await this.conns.call(`XADD job ${id}`, (r) => r.xadd(queueKey, "*", "id", id, "job", payload));
  }

  /**
   * Submit a job, deliver its output live, and resolve with its {@link Result}.
   *
   * Subscribes to the job's channel before submitting, so no event is missed while the
   * subscription holds. `onStdout`/`onStderr` get each chunk in order. If live events are lost
   * (a sequence gap, a dropped connection), no further chunks are delivered live; the rest of
   * the output is delivered from the stored result just before the promise resolves. So, for a
   * job run once, the chunks of each stream add up to `result.stdout` / `result.stderr` exactly
   * (if the job is re-run after its worker was lost, chunks of the lost attempt may come first).
   *
   * Aborting `signal` cancels the job; the promise then resolves with the result (outcome
   * `cancelled`, unless the job ended first). Rejects with `WaitTimeoutError` if no result
   * arrives within `waitTimeoutMs` (the job goes on; fetch it later with {@link result}). An
   * exception thrown by a callback rejects the promise and ends the wait, not the job.
   */
  async run(job: Job, options: RunOptions = {}): Promise<Result> {
    const { onStdout, onStderr, ...rest } = options;
    for await (const ev of this.events(job, rest)) {
      if (ev.type === "stdout") onStdout?.(ev.data);
      else if (ev.type === "stderr") onStderr?.(ev.data);
      else if (ev.type === "exited") return ev.result;
    }
    throw new SandpoolError(`the events of job ${job.id ?? "?"} ended without an exited event`);
  }

  // -- following ---------------------------------------------------------------------------

  /**
   * The live events of a job: `started`, `stdout`, `stderr`, then `exited` (always last, with
   * the result).
   *
   * Given a {@link Job}, submits it when iteration begins, after subscribing, so that every
   * event is seen (its id is the stream's `id`). Given a job id, follows that job: it subscribes,
   * then checks the result key, so a finished job yields just its `exited` event (`seq` null);
   * events published before the subscription are not seen. If live events are lost, no further
   * output is yielded live; the `exited` event (and, when the job was followed from its start,
   * the missing tail of the output as events with `seq` null) then comes from the stored result.
   * Event types this client does not know are skipped. Invalid input throws at once.
   */
  events(jobOrId: Job | string, options: EventsOptions = {}): JobEventStream {
    this.checkOpen();
    if (options.waitTimeoutMs !== undefined) checkPositive("waitTimeoutMs", options.waitTimeoutMs);
    if (typeof jobOrId === "string") {
      const id = checkJobId(jobOrId);
      return new JobEventStream(id, this.follow(id, null, options));
    }
    const [id, payload] = this.encode(jobOrId);
    return new JobEventStream(id, this.follow(id, () => this.xadd(id, payload), options));
  }

  /**
   * Follow the job events of `id` (a job, or a session's `exec`/`code` operation). With `submit`,
   * the id is new: `submit` sends it once the channel is subscribed, and the events are followed
   * from the start; without, an existing id is joined.
   */
  private async *follow(
    id: string,
    submit: (() => Promise<void>) | null,
    options: EventsOptions,
  ): AsyncGenerator<JobEvent> {
    this.checkOpen();
    const started = Date.now();
    const { signal, waitTimeoutMs } = options;
    const channel = this.keys.out(id);
    const sub = this.conns.subscriber;
    let timer: NodeJS.Timeout | undefined;
    const onAbort = (): void => {
      this.cancel(id).catch((e: unknown) => follower.fail(e));
    };
    const cleanup = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      this.followers.delete(follower);
      sub.remove(channel, follower);
    };
    const follower: Follower = new Follower(id, submit !== null, cleanup);
    const failure = follower.failure;
    if (waitTimeoutMs !== undefined) {
      timer = setTimeout(() => follower.fail(new WaitTimeoutError(id, Date.now() - started)), waitTimeoutMs);
      timer.unref();
    }
    const setup = async (): Promise<void> => {
      await sub.add(channel, follower);
      if (submit !== null) {
        if (signal?.aborted) await this.cancel(id);
        await submit();
      } else {
        const stored = await this.getResult(id);
        if (stored !== null) follower.onStoredResult(stored);
      }
    };
    this.followers.add(follower);
    // Wait for `p` unless following fails first (a wait timeout, close()); `p` may then still
    // settle later, unobserved.
    const unlessFailed = async (p: Promise<void>): Promise<void> => {
      p.catch(() => undefined);
      await Promise.race([p, failure]);
    };
    try {
      if (signal?.aborted && submit === null) await unlessFailed(this.cancel(id));
      signal?.addEventListener("abort", onAbort, { once: true });
      await unlessFailed(setup());
      if (!follower.done) {
        follower.lastHeard = follower.lastPoll = Date.now();
        follower.pollable = true;
        this.ensurePoller();
      }
      for (;;) {
        const ev = await follower.next();
        if (ev === null) return;
        yield ev;
      }
    } finally {
      if (!follower.done) follower.fail(new SandpoolError("stopped following"));
      cleanup();
    }
  }

  /**
   * The stored result of a job, or `null` if there is none (yet, or any more: TTL).
   *
   * With `wait: true`, waits until the result exists, or resolves `null` once `timeoutMs` (if
   * given) has passed.
   */
  async result(id: string, options: ResultOptions = {}): Promise<Result | null> {
    this.checkOpen();
    checkJobId(id);
    if (!options.wait) return this.getResult(id);
    try {
      for await (const ev of this.events(id, { waitTimeoutMs: options.timeoutMs })) {
        if (ev.type === "exited") return ev.result;
      }
    } catch (e) {
      if (e instanceof WaitTimeoutError) return null;
      throw e;
    }
    return null;
  }

  private async getResult(id: string): Promise<Result | null> {
    const raw = await this.conns.call(`GET result of ${id}`, (r) => r.getBuffer(this.keys.result(id)));
    return raw === null ? null : decodeResult(raw);
  }

  private ensurePoller(): void {
    if (this.pollTimer !== null || this.closed) return;
    this.pollTimer = setInterval(() => void this.pollTick(), Math.max(10, this.pollIntervalMs / 4));
    this.pollTimer.unref();
  }

  /**
   * Read the result key of every followed job that lost live events or was quiet for
   * `pollIntervalMs`, in one pipeline.
   */
  private async pollTick(): Promise<void> {
    if (this.followers.size === 0) {
      if (this.pollTimer) clearInterval(this.pollTimer);
      this.pollTimer = null;
      return;
    }
    if (this.polling || this.closed) return;
    const now = Date.now();
    const interval = this.pollIntervalMs;
    const due = [...this.followers].filter(
      (f) => f.pollable && !f.done && now - f.lastPoll >= interval && (f.lost || now - f.lastHeard >= interval),
    );
    if (due.length === 0) return;
    for (const f of due) f.lastPoll = now;
    const ids = [...new Set(due.map((f) => f.jobId))];
    this.polling = true;
    try {
      const raws = await this.conns.call(`GET results of ${ids.length} jobs`, async (r) => {
        const p: ChainableCommander = r.pipeline();
        for (const id of ids) p.getBuffer(this.keys.result(id));
        return replies(await p.exec(), "GET");
      });
      const byId = new Map<string, Buffer>();
      ids.forEach((id, i) => {
        const raw = raws[i];
        if (raw instanceof Buffer) byId.set(id, raw);
      });
      for (const f of due) {
        const raw = byId.get(f.jobId);
        if (raw !== undefined) f.onStoredRaw(raw);
      }
    } catch (e) {
      // Redis unreachable for the whole retry window, or the client closed: report it.
      for (const f of due) f.fail(e);
    } finally {
      this.polling = false;
    }
  }

  /**
   * Wait for the single result stored under `id` (a session operation): subscribe to its channel,
   * `submit` it, then resolve from its `exited` event or, when that is lost or late, from the
   * result key. Aborting `signal` cancels `id` (section 7); `waitTimeoutMs` rejects with
   * `WaitTimeoutError` (the operation goes on).
   */
  private async awaitResult<T>(
    id: string,
    submit: () => Promise<void>,
    decodeEvent: (data: Buffer) => T | typeof RESULT_STORED | null,
    decodeStored: (raw: Buffer) => T,
    options: FollowOptions,
  ): Promise<T> {
    this.checkOpen();
    const { signal, waitTimeoutMs } = options;
    if (waitTimeoutMs !== undefined) checkPositive("waitTimeoutMs", waitTimeoutMs);
    const channel = this.keys.out(id);
    const sub = this.conns.subscriber;
    const started = Date.now();
    let timer: NodeJS.Timeout | undefined;
    const onAbort = (): void => {
      this.cancel(id).catch((e: unknown) => waiter.fail(e));
    };
    const cleanup = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      this.followers.delete(waiter);
      sub.remove(channel, waiter);
    };
    // Called when an exited event names a large result instead of carrying it (PROTOCOL.md section
    // 16). The result was stored for this client alone, so it is taken (GETDEL): Redis gives the
    // memory of a deleted result to the next one instead of faulting in fresh pages for each, which
    // was most of what reading back a MiB cost. Under an ACL that allows only GET, a GET.
    const fetchStored = (): void => {
      const key = this.keys.result(id);
      this.conns
        .call(`GETDEL result of ${id}`, (r) =>
          r.getdelBuffer(key).catch((e: unknown) => {
            if (e instanceof Error && e.name === "ReplyError") return r.getBuffer(key);
            throw e;
          }),
        )
        .then((raw) => raw !== null && waiter.onStoredRaw(raw))
        .catch((e: unknown) => waiter.fail(e));
    };
    const waiter: ResultWaiter<T> = new ResultWaiter<T>(id, decodeEvent, decodeStored, cleanup, fetchStored);
    if (waitTimeoutMs !== undefined) {
      timer = setTimeout(() => waiter.fail(new WaitTimeoutError(id, Date.now() - started)), waitTimeoutMs);
      timer.unref();
    }
    this.followers.add(waiter);
    try {
      const setup = (async () => {
        await sub.add(channel, waiter);
        if (signal?.aborted) await this.cancel(id);
        await submit();
      })();
      setup.catch(() => undefined);
      await Promise.race([setup, waiter.promise]);
      if (!waiter.done) {
        waiter.lastHeard = waiter.lastPoll = Date.now();
        waiter.pollable = true;
        this.ensurePoller();
        signal?.addEventListener("abort", onAbort, { once: true });
      }
      return await waiter.promise;
    } catch (e) {
      waiter.fail(e);
      throw e;
    } finally {
      if (!waiter.done) waiter.fail(new SandpoolError("stopped waiting"));
      cleanup();
    }
  }

  /** What the batch calls (batch_io.ts) use of this client. */
  private get batchBackend(): BatchBackend {
    this.batchCache ??= {
      conns: this.conns,
      queueKey: this.keys.queue(this.queue),
      notifyKey: (name) => `${this.keys.prefix}:notify:${name}`,
      getResult: (id) => this.getResult(id),
      cancelMany: (ids) => this.cancelMany(ids),
    };
    return this.batchCache;
  }

  // -- sessions (PROTOCOL.md sections 12-19) -----------------------------------------------

  /** What sessions use of this client. */
  private get backend(): SessionBackend {
    if (this.backendCache !== null) return this.backendCache;
    const hub = (this.hub ??= new ProcessHub(() => this.conns.subscriber, this.keys));
    this.backendCache = {
      conns: this.conns,
      keys: this.keys,
      queue: this.queue,
      opTimeoutMs: this.opTimeoutMs,
      processes: hub,
      checkOpen: () => this.checkOpen(),
      newId: () => this.newId(),
      events: (id, submit, options): OperationEventStream => new JobEventStream(id, this.follow(id, submit, options)),
      awaitResult: (id, submit, decodeEvent, decodeStored, options) =>
        this.awaitResult(id, submit, decodeEvent, decodeStored, options),
    };
    return this.backendCache;
  }

  /**
   * The session `id` (1..128 characters of `[A-Za-z0-9._:-]`). No I/O: create it, connect to it
   * or use it with the returned {@link Session}, which shares this client's connections.
   */
  session(id: string): Session {
    this.checkOpen();
    return new Session(this.backend, id);
  }

  /** Create the session `id`, or connect to it if it exists (and resume it if stopped). */
  async createSession(id: string, options: CreateSessionOptions = {}): Promise<Session> {
    const s = this.session(id);
    await s.create(options);
    return s;
  }

  /**
   * The records of the sessions (PROTOCOL.md section 14): `SMEMBERS sandpool:sessions`, then one
   * pipeline of `HGETALL`, filtered here by `state` (one or several) and `labels` (every label
   * given must be there with that value). Ids whose record is gone meanwhile are left out.
   */
  async listSessions(filter: { state?: SessionState | readonly SessionState[]; labels?: Readonly<Record<string, string>> } = {}): Promise<SessionRecord[]> {
    this.checkOpen();
    const states = filter.state === undefined ? null : new Set<string>(typeof filter.state === "string" ? [filter.state] : filter.state);
    const labels = Object.entries(filter.labels ?? {});
    const ids = (await this.conns.call("SMEMBERS sessions", (r) => r.smembers(this.keys.sessions))).filter((id) => id !== "");
    if (ids.length === 0) return [];
    const hashes = await this.conns.call(`HGETALL of ${ids.length} sessions`, async (r) => {
      const p = r.pipeline();
      for (const id of ids) p.hgetallBuffer(this.keys.session(id));
      return replies(await p.exec(), "HGETALL");
    });
    const out: SessionRecord[] = [];
    ids.forEach((id, i) => {
      const rec = decodeSessionRecord(id, (hashes[i] ?? {}) as Record<string, Buffer>);
      if (rec === null) return;
      if (states !== null && !states.has(rec.state)) return;
      if (labels.some(([k, v]) => rec.labels[k] !== v)) return;
      out.push(rec);
    });
    out.sort((a, b) => a.createdMs - b.createdMs || (a.id < b.id ? -1 : 1));
    return out;
  }

  /** The snapshot templates (PROTOCOL.md section 18): `SMEMBERS sandpool:snapshots`, then their records. */
  async listSnapshots(): Promise<SnapshotRecord[]> {
    this.checkOpen();
    const names = await this.conns.call("SMEMBERS snapshots", (r) => r.smembers(this.keys.snapshots));
    if (names.length === 0) return [];
    const hashes = await this.conns.call(`HGETALL of ${names.length} snapshots`, async (r) => {
      const p = r.pipeline();
      for (const n of names) p.hgetallBuffer(this.keys.snapshot(n));
      return replies(await p.exec(), "HGETALL");
    });
    const out: SnapshotRecord[] = [];
    names.forEach((n, i) => {
      const rec = decodeSnapshotRecord(n, (hashes[i] ?? {}) as Record<string, Buffer>);
      if (rec !== null) out.push(rec);
    });
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /**
   * Delete a snapshot template (`snapshot_delete`, PROTOCOL.md section 18), sent to the queue's
   * request stream `sandpool:sreq:<queue>` with an empty session id.
   */
  async deleteSnapshot(name: string, options: { waitTimeoutMs?: number } = {}): Promise<void> {
    this.checkOpen();
    const anyName = "snapshot-delete";
    await new Session(this.backend, anyName).send(
      "snapshot_delete",
      { name: checkTemplateName("snapshot", name) },
      { stream: this.keys.sessionRequests(this.queue), session: "", waitTimeoutMs: options.waitTimeoutMs },
    );
  }

  // -- control -----------------------------------------------------------------------------

  /**
   * Ask the daemons to cancel a job (PROTOCOL.md section 7, exactly its MULTI block, with the
   * optional `cancel_ms`: a daemon that later finds the id's old result expired then knows this
   * cancel was not meant for a new job under the same id).
   *
   * A queued job (or one not submitted yet) will never start; a running job is killed and keeps
   * its output so far; a finished job is unaffected. The outcome shows in the result.
   */
  async cancel(id: string): Promise<void> {
    this.checkOpen();
    checkJobId(id);
    await this.cancelMany([id]);
  }

  /** PROTOCOL.md section 7 for each job, in one MULTI block. */
  private async cancelMany(ids: string[]): Promise<void> {
    await this.conns.call(`cancel of ${ids.length} jobs`, async (r) => {
      const m = r.multi();
      for (const id of ids) {
        const key = this.keys.job(id);
        m.hset(key, "cancel", "1", "cancel_ms", String(Date.now())).expire(key, CANCEL_TTL_SECONDS).publish(this.keys.cancel, id);
      }
      replies(await m.exec(), "cancel");
    });
  }

  /** Read the job hash and whether the result exists, atomically (one MULTI block). */
  async status(id: string): Promise<JobStatus> {
    this.checkOpen();
    checkJobId(id);
    const [rawFields, exists] = await this.conns.call(`status of ${id}`, async (r) =>
      replies(await r.multi().hgetall(this.keys.job(id)).exists(this.keys.result(id)).exec(), "status"),
    );
    const fields: Record<string, string> = {};
    if (rawFields !== null && typeof rawFields === "object") {
      for (const [k, v] of Object.entries(rawFields as Record<string, unknown>)) fields[k] = String(v);
    }
    let attempt: number | null = null;
    if (fields.attempt !== undefined && /^[0-9]+$/.test(fields.attempt)) attempt = Number(fields.attempt);
    const cancel = fields.cancel ?? "0";
    return new JobStatus(
      id,
      fields.state ?? null,
      fields.entry ?? null,
      fields.consumer ?? null,
      attempt,
      cancel !== "" && cancel !== "0",
      Number(exists) > 0,
      fields,
    );
  }
}

export { isConnectionError, checkSessionId };
