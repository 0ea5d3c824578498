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

/** Where a session error came from: the operation, its id and the session. */
export interface SessionErrorContext {
  /** The operation (`create`, `write`, `exec`, ...). */
  op: string;
  /** The session id. */
  sessionId: string;
  /** The operation id, when the operation was sent (errors found before sending have none). */
  opId?: string | undefined;
}

/**
 * A session operation failed (PROTOCOL.md sections 13 and 19). `code` is the protocol's error code
 * (`session_not_found`, `not_found`, `exists`, `bad_field`, ...), `retryable` as the daemon said.
 * The subclasses below stand for the codes a caller is likely to handle; any other code (the
 * section 8 codes, codes of newer daemons) is a plain `SessionError`.
 */
export class SessionError extends SandpoolError {
  readonly code: string;
  readonly retryable: boolean;
  readonly op: string;
  readonly sessionId: string;
  readonly opId: string | null;
  /** The daemon's message, without the code and operation prefixed to `message`. */
  readonly detail: string;

  constructor(code: string, detail: string, retryable: boolean, ctx: SessionErrorContext) {
    super(`${ctx.op} on session ${ctx.sessionId}: ${code}${detail ? `: ${detail}` : ""}`);
    this.code = code;
    this.retryable = retryable;
    this.op = ctx.op;
    this.sessionId = ctx.sessionId;
    this.opId = ctx.opId ?? null;
    this.detail = detail;
  }
}

/** `session_not_found`: no such session (or it was destroyed). */
export class SessionNotFoundError extends SessionError {}
/** `session_lost`: the host holding it died; its files are there only if that host comes back. */
export class SessionLostError extends SessionError {}
/** `session_stopped`: the operation needs a running session; `create` resumes it. */
export class SessionStoppedError extends SessionError {}
/** `session_busy`: being created, stopped or destroyed; try again. */
export class SessionBusyError extends SessionError {}
/** `host_full`: no daemon had room for a new session in time. */
export class HostFullError extends SessionError {}
/** `template_mismatch`: `create` named another template than the session has. */
export class TemplateMismatchError extends SessionError {}
/** `not_found`: a path (or a process id) does not exist. */
export class NotFoundError extends SessionError {}
/** `exists`: the target exists and `overwrite` is false. */
export class ExistsError extends SessionError {}
/** `is_a_directory`: the path is a directory where the operation needs something else. */
export class IsADirectoryError extends SessionError {}
/** `not_a_directory`: the path is not a directory where the operation needs one. */
export class NotADirectoryError extends SessionError {}
/** `not_a_file`: a FIFO, socket or device where a regular file is needed. */
export class NotAFileError extends SessionError {}
/** `permission`: the session's user may not do this (try `asRoot`). */
export class PermissionError extends SessionError {}
/** `no_space`: the session's disk is full. */
export class NoSpaceError extends SessionError {}
/** `conflict`: `expectedMtimeNs` did not match: someone else changed the file. */
export class ConflictError extends SessionError {}
/** `process_exited`: the background process has exited. */
export class ProcessExitedError extends SessionError {}
/** `not_empty`: `remove` of a non-empty directory without `recursive`. */
export class NotEmptyError extends SessionError {}
/** `unsupported`: the daemon does not implement the operation (snapshots, for now). */
export class UnsupportedError extends SessionError {}

const SESSION_ERROR_CLASSES: Readonly<Record<string, typeof SessionError>> = Object.freeze({
  session_not_found: SessionNotFoundError,
  session_lost: SessionLostError,
  session_stopped: SessionStoppedError,
  session_busy: SessionBusyError,
  host_full: HostFullError,
  template_mismatch: TemplateMismatchError,
  not_found: NotFoundError,
  exists: ExistsError,
  is_a_directory: IsADirectoryError,
  not_a_directory: NotADirectoryError,
  not_a_file: NotAFileError,
  permission: PermissionError,
  no_space: NoSpaceError,
  conflict: ConflictError,
  process_exited: ProcessExitedError,
  not_empty: NotEmptyError,
  unsupported: UnsupportedError,
});

/** The error class for a protocol error code (`SessionError` for codes without their own). */
export function sessionErrorClass(code: string): typeof SessionError {
  return Object.hasOwn(SESSION_ERROR_CLASSES, code) ? (SESSION_ERROR_CLASSES[code] as typeof SessionError) : SessionError;
}

/** The typed error for a protocol error (`{code, message, retryable}`) of an operation. */
export function sessionError(
  info: { code: string; message: string; retryable: boolean },
  ctx: SessionErrorContext,
): SessionError {
  const Cls = sessionErrorClass(info.code);
  return new Cls(info.code, info.message, info.retryable, ctx);
}
