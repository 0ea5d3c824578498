/**
 * The protocol side of `Client.map` and `submitMany` with a completion stream (PROTOCOL.md
 * section 21, version 4), without I/O: which jobs to submit now, what a record means, what to
 * yield. The client moves its commands to Redis and the records back.
 */

import { randomBytes } from "node:crypto";

import { InvalidArgumentError, ProtocolError } from "./errors.js";
import { buildJobMap, checkJobId, decodeResult, encodeJob, JOB_KEYS, typeName, type Job, type JobOptions, type Result } from "./protocol.js";

/** The version of job maps in entries that name a completion stream. */
export const NOTIFY_PROTOCOL_VERSION = 4;
/** XADDs per pipelined round trip. */
export const SUBMIT_CHUNK = 1000;
/** Records asked for by one XREAD. */
export const READ_COUNT = 1000;

/** A job of a batch: a {@link Job}, or a shell line (`"echo hi"` is `{ shell: "echo hi" }`). */
export type JobLike = Job | string;

/** `j` as a {@link Job}: a string is a shell line. Throws `InvalidArgumentError` for anything else. */
export function asJob(j: JobLike): Job {
  if (typeof j === "string") return { shell: j };
  if (j === null || typeof j !== "object" || Array.isArray(j)) {
    throw new InvalidArgumentError(`a job must be an object or a shell line, not ${typeName(j)}`);
  }
  return j;
}

/** What a job has for itself alone: its id, its command and its input. */
type OwnJobKeys = "id" | "argv" | "shell" | "code" | "runtime" | "stdin";
const OWN_JOB_KEYS: readonly string[] = ["id", "argv", "shell", "code", "runtime", "stdin"] satisfies OwnJobKeys[];

/** The job options a map gives every job that leaves them unset: all but a job's own. */
export type MapDefaults = Omit<JobOptions, OwnJobKeys>;
export const MAP_DEFAULT_KEYS = [...JOB_KEYS].filter((k) => !OWN_JOB_KEYS.includes(k)) as readonly (keyof MapDefaults)[];

/** The options of a map itself, besides {@link MapDefaults}. */
const MAP_OWN_KEYS = ["concurrency", "ordered", "onProgress", "signal"] as const;

/**
 * Throws `InvalidArgumentError` naming the valid options when `options` has one a map does not
 * take (a misspelt `timeout_ms` would otherwise be ignored); returns the defaults it names.
 */
export function mapDefaultsOf(options: object): MapDefaults {
  const known: readonly string[] = [...MAP_OWN_KEYS, ...MAP_DEFAULT_KEYS];
  const defaults: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(options)) {
    if (v === undefined) continue;
    if (!known.includes(k)) throw new InvalidArgumentError(`map: unknown option ${JSON.stringify(k)} (known: ${known.join(", ")})`);
    if ((MAP_DEFAULT_KEYS as readonly string[]).includes(k)) defaults[k] = v;
  }
  return defaults as MapDefaults;
}

/** `job` with `defaults` filled in where it leaves an option unset. */
export function withDefaults(job: Job, defaults: MapDefaults): Job {
  const filled: Record<string, unknown> = { ...job };
  let changed = false;
  for (const k of MAP_DEFAULT_KEYS) {
    if (defaults[k] !== undefined && job[k] === undefined) {
      filled[k] = defaults[k];
      changed = true;
    }
  }
  return changed ? (filled as unknown as Job) : job;
}

/** One record of a completion stream. */
export interface Completion {
  id: string;
  outcome: string;
  exitCode: number | null;
  /** The error code, when the result has an error. */
  error: string | null;
  /** The result, when the record carries it (asked for, and at most 64 KiB). */
  result: Result | null;
  /** The result's size when it was asked for but not carried (fetch it with GET). */
  resultBytes: number | null;
}

/** Decodes the fields of a completion record (a flat [name, value, ...] list as XREAD gives). */
export function decodeCompletion(flat: readonly (Buffer | string)[]): Completion {
  const f = new Map<string, Buffer | string>();
  for (let i = 0; i + 1 < flat.length; i += 2) f.set(String(flat[i]), flat[i + 1] as Buffer | string);
  const text = (k: string): string | null => (f.has(k) ? String(f.get(k)) : null);
  const id = text("id");
  const outcome = text("outcome");
  if (!id || outcome === null) throw new ProtocolError("completion record without id or outcome");
  const ec = text("exit_code");
  const raw = f.get("result");
  return {
    id,
    outcome,
    exitCode: ec ? Number(ec) : null,
    error: text("error"),
    result: raw === undefined ? null : decodeResult(typeof raw === "string" ? Buffer.from(raw) : raw),
    resultBytes: text("result_bytes") === null ? null : Number(text("result_bytes")),
  };
}

/** A fresh completion stream name. */
export function newStreamName(kind = "map"): string {
  return `${kind}-${randomBytes(8).toString("hex")}`;
}

/** The queue entry's fields of one job: `[id, [field, value, ...]]`. */
export function encodeEntry(job: Job, id: string, notify: string | null, notifyResult: boolean): [string, (string | Buffer)[]] {
  checkJobId(id);
  const m = buildJobMap({ ...job, id });
  if (notify !== null) m.v = NOTIFY_PROTOCOL_VERSION;
  const fields: (string | Buffer)[] = ["id", id, "job", encodeJob(m)];
  if (notify !== null) {
    checkJobId(notify);
    fields.push("notify", notify);
    if (notifyResult) fields.push("notify_result", "1");
  }
  return [id, fields];
}

/** Progress of a map, after each result. */
export interface MapProgress {
  done: number;
  submitted: number;
  /** The number of jobs when the input is an array, else null. */
  total: number | null;
  /** Results that are not ok, by outcome. */
  failures: Record<string, number>;
}

/**
 * One map: at most `concurrency` jobs in flight; results as their records arrive (in input order
 * when `ordered`).
 */
export class MapState {
  readonly name = newStreamName();
  lastId = "0";
  done = 0;
  readonly failures: Record<string, number> = {};
  private readonly it: Iterator<JobLike>;
  private exhausted = false;
  private index = 0;
  private readonly inFlight = new Map<string, number>();
  private readonly buffer = new Map<number, Result>();
  private next = 0;

  constructor(
    jobs: Iterable<JobLike>,
    private readonly concurrency: number,
    private readonly ordered: boolean,
    readonly total: number | null,
    private readonly onProgress?: (p: MapProgress) => void,
    private readonly defaults: MapDefaults = {},
  ) {
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new RangeError(`concurrency must be an integer >= 1 (got ${concurrency})`);
    }
    this.it = jobs[Symbol.iterator]();
  }

  get finished(): boolean {
    return this.exhausted && this.inFlight.size === 0 && this.buffer.size === 0;
  }

  outstanding(): string[] {
    return [...this.inFlight.keys()];
  }

  /** Entries to XADD now, up to the free concurrency. */
  toSubmit(): [string, (string | Buffer)[]][] {
    const out: [string, (string | Buffer)[]][] = [];
    while (!this.exhausted && this.inFlight.size < this.concurrency) {
      const n = this.it.next();
      if (n.done) {
        this.exhausted = true;
        break;
      }
      const job = withDefaults(asJob(n.value), this.defaults);
      const id = job.id ?? `${this.name}-${this.index}`;
      if (this.inFlight.has(id)) throw new RangeError(`job id ${id} appears twice in one map`);
      out.push(encodeEntry(job, id, this.name, true));
      this.inFlight.set(id, this.index++);
    }
    return out;
  }

  /** A record: [results to yield, ids to fetch with GET]. */
  onRecord(entryId: string, flat: readonly (Buffer | string)[]): [Result[], string[]] {
    this.lastId = entryId;
    const c = decodeCompletion(flat);
    if (!this.inFlight.has(c.id)) return [[], []];
    if (c.result === null) return [[], [c.id]];
    return [this.complete(c.result), []];
  }

  onFetched(id: string, r: Result | null): Result[] {
    if (r === null || !this.inFlight.has(id)) return [];
    return this.complete(r);
  }

  private complete(r: Result): Result[] {
    const index = this.inFlight.get(r.id) as number;
    this.inFlight.delete(r.id);
    this.done++;
    if (!r.ok) this.failures[r.outcome] = (this.failures[r.outcome] ?? 0) + 1;
    this.onProgress?.({ done: this.done, submitted: this.index, total: this.total, failures: { ...this.failures } });
    if (!this.ordered) return [r];
    this.buffer.set(index, r);
    const out: Result[] = [];
    while (this.buffer.has(this.next)) {
      out.push(this.buffer.get(this.next) as Result);
      this.buffer.delete(this.next++);
    }
    return out;
  }
}
