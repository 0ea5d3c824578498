/**
 * Following one job: sequence checks, loss detection and the fall back to the durable result
 * key, exactly as the Python client's `sandpool._ops.follow` does (PROTOCOL.md sections 2 and 6).
 *
 * A follower is fed by the client's shared subscriber connection ({@link Follower.onMessage},
 * {@link Follower.onConnectionLost}) and by the client's result poller
 * ({@link Follower.onStoredResult}); it turns that into the event sequence its consumer reads
 * with {@link Follower.next}: `started`, `stdout`/`stderr` chunks, then `exited`. Once live events
 * were lost (a sequence gap, an undecodable message, a dropped subscription) no further output is
 * delivered live; when the result arrives the output not yet delivered is delivered from it, so
 * for a job followed from its start the chunks of each stream add up to the result's
 * `stdout`/`stderr` exactly.
 */

import type { ChannelListener } from "./connection.js";
import {
  decodeEvent,
  decodeResult,
  ExitedEvent,
  type JobEvent,
  OutputEvent,
  type Result,
  RESULT_STORED,
  StartedEvent,
  UnknownEvent,
} from "./protocol.js";

/** An unbounded single-consumer queue with an end and an error. */
class EventQueue<T> {
  private readonly items: T[] = [];
  private waiter: { resolve: (v: T | null) => void; reject: (e: unknown) => void } | null = null;
  private ended = false;
  private error: { e: unknown } | null = null;

  push(item: T): void {
    if (this.ended || this.error) return;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w.resolve(item);
    } else this.items.push(item);
  }

  end(): void {
    this.ended = true;
    this.wake();
  }

  fail(e: unknown): void {
    if (this.ended || this.error) return;
    this.error = { e };
    this.wake();
  }

  private wake(): void {
    if (this.waiter === null || this.items.length > 0) return;
    const w = this.waiter;
    this.waiter = null;
    if (this.error) w.reject(this.error.e);
    else w.resolve(null);
  }

  /** The next item, `null` after the end, or the error. */
  next(): Promise<T | null> {
    const item = this.items.shift();
    if (item !== undefined) return Promise.resolve(item);
    if (this.error) return Promise.reject(this.error.e);
    if (this.ended) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }
}

/**
 * Something waiting for the durable result key of one id (a job or an operation): the client's
 * poller reads `sandpool:result:<jobId>` for it when it lost live events or was quiet for a while.
 */
export interface Pollable {
  readonly jobId: string;
  /** Live events were lost: poll at once. */
  lost: boolean;
  lastHeard: number;
  lastPoll: number;
  done: boolean;
  /** Subscribed (and submitted): the result key may be polled. */
  pollable: boolean;
  /** The result key holds `raw`. */
  onStoredRaw(raw: Buffer): void;
  /** Waiting failed (timeout, Redis unreachable, client closed). */
  fail(e: unknown): void;
}

export class Follower implements ChannelListener, Pollable {
  readonly jobId: string;
  /** Next expected seq; `null` until the first event when joining a job midway. */
  private expected: number | null;
  /** True when the events seen so far are the output from its very beginning. */
  private fromStart: boolean;
  /** Live events were lost: deliver no more output live, and poll the result key. */
  lost = false;
  private delivered = { stdout: 0, stderr: 0 };
  /** When a message last arrived, or following began (ms since the epoch). */
  lastHeard = Date.now();
  /** When the result key was last read for this follower. */
  lastPoll = Date.now();
  /** The follower has its result (or failed): nothing more is delivered. */
  done = false;
  /** Subscribed (and the job submitted, for a new job): the result key may be polled. */
  pollable = false;
  private readonly queue = new EventQueue<JobEvent>();
  private readonly onDone: () => void;
  private rejectFailure: (e: unknown) => void = () => undefined;
  /** Rejects when following fails (see {@link fail}); never resolves. */
  readonly failure: Promise<never>;

  constructor(jobId: string, fromStart: boolean, onDone: () => void) {
    this.jobId = jobId;
    this.fromStart = fromStart;
    this.expected = fromStart ? 0 : null;
    this.onDone = onDone;
    this.failure = new Promise<never>((_, reject) => {
      this.rejectFailure = reject;
    });
    this.failure.catch(() => undefined);
  }

  /** The next event for the consumer; `null` after `exited`. Rejects if following failed. */
  next(): Promise<JobEvent | null> {
    return this.queue.next();
  }

  // -- ChannelListener ---------------------------------------------------------------------

  onMessage(data: Buffer): void {
    if (this.done) return;
    this.lastHeard = Date.now();
    let ev: JobEvent | UnknownEvent;
    try {
      ev = decodeEvent(data);
    } catch {
      this.lost = true; // an undecodable message counts as a lost one
      return;
    }
    const live = this.sequence(ev);
    if (ev instanceof ExitedEvent) {
      this.finish(ev.result, ev.seq);
      return;
    }
    if (!live || ev instanceof UnknownEvent) return;
    if (ev instanceof OutputEvent) this.delivered[ev.type] += ev.data.length;
    this.queue.push(ev);
  }

  onConnectionLost(): void {
    this.lost = true;
  }

  // -- from the client ---------------------------------------------------------------------

  onStoredRaw(raw: Buffer): void {
    let result: Result;
    try {
      result = decodeResult(raw);
    } catch (e) {
      this.fail(e);
      return;
    }
    this.onStoredResult(result);
  }

  /** The result key was read and holds the result: finish (live events may still be in flight). */
  onStoredResult(result: Result): void {
    if (!this.done) this.finish(result, null);
  }

  /** Following failed (timeout, Redis unreachable, client closed): the consumer gets `e`. */
  fail(e: unknown): void {
    if (this.done) return;
    this.done = true;
    this.queue.fail(e);
    this.rejectFailure(e);
    this.onDone();
  }

  // -- internals ---------------------------------------------------------------------------

  /** Update the sequence state; true if the event may be passed on live. */
  private sequence(ev: JobEvent | UnknownEvent): boolean {
    const seq = ev.seq as number;
    if (ev instanceof StartedEvent && seq === 0 && this.expected !== null && this.expected !== 0) {
      // A new attempt (the job was re-run after its worker was lost): seq restarts.
      this.expected = 1;
      this.lost = false;
      this.fromStart = true;
      this.delivered = { stdout: 0, stderr: 0 };
      return true;
    }
    if (this.expected === null) {
      this.fromStart = seq === 0;
      this.expected = seq + 1;
      return true;
    }
    if (seq !== this.expected) this.lost = true;
    this.expected = seq + 1;
    return !this.lost;
  }

  private finish(result: Result, seq: number | null): void {
    this.done = true;
    if (this.fromStart) {
      for (const name of ["stdout", "stderr"] as const) {
        const full = result[name];
        if (this.delivered[name] < full.length) {
          this.queue.push(new OutputEvent(name, null, full.subarray(this.delivered[name])));
          this.delivered[name] = full.length;
        }
      }
    }
    this.queue.push(new ExitedEvent(seq, result));
    this.queue.end();
    this.onDone();
  }
}

/**
 * Waiting for the single result of an operation whose channel carries only its `exited` event
 * (PROTOCOL.md section 16): the result comes from that event, or from the result key when the
 * event was lost or is late.
 */
export class ResultWaiter<T> implements ChannelListener, Pollable {
  readonly jobId: string;
  lost = false;
  lastHeard = Date.now();
  lastPoll = Date.now();
  done = false;
  pollable = false;
  readonly promise: Promise<T>;
  private resolve: (v: T) => void = () => undefined;
  private reject: (e: unknown) => void = () => undefined;

  /**
   * @param decodeEvent  a pub/sub message: the result if it is the `exited` event,
   *                     {@link RESULT_STORED} if that event says to read the result key, `null`
   *                     for an event to ignore; throws if it cannot be decoded (counted as a loss)
   * @param decodeStored the value of the result key
   * @param fetchStored  reads the result key now and hands it to {@link ResultWaiter.onStoredRaw}
   */
  constructor(
    jobId: string,
    private readonly decodeEvent: (data: Buffer) => T | typeof RESULT_STORED | null,
    private readonly decodeStored: (raw: Buffer) => T,
    private readonly onDone: () => void,
    private readonly fetchStored: () => void = () => undefined,
  ) {
    this.jobId = jobId;
    this.promise = new Promise<T>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.promise.catch(() => undefined);
  }

  onMessage(data: Buffer): void {
    if (this.done) return;
    this.lastHeard = Date.now();
    let r: T | typeof RESULT_STORED | null;
    try {
      r = this.decodeEvent(data);
    } catch {
      this.lost = true;
      return;
    }
    if (r === RESULT_STORED) {
      // The result is stored (before its event was published): read it at once. Should that
      // read fail to find it, the poller reads it again (lost).
      this.lost = true;
      this.fetchStored();
    } else if (r !== null) this.finish(r);
  }

  onConnectionLost(): void {
    this.lost = true;
  }

  onStoredRaw(raw: Buffer): void {
    if (this.done) return;
    let r: T;
    try {
      r = this.decodeStored(raw);
    } catch (e) {
      this.fail(e);
      return;
    }
    this.finish(r);
  }

  fail(e: unknown): void {
    if (this.done) return;
    this.done = true;
    this.reject(e);
    this.onDone();
  }

  private finish(r: T): void {
    this.done = true;
    this.resolve(r);
    this.onDone();
  }
}
