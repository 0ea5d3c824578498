/** Redis key and channel names of PROTOCOL.md sections 1 and 12 for one prefix. */
export class Keys {
  constructor(readonly prefix: string = "sandpool") {}

  /** The job queue (a stream). */
  queue(name: string): string {
    return `${this.prefix}:q:${name}`;
  }

  /** The job's state hash. */
  job(id: string): string {
    return `${this.prefix}:job:${id}`;
  }

  /** The job's durable result (a msgpack string). */
  result(id: string): string {
    return `${this.prefix}:result:${id}`;
  }

  /** The pub/sub channel of the job's live events. */
  out(id: string): string {
    return `${this.prefix}:out:${id}`;
  }

  /** The pub/sub channel cancel requests are published on. */
  get cancel(): string {
    return `${this.prefix}:cancel`;
  }

  /** A daemon's heartbeat key. */
  daemon(consumer: string): string {
    return `${this.prefix}:daemon:${consumer}`;
  }

  /** The dead-letter stream. */
  get dead(): string {
    return `${this.prefix}:dead`;
  }

  // -- version 2: sessions ------------------------------------------------------------------

  /** A session's record (a hash written by daemons). */
  session(sid: string): string {
    return `${this.prefix}:session:${sid}`;
  }

  /** The set of every session id that has a record. */
  get sessions(): string {
    return `${this.prefix}:sessions`;
  }

  /**
   * The request stream of a queue: `create` of a session without a record goes to
   * `sreq:<queue>`; every operation on a session held by daemon `consumer` to
   * `sreq:<queue>:<consumer>`.
   */
  sessionRequests(queue: string, consumer?: string): string {
    return consumer === undefined ? `${this.prefix}:sreq:${queue}` : `${this.prefix}:sreq:${queue}:${consumer}`;
  }

  /** The live output channel of a session's background process. */
  processOutput(sid: string, pid: string): string {
    return `${this.prefix}:pout:${sid}:${pid}`;
  }

  /**
   * A PSUBSCRIBE pattern matching the output channels of every background process of `sid` (and,
   * since `:` may appear in a session id, of sessions named `<sid>:...`: check the channel).
   */
  processOutputPattern(sid: string): string {
    return `${globEscape(`${this.prefix}:pout:${sid}:`)}*`;
  }

  /** A snapshot template's record. */
  snapshot(name: string): string {
    return `${this.prefix}:snapshot:${name}`;
  }

  /** The set of every snapshot name. */
  get snapshots(): string {
    return `${this.prefix}:snapshots`;
  }
}

/** Escape the characters Redis glob patterns treat specially. */
function globEscape(s: string): string {
  return s.replace(/[\\*?[\]]/g, (c) => `\\${c}`);
}
