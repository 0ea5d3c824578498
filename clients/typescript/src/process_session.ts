/**
 * What a background process's handle (process.ts) uses of its session: the `output`, `stdin` and
 * `kill` operations and their options. Its own module so that imports go one way: session.ts
 * makes the handles (it imports process.ts) and implements this interface; process.ts knows a
 * session only through it.
 */

import type { BytesInput } from "./protocol.js";
import type { ProcessOutput } from "./session_protocol.js";

/** Options of the `output` operation. */
export interface ProcessOutputOptions {
  /** Only the last N lines of each stream. */
  tailLines?: number | undefined;
  /** Answer once the process has exited (or `waitTimeoutMs` has passed). */
  wait?: boolean | undefined;
  /** With `wait`: how long the daemon waits (`wait_timeout_ms`, default 30000). */
  waitTimeoutMs?: number | undefined;
  /** With `wait`: aborting cancels the wait (PROTOCOL.md section 13). */
  signal?: AbortSignal | undefined;
}

/** The operations a process handle sends through its session (a `Session` is one). */
export interface ProcessSession {
  readonly id: string;
  /** The `output` operation. */
  processOutput(pid: string, opts?: ProcessOutputOptions): Promise<ProcessOutput>;
  /** The `stdin` operation; `close` closes the process's stdin. */
  writeStdin(pid: string, data: BytesInput, opts?: { close?: boolean }): Promise<void>;
  /** The `kill` operation: false if the process had already exited. */
  killProcess(pid: string, signal?: number): Promise<boolean>;
}
