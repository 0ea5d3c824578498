/**
 * The connections of one {@link Client}: one command connection and one subscriber connection
 * that multiplexes the channels of every job being followed. Both are made on first use, and
 * both reconnect by themselves (ioredis), with the channels resubscribed after a reconnect.
 *
 * Every command goes through {@link Connections.call}: while Redis is unreachable (a restart, a
 * failover) the command is retried, and it fails with {@link RedisUnavailableError} once Redis
 * has been unreachable for `retryWindowMs`. That is safe because every command this package sends
 * is idempotent (PROTOCOL.md: a job id runs once however often it is submitted; cancel and the
 * reads are idempotent by nature).
 *
 * Sessions (`session.ts`) share these connections: an operation subscribes its own channel on
 * the subscriber connection, and a session's background processes are followed with one pattern
 * subscription per session.
 */

import { Redis, type RedisOptions } from "ioredis";

import { ClientClosedError, RedisUnavailableError, SandpoolError } from "./errors.js";
import type { RedisAddress } from "./url.js";

/** A party interested in one channel of the subscriber connection. */
export interface ChannelListener {
  /** A message arrived on the channel. */
  onMessage(data: Buffer): void;
  /**
   * The subscriber connection was lost while this listener was subscribed: messages published
   * meanwhile are lost (pub/sub is at-most-once). The channel is resubscribed after reconnecting.
   */
  onConnectionLost(): void;
}

/** A party interested in every channel matching a pattern (PSUBSCRIBE). */
export interface PatternListener {
  /** A message arrived on `channel`, which matches the pattern. */
  onPatternMessage(channel: string, data: Buffer): void;
  /** As {@link ChannelListener.onConnectionLost}. */
  onConnectionLost(): void;
}

export interface ConnectionOptions {
  /** How long a command may keep failing because Redis is unreachable before it is reported. */
  retryWindowMs: number;
  /** Extra ioredis options (TLS and the like); connection address and retry behaviour win. */
  redisOptions?: ExtraRedisOptions | undefined;
  /** Name shown by CLIENT LIST, suffixed `:cmd` / `:sub`. */
  connectionName?: string | undefined;
  /**
   * The channel prefix of the ids this client makes (`<prefix>:out:<tag>`): their channels are
   * received through one pattern subscription, not one SUBSCRIBE each (see {@link Subscriber}).
   */
  ownChannelPrefix?: string | undefined;
}

/** `s` as a literal in a Redis glob pattern. */
export function globEscape(s: string): string {
  return s.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}

/** ioredis options without `replyMapping` (this package relies on its default, legacy shapes). */
type BaseRedisOptions = Omit<RedisOptions, "replyMapping">;

/** Extra ioredis options a client may pass (TLS and the like). */
export type ExtraRedisOptions = Partial<BaseRedisOptions>;

const TRANSIENT_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOENT",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  "ECONNABORTED",
]);

/** True for errors that mean "Redis is (momentarily) unreachable", not "Redis said no". */
export function isConnectionError(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  const code = (e as { code?: unknown }).code;
  if (typeof code === "string" && TRANSIENT_CODES.has(code)) return true;
  if (e.name === "AbortError" || e.name === "MaxRetriesPerRequestError") return true;
  if (e.message === "Connection is closed.") return true;
  if (e.message.startsWith("Command timed out")) return true;
  // Redis answers LOADING while it reads its data set back after a restart.
  if (e.name === "ReplyError" && e.message.startsWith("LOADING")) return true;
  return false;
}

/** Results of a pipeline or MULTI; a connection error in any reply is thrown (so it is retried). */
export function replies(results: [Error | null, unknown][] | null, what: string): unknown[] {
  if (results === null) throw new SandpoolError(`${what}: the transaction was aborted`);
  const out: unknown[] = [];
  for (const [err, value] of results) {
    if (err) throw err;
    out.push(value);
  }
  return out;
}

const TIMED_OUT = Symbol("timed out");

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

export class Connections {
  private readonly address: RedisAddress;
  private readonly options: ConnectionOptions;
  private cmd: Redis | null = null;
  private sub: Subscriber | null = null;
  private closed = false;
  private lastError: Error | null = null;

  constructor(address: RedisAddress, options: ConnectionOptions) {
    this.address = address;
    this.options = options;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** ioredis options for one connection of this set. */
  redisOptions(role: "cmd" | "sub"): BaseRedisOptions {
    const a = this.address;
    const {
      replyMapping: _mapping,
      keyPrefix: _prefix,
      ...extra
    } = (this.options.redisOptions ?? {}) as RedisOptions;
    const o: BaseRedisOptions = {
      ...extra,
      db: a.db,
      lazyConnect: true,
      // Commands wait (in ioredis's offline queue) while Redis is away; call() bounds the wait.
      maxRetriesPerRequest: null,
      enableOfflineQueue: true,
      enableReadyCheck: true,
      autoResubscribe: true,
      autoResendUnfulfilledCommands: true,
      retryStrategy: (times: number) => Math.min(50 * 2 ** Math.min(times, 6), 1000),
    };
    if (a.unixPath !== null) o.path = a.unixPath;
    else {
      o.host = a.host ?? "127.0.0.1";
      o.port = a.port;
    }
    if (a.password !== null) {
      o.password = a.password;
      if (a.user !== null) o.username = a.user;
    }
    const name = this.options.connectionName;
    if (name) o.connectionName = `${name}:${role}`;
    return o;
  }

  private make(role: "cmd" | "sub"): Redis {
    const r = new Redis(this.redisOptions(role));
    // ioredis reports connection errors as events; without a listener Node would print them.
    r.on("error", (e: Error) => {
      this.lastError = e;
    });
    return r;
  }

  /** The command connection (made on first use). */
  get command(): Redis {
    if (this.closed) throw new ClientClosedError();
    this.cmd ??= this.make("cmd");
    return this.cmd;
  }

  /** The subscriber connection (made on first use). */
  get subscriber(): Subscriber {
    if (this.closed) throw new ClientClosedError();
    this.sub ??= new Subscriber(this.make("sub"), this, this.options.ownChannelPrefix ?? null);
    return this.sub;
  }

  /**
   * Run `op` on the command connection; retry it while Redis is unreachable, for at most
   * `retryWindowMs` in all, then throw {@link RedisUnavailableError}. Errors Redis answers with
   * (other than LOADING) are thrown at once. `op` must be idempotent.
   */
  async call<T>(what: string, op: (redis: Redis) => Promise<T>): Promise<T> {
    return this.retry(what, () => op(this.command));
  }

  /** {@link call}'s retry loop for an operation on any connection of this set. */
  async retry<T>(what: string, op: () => Promise<T>): Promise<T> {
    const window = this.options.retryWindowMs;
    const start = Date.now();
    let lastErr: unknown = null;
    for (;;) {
      if (this.closed) throw new ClientClosedError();
      const left = window - (Date.now() - start);
      if (left <= 0) throw this.unavailable(what, lastErr);
      let timer: NodeJS.Timeout | undefined;
      try {
        const pending = op();
        // The command stays queued in ioredis if we stop waiting; its outcome no longer matters.
        pending.catch(() => undefined);
        const timeout = new Promise<typeof TIMED_OUT>((resolve) => {
          timer = setTimeout(() => resolve(TIMED_OUT), left);
          timer.unref();
        });
        const r = await Promise.race([pending, timeout]);
        if (r === TIMED_OUT) throw this.unavailable(what, lastErr);
        return r;
      } catch (e) {
        if (e instanceof RedisUnavailableError || !isConnectionError(e)) {
          if (this.closed && !(e instanceof ClientClosedError)) throw new ClientClosedError();
          throw e;
        }
        lastErr = e;
        await sleep(Math.min(100, Math.max(0, window - (Date.now() - start))));
      } finally {
        clearTimeout(timer);
      }
    }
  }

  private unavailable(what: string, cause: unknown): RedisUnavailableError {
    const last = cause ?? this.lastError;
    const detail = last instanceof Error ? `: ${last.message}` : "";
    return new RedisUnavailableError(
      `${what}: Redis at ${this.address.redacted()} did not answer for ` +
        `${this.options.retryWindowMs} ms${detail}`,
      { cause: last },
    );
  }

  /** Close both connections (QUIT, then a hard disconnect if Redis does not answer soon). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const conns = [this.cmd, this.sub?.redis].filter((r): r is Redis => r !== null && r !== undefined);
    this.sub?.closing();
    await Promise.all(
      conns.map(async (r) => {
        if (r.status === "ready") {
          const quit = r.quit().catch(() => undefined);
          const t = sleep(1000);
          await Promise.race([quit, t]);
        }
        r.disconnect(false);
      }),
    );
  }
}

/**
 * The one subscriber connection of a client: channels are subscribed while at least one
 * listener wants them, and every message is dispatched to the listeners of its channel.
 *
 * The channels of ids this client made (`ownPrefix`, a random tag per client) come through one
 * pattern, subscribed once: an operation or job then costs no SUBSCRIBE round trip before it is
 * sent, and no UNSUBSCRIBE after. Where the client's Redis user may not PSUBSCRIBE that pattern
 * (an ACL that grants `&<prefix>:out:*` allows SUBSCRIBE of each channel, and PSUBSCRIBE only of
 * the literal `<prefix>:out:*`), each channel is subscribed as any other.
 */
export class Subscriber {
  readonly redis: Redis;
  private readonly conns: Connections;
  private readonly channels = new Map<string, Set<ChannelListener>>();
  private readonly patterns = new Map<string, Set<PatternListener>>();
  /** Listeners whose subscription was confirmed on the current connection. */
  private readonly confirmed = new Set<ChannelListener | PatternListener>();
  private isClosing = false;
  private readonly ownPrefix: string | null;
  private readonly ownPattern: string | null;
  /** The own pattern's PSUBSCRIBE on the current connection (settled: confirmed). */
  private ownSubscribed: Promise<void> | null = null;
  /** Redis refused the own pattern (NOPERM): own channels are subscribed one by one. */
  private ownRefused = false;

  constructor(redis: Redis, conns: Connections, ownPrefix: string | null = null) {
    this.redis = redis;
    this.conns = conns;
    this.ownPrefix = ownPrefix;
    this.ownPattern = ownPrefix === null ? null : `${globEscape(ownPrefix)}*`;
    const dispatch = (name: string, message: Buffer): void => {
      const listeners = this.channels.get(name);
      if (listeners === undefined) return;
      for (const l of [...listeners]) l.onMessage(message);
    };
    redis.on("messageBuffer", (channel: Buffer, message: Buffer) => {
      const name = channel.toString("utf8");
      // An own channel subscribed one by one and matched by the pattern too comes twice: the
      // pattern's copy is the one kept while the pattern is on.
      if (this.viaPattern(name)) return;
      dispatch(name, message);
    });
    redis.on("pmessageBuffer", (pattern: Buffer, channel: Buffer, message: Buffer) => {
      const p = pattern.toString("utf8");
      const name = channel.toString("utf8");
      if (p === this.ownPattern) {
        if (this.viaPattern(name)) dispatch(name, message);
        return;
      }
      const listeners = this.patterns.get(p);
      if (listeners === undefined) return;
      for (const l of [...listeners]) l.onPatternMessage(name, message);
    });
    redis.on("close", () => {
      this.ownSubscribed = null;  // PSUBSCRIBE again on the next connection before relying on it
      if (this.isClosing) return;
      const lost = [...this.confirmed];
      this.confirmed.clear();
      for (const l of lost) l.onConnectionLost();
    });
  }

  /** Whether `channel` is received through the own pattern. */
  private viaPattern(channel: string): boolean {
    return this.ownPrefix !== null && !this.ownRefused && channel.startsWith(this.ownPrefix);
  }

  /** Resolves once the own pattern is confirmed on the current connection (or was refused). */
  private async ownPatternReady(): Promise<void> {
    const pattern = this.ownPattern as string;
    this.ownSubscribed ??= (async () => {
      try {
        await this.conns.retry(`PSUBSCRIBE ${pattern}`, () => this.redis.psubscribe(pattern));
      } catch (e) {
        if (e instanceof Error && e.message.startsWith("NOPERM")) {
          this.ownRefused = true;
          return;
        }
        this.ownSubscribed = null;
        throw e;
      }
    })();
    await this.ownSubscribed;
  }

  /** Number of channels and patterns subscribed (or being subscribed). */
  get size(): number {
    return this.channels.size + this.patterns.size;
  }

  closing(): void {
    this.isClosing = true;
  }

  /**
   * Register `listener` on `channel` and resolve once Redis has confirmed the subscription:
   * from then on, every message published on the channel reaches the listener (until the
   * connection is lost, which the listener hears of).
   */
  async add(channel: string, listener: ChannelListener): Promise<void> {
    let set = this.channels.get(channel);
    if (set === undefined) {
      set = new Set();
      this.channels.set(channel, set);
    }
    set.add(listener);
    try {
      if (this.viaPattern(channel)) await this.ownPatternReady();
      // SUBSCRIBE even if the channel is already subscribed: its confirmation is the point from
      // which this listener hears everything (a no-op for Redis).
      if (!this.viaPattern(channel)) {
        await this.conns.retry(`SUBSCRIBE ${channel}`, () => this.redis.subscribe(channel));
      }
    } catch (e) {
      this.remove(channel, listener);
      throw e;
    }
    if (set.has(listener)) this.confirmed.add(listener);
  }

  /**
   * Register `listener` on every channel matching the glob `pattern` (PSUBSCRIBE) and resolve once
   * Redis has confirmed it, as {@link add} does for one channel.
   */
  async addPattern(pattern: string, listener: PatternListener): Promise<void> {
    let set = this.patterns.get(pattern);
    if (set === undefined) {
      set = new Set();
      this.patterns.set(pattern, set);
    }
    set.add(listener);
    try {
      await this.conns.retry(`PSUBSCRIBE ${pattern}`, () => this.redis.psubscribe(pattern));
    } catch (e) {
      this.removePattern(pattern, listener);
      throw e;
    }
    if (set.has(listener)) this.confirmed.add(listener);
  }

  /** Unregister a pattern listener; the pattern is unsubscribed when it has no listener left. */
  removePattern(pattern: string, listener: PatternListener): void {
    this.confirmed.delete(listener);
    const set = this.patterns.get(pattern);
    if (set === undefined || !set.delete(listener)) return;
    if (set.size > 0) return;
    this.patterns.delete(pattern);
    if (!this.isClosing && !this.conns.isClosed) {
      this.redis.punsubscribe(pattern).catch(() => undefined);
    }
  }

  /** Unregister `listener`; the channel is unsubscribed when it has no listener left. */
  remove(channel: string, listener: ChannelListener): void {
    this.confirmed.delete(listener);
    const set = this.channels.get(channel);
    if (set === undefined || !set.delete(listener)) return;
    if (set.size > 0) return;
    this.channels.delete(channel);
    if (!this.isClosing && !this.conns.isClosed && !this.viaPattern(channel)) {
      this.redis.unsubscribe(channel).catch(() => undefined);
    }
  }
}
