/**
 * TypeScript client for sandpool, the self-hosted sandbox worker pool (wire protocol versions 1,
 * 2 and 4, docs/PROTOCOL.md): one-shot jobs, sessions, and batches followed on a completion
 * stream (`map`, `submitMany` with `notify`, `completions`). It talks only to Redis.
 *
 *     import { Client } from "sandpool";
 *
 *     const c = new Client("redis://127.0.0.1:6379");
 *     const r = await c.run({ shell: "echo hi" }, { onStdout: (b) => process.stdout.write(b) });
 *     console.log(r.outcome, r.exitCode, r.stdoutText);
 *     await c.close();
 *
 *     const s = await c.createSession("agent-1");
 *     await s.writeFile("/work/a.txt", "hello\n");
 *     console.log((await s.exec({ shell: "cat a.txt" })).stdoutText);
 *
 * Layout: `protocol` (v1 codecs, no I/O), `batch` (map's state and completion records, no I/O), `session_protocol` (v2 codecs), `url` (Redis URLs),
 * `keys` (key names), `connection` (the client's command and subscriber connections,
 * reconnection and retries), `follower` (following one job's or operation's result), `client`
 * (the jobs API and the entry to sessions), `session` (the sessions API), `process` (background
 * processes of a session).
 */

export {
  CANCEL_TTL_SECONDS,
  Client,
  JobEventStream,
  JobStatus,
  newJobId,
  URL_ENV,
  type ClientOptions,
  type CompletionsOptions,
  type EventsOptions,
  type OutputCallback,
  type MapOptions,
  type ResultOptions,
  type RunOptions,
  type SubmitManyOptions,
} from "./client.js";
export {
  asJob,
  decodeCompletion,
  MAP_DEFAULT_KEYS,
  NOTIFY_PROTOCOL_VERSION,
  type Completion,
  type JobLike,
  type MapDefaults,
  type MapProgress,
} from "./batch.js";
export {
  ClientClosedError,
  ConflictError,
  ExistsError,
  HostFullError,
  InvalidArgumentError,
  IsADirectoryError,
  JobDecodeError,
  NoSpaceError,
  NotADirectoryError,
  NotAFileError,
  NotEmptyError,
  NotFoundError,
  PermissionError,
  ProcessExitedError,
  ProtocolError,
  RedisUnavailableError,
  SandpoolError,
  SessionBusyError,
  SessionError,
  sessionError,
  sessionErrorClass,
  SessionLostError,
  SessionNotFoundError,
  SessionStoppedError,
  TemplateMismatchError,
  UnsupportedError,
  WaitTimeoutError,
  type JobRejectionCode,
  type SessionErrorContext,
} from "./errors.js";
export { ProcessHub, SessionProcess, type ProcessOutputListener } from "./process.js";
export type { ProcessOutputOptions, ProcessSession } from "./process_session.js";
export {
  checkSessionId,
  CONTEXT_RUNTIMES,
  MAX_FILE_CALL_BYTES,
  newOpId,
  Session,
  SESSION_LEVEL_CODES,
  type ContextRuntime,
  type OperationEventStream,
} from "./session.js";
// Every option and command type of session operations (CreateSessionOptions, ExecOptions, ...).
export type * from "./session_options.js";
export {
  decodeAnyResult,
  decodeOpEvent,
  decodePortEntry,
  decodePorts,
  decodeProcessEvent,
  decodeSessionRecord,
  decodeSnapshotRecord,
  decodeStoredResult,
  encodeRequest,
  encodeWireValue,
  Float64,
  OPERATIONS,
  OpResult,
  ProcessExitedEvent,
  ProcessOutputEvent,
  SESSION_ERROR_CODES,
  SESSION_PROTOCOL_VERSION,
  SESSION_STATES,
  SessionInfo,
  SessionRecord,
  SnapshotRecord,
  UnknownProcessEvent,
  type ExistsResult,
  type FileType,
  type ListEntry,
  type ListResult,
  type Operation,
  type PortEntry,
  type ProcessEvent,
  type ProcessInfo,
  type ProcessOutput,
  type ReadResult,
  type SessionState,
  type SnapshotInfo,
  type StatResult,
  type Wire,
  type WrittenFile,
} from "./session_protocol.js";
export { Keys } from "./keys.js";
export {
  buildJobMap,
  checkJobId,
  decodeEvent,
  decodeJob,
  decodeResult,
  encodeJob,
  ERROR_CODES,
  EVENT_TYPES,
  ExitedEvent,
  JOB_MAP_VERSIONS,
  OUTCOMES,
  OutputEvent,
  PROTOCOL_VERSION,
  Result,
  RESULT_STORED,
  RUNTIMES,
  StartedEvent,
  UnknownEvent,
  validJobId,
  type ArgvCommand,
  type BytesInput,
  type CodeCommand,
  type ErrorInfo,
  type EventType,
  type Job,
  type JobEvent,
  type JobMap,
  type JobOptions,
  type Outcome,
  type ResultFields,
  type Runtime,
  type ShellCommand,
} from "./protocol.js";
export { DEFAULT_URL, parseRedisUrl, RedisAddress } from "./url.js";

export const VERSION = "0.1.0";
