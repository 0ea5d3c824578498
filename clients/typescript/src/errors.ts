/**
 * Errors thrown by this package. Every one is a {@link SandpoolError}; none of them describes
 * the outcome of a job (a job that failed, timed out or was cancelled is a normal `Result`).
 */

/** Base class of every error this package throws. */
export class SandpoolError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * Input no daemon could accept: a bad job id, both or neither of `argv`/`shell`/`code`, NUL
 * characters, bad environment variable names, a relative `cwd`, a negative number, a bad Redis
 * URL... (the Python client raises `ValueError` for the same cases). Limits that depend on the
 * server's settings (sizes, the largest timeout) are left to the daemon, which clamps them or
 * stores an error result.
 */
export class InvalidArgumentError extends SandpoolError {}

/** A message from the daemon (a result or an event) could not be decoded. */
export class ProtocolError extends SandpoolError {}

/** Error codes of PROTOCOL.md section 8 that a daemon gives to a job map it rejects. */
export type JobRejectionCode = "bad_payload" | "bad_version" | "bad_field" | "too_large";

/**
 * {@link decodeJob} rejected a job payload; `code` is the error code a daemon would store in the
 * job's result for the same bytes (PROTOCOL.md sections 8 and 11).
 */
export class JobDecodeError extends ProtocolError {
  readonly code: JobRejectionCode;
  constructor(code: JobRejectionCode, message: string) {
    super(`${code}: ${message}`);
    this.code = code;
  }
}

/** Waiting for a job ended before its result arrived. The job itself is not affected. */
export class WaitTimeoutError extends SandpoolError {
  readonly jobId: string;
  readonly waitedMs: number;
  constructor(jobId: string, waitedMs: number) {
    super(`job ${jobId} has no result after ${(waitedMs / 1000).toFixed(1)} s`);
    this.jobId = jobId;
    this.waitedMs = waitedMs;
  }
}

/**
 * Redis could not be reached for longer than the client's `retryWindowMs`. Every command this
 * client sends is idempotent (a job id runs once however often it is submitted), so the same call
 * may simply be repeated once Redis is back; a command queued while Redis was away may still be
 * carried out when it returns.
 */
export class RedisUnavailableError extends SandpoolError {}

/** The client was closed (by {@link Client.close}) while the call was under way, or before it. */
export class ClientClosedError extends SandpoolError {
  constructor() {
    super("the sandpool client is closed");
  }
}
