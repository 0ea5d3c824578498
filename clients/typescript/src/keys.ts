/** Redis key and channel names of PROTOCOL.md section 1 for one prefix. */
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
}
