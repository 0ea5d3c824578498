/**
 * TypeScript client for sandpool, the self-hosted sandbox worker pool (wire protocol v1,
 * docs/PROTOCOL.md). It talks only to Redis.
 *
 *     import { Client } from "sandpool";
 *
 *     const c = new Client("redis://127.0.0.1:6379");
 *     const r = await c.run({ shell: "echo hi" }, { onStdout: (b) => process.stdout.write(b) });
 *     console.log(r.outcome, r.exitCode, r.stdoutText);
 *     await c.close();
 *
 * Layout: `protocol` (codecs, no I/O), `url` (Redis URLs), `keys` (key names), `connection` (the
 * client's command and subscriber connections, reconnection and retries), `follower` (following
 * one job's events), `client` (the jobs API). The sessions API will live beside `client` and
 * share `connection`.
 */

export {
  CANCEL_TTL_SECONDS,
  Client,
  JobEventStream,
  JobStatus,
  newJobId,
  URL_ENV,
  type ClientOptions,
  type EventsOptions,
  type OutputCallback,
  type ResultOptions,
  type RunOptions,
} from "./client.js";
export {
  ClientClosedError,
  InvalidArgumentError,
  JobDecodeError,
  ProtocolError,
  RedisUnavailableError,
  SandpoolError,
  WaitTimeoutError,
  type JobRejectionCode,
} from "./errors.js";
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
  OUTCOMES,
  OutputEvent,
  PROTOCOL_VERSION,
  Result,
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
