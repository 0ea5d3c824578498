/**
 * The options of session operations (PROTOCOL.md section 15) and the commands `exec` and
 * `spawn` take: what a caller of `Session` writes. Types only; session.ts checks and sends
 * them.
 */

import type { ProcessOutputListener } from "./process.js";
import type { BytesInput, Runtime } from "./protocol.js";


/** Options of every operation. */
export interface OperationOptions {
  /** Give up waiting for the result after this long (`WaitTimeoutError`); default: the client's `opTimeoutMs`. */
  waitTimeoutMs?: number | undefined;
}

/** Options of file operations. */
export interface FileOptions extends OperationOptions {
  /** Act as the session's root user (uid 0 in the sandbox) instead of its job user (uid 1000). */
  asRoot?: boolean | undefined;
}

/** Resource limits of a session (PROTOCOL.md section 15, `create`); the daemon clamps them. */
export interface SessionLimits {
  memoryBytes?: number | undefined;
  pids?: number | undefined;
  /** CPU quota in CPUs (e.g. 0.5). */
  cpus?: number | undefined;
  diskBytes?: number | undefined;
}

/** Options of `create` (create-or-connect). */
export interface CreateSessionOptions extends OperationOptions {
  /** The template to start from (default `default`); must match a stopped session's. */
  template?: string | undefined;
  /** Session-wide environment (job env rules); every command sees it under its own `env`. */
  env?: Readonly<Record<string, string>> | ReadonlyMap<string, string> | undefined;
  limits?: SessionLimits | undefined;
  /** Stop (destroy if ephemeral) after this long unused; 0 for never (server default 30 min). */
  idleTimeoutMs?: number | undefined;
  /** Stop after this long; default 0, none. */
  maxLifetimeMs?: number | undefined;
  /** Destroyed instead of stopped. */
  ephemeral?: boolean | undefined;
  /** Labels (at most 64, 4 KiB): `listSessions({labels})` filters on them. */
  labels?: Readonly<Record<string, string>> | ReadonlyMap<string, string> | undefined;
  /**
   * How long a daemon may wait for room before `host_full` (`wait_ms`, default 30000). Named in
   * PROTOCOL.md section 19 only; sent only when given.
   */
  waitMs?: number | undefined;
}

/** A command of `exec`: exactly one of `argv`, `shell`, or `code` with `runtime`. */
export type ExecCommand =
  | { argv: readonly string[]; shell?: undefined; code?: undefined; runtime?: undefined }
  | { shell: string; argv?: undefined; code?: undefined; runtime?: undefined }
  | { code: string; runtime: Runtime; argv?: undefined; shell?: undefined };

/** Options of `exec` (as in a job map, over the session's env). */
export interface ExecOptions {
  env?: Readonly<Record<string, string>> | ReadonlyMap<string, string> | undefined;
  /** Absolute working directory (default `/work`). */
  cwd?: string | undefined;
  stdin?: BytesInput | undefined;
  /** Wall timeout; the result's outcome is `timeout` when it fires. */
  timeoutMs?: number | undefined;
  /** Output kept per stream (daemon default 1 MiB, clamped to its maximum). */
  maxOutputBytes?: number | undefined;
  asRoot?: boolean | undefined;
  /** Aborting cancels the command (its result: outcome `cancelled`, output so far kept). */
  signal?: AbortSignal | undefined;
  /** Give up waiting after this long (`WaitTimeoutError`; the command goes on). Default: no limit. */
  waitTimeoutMs?: number | undefined;
}

/** `exec`/`code` with live output delivered to callbacks. */
export interface ExecRunOptions extends ExecOptions {
  onStdout?: ((chunk: Buffer) => void) | undefined;
  onStderr?: ((chunk: Buffer) => void) | undefined;
}

/** Options of `code`. */
export interface CodeOptions {
  /** The code context (interpreter) to run in, default `default`. */
  context?: string | undefined;
  /**
   * Wall timeout of this call. A call that times out, is cancelled or passes its output cap
   * kills the context's interpreter (its state is gone; the next call starts a new one).
   */
  timeoutMs?: number | undefined;
  /** Output kept per stream. */
  maxOutputBytes?: number | undefined;
  signal?: AbortSignal | undefined;
  waitTimeoutMs?: number | undefined;
  onStdout?: ((chunk: Buffer) => void) | undefined;
  onStderr?: ((chunk: Buffer) => void) | undefined;
}

/** A command of `spawn`: `argv`, or a `shell` line. */
export type SpawnCommand =
  | { argv: readonly string[]; shell?: undefined }
  | { shell: string; argv?: undefined };

/** Options of `spawn`. */
export interface SpawnOptions extends OperationOptions {
  env?: Readonly<Record<string, string>> | ReadonlyMap<string, string> | undefined;
  cwd?: string | undefined;
  asRoot?: boolean | undefined;
  /** `"pipe"` (default): write with `write()`/`closeStdin()`; `"ignore"`: no stdin. */
  stdin?: "pipe" | "ignore" | undefined;
  /** Live output (also `onStdout`/`onStderr`), from the first byte. */
  onOutput?: ProcessOutputListener | undefined;
  onStdout?: ((chunk: Buffer) => void) | undefined;
  onStderr?: ((chunk: Buffer) => void) | undefined;
}

/** Options of `expose`. */
export interface ExposeOptions extends OperationOptions {
  /** `"http"`, the default and only protocol so far. */
  protocol?: "http" | undefined;
}

/** One file of `write`. */
export interface FileSpec {
  path: string;
  data: BytesInput;
  /** Permission bits (default 0644). */
  mode?: number | undefined;
  /** Create missing parent directories (default true). */
  parents?: boolean | undefined;
  /** Replace an existing file (default true); false: `ExistsError`. */
  overwrite?: boolean | undefined;
  /** Refuse with `ConflictError` unless the file's mtime is exactly this. */
  expectedMtimeNs?: bigint | undefined;
}
