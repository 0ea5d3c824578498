/**
 * The Redis side of batches (PROTOCOL.md section 21): moves batch.ts's commands to Redis and
 * the records back. The pipelined XADDs of `submitMany` and `map`, the XREAD loop that follows
 * a completion stream (`completions`, `map`), and a map's end (cancel what is in flight, delete
 * its stream). `Client` checks the arguments and hands its connections over as a
 * {@link BatchBackend}.
 *
 * A completion stream is read on a connection of its own (a blocking XREAD would hold up every
 * other command of the client), made per call and closed when the iteration ends.
 */

import { Redis } from "ioredis";

import { decodeCompletion, READ_COUNT, SUBMIT_CHUNK, type Completion, type MapState } from "./batch.js";
import { replies, type Connections } from "./connection.js";
import { InvalidArgumentError, SandpoolError } from "./errors.js";
import type { Result } from "./protocol.js";

/** What the batch calls use of their client. @internal */
export interface BatchBackend {
  readonly conns: Connections;
  /** The job queue's key. */
  readonly queueKey: string;
  /** The key of the completion stream `name`. */
  notifyKey(name: string): string;
  /** The stored result of a job (GET), or null. */
  getResult(id: string): Promise<Result | null>;
  /** Cancel jobs, in one MULTI block (PROTOCOL.md section 7). */
  cancelMany(ids: string[]): Promise<void>;
}

/** A queue entry: the job id and the entry's fields. */
export type Entry = [string, (string | Buffer)[]];

type XReadReply = [Buffer, [Buffer, Buffer[]][]][] | null;

/** XADD `entries` to the job queue, {@link SUBMIT_CHUNK} per pipelined round trip. */
export async function xaddEntries(b: BatchBackend, entries: readonly Entry[]): Promise<void> {
  for (let i = 0; i < entries.length; i += SUBMIT_CHUNK) {
    const chunk = entries.slice(i, i + SUBMIT_CHUNK);
    await b.conns.call(`XADD of ${chunk.length} jobs`, async (r) => {
      const p = r.pipeline();
      for (const [, fields] of chunk) p.xadd(b.queueKey, "*", ...fields);
      replies(await p.exec(), "XADD");
    });
  }
}

function streamReader(b: BatchBackend): Redis {
  const reader = new Redis(b.conns.redisOptions("cmd"));
  reader.on("error", () => undefined); // retried by conns.retry; without a listener Node prints it
  return reader;
}

/**
 * The records of the completion stream `name` after stream id `after`, forever (until the
 * caller stops iterating or `signal` aborts, looked at between reads of `blockMs`).
 */
export async function* completionRecords(
  b: BatchBackend,
  name: string,
  after: string,
  blockMs: number,
  signal: AbortSignal | undefined,
): AsyncGenerator<{ streamId: string; completion: Completion }, void> {
  const key = b.notifyKey(name);
  const reader = streamReader(b);
  try {
    while (!signal?.aborted) {
      const reply = (await b.conns.retry(`XREAD of ${key}`, () =>
        reader.xreadBuffer("COUNT", READ_COUNT, "BLOCK", blockMs, "STREAMS", key, after),
      )) as XReadReply;
      for (const [, entries] of reply ?? []) {
        for (const [entryId, flat] of entries) {
          after = entryId.toString();
          yield { streamId: after, completion: decodeCompletion(flat) };
        }
      }
    }
  } finally {
    reader.disconnect(false);
  }
}

/**
 * Drive `state` to its end: submit what it asks for, follow its completion stream, fetch the
 * results its records do not carry, and yield what it gives. On any end (finished, the caller
 * stopped, `signal` aborted, an error) the jobs in flight are cancelled and the stream deleted.
 */
export async function* runMap(b: BatchBackend, state: MapState, signal: AbortSignal | undefined): AsyncGenerator<Result, void> {
  const key = b.notifyKey(state.name);
  const reader = streamReader(b);
  const abortReason = (): unknown => signal?.reason ?? new SandpoolError("map aborted");
  // Rejects when `signal` aborts, so that a blocking XREAD does not hold the stop up.
  let stopWaiting: () => void = () => undefined;
  const aborted = new Promise<never>((_, reject) => {
    if (signal === undefined) return;
    const onAbort = (): void => reject(abortReason());
    signal.addEventListener("abort", onAbort, { once: true });
    stopWaiting = () => signal.removeEventListener("abort", onAbort);
  });
  aborted.catch(() => undefined);
  try {
    while (!state.finished) {
      if (signal?.aborted) throw abortReason();
      let entries: Entry[];
      try {
        entries = state.toSubmit();
      } catch (e) {
        if (e instanceof InvalidArgumentError) throw new InvalidArgumentError(`map: ${e.message}`);
        throw e;
      }
      await xaddEntries(b, entries);
      if (state.finished) break;
      const read = b.conns.retry(`XREAD of ${key}`, () =>
        reader.xreadBuffer("COUNT", READ_COUNT, "BLOCK", 1000, "STREAMS", key, state.lastId),
      );
      read.catch(() => undefined);
      const reply = (await Promise.race([read, aborted])) as XReadReply;
      const fetch: string[] = [];
      for (const [, records] of reply ?? []) {
        for (const [entryId, flat] of records) {
          const [ready, more] = state.onRecord(entryId.toString(), flat);
          fetch.push(...more);
          yield* ready;
        }
      }
      for (const id of fetch) yield* state.onFetched(id, await b.getResult(id));
    }
  } finally {
    stopWaiting();
    reader.disconnect(false);
    const outstanding = state.outstanding();
    try {
      if (outstanding.length > 0) await b.cancelMany(outstanding);
      await b.conns.call(`DEL ${key}`, (r) => r.del(key));
    } catch {
      // Redis is away or the client closed: the stream expires on its own.
    }
  }
}
