/**
 * Mapping sandpool results onto Mastra's: exit codes for every outcome, output retention, text
 * decoding, shell quoting, environment and path helpers. No I/O.
 */

import { posix } from "node:path";
import { StringDecoder } from "node:string_decoder";

import type { CommandResult } from "@mastra/core/workspace";
import type { Result } from "sandpool";

/**
 * The exit code Mastra sees for a sandpool job result: the process's own code when it exited,
 * else the CLI convention of PROTOCOL.md section 5 (124 timeout, 130 cancelled, 137 killed by a
 * limit, 128 + signal, 125 for a command that could not run without a code of its own).
 */
export function exitCodeOf(r: Result): number {
  switch (r.outcome) {
    case "exit":
      return r.exitCode ?? 0;
    case "timeout":
      return 124;
    case "cancelled":
      return 130;
    case "output_limit":
    case "memory_limit":
    case "cpu_limit":
      return 137;
    case "pids_limit":
      return r.exitCode ?? 137;
    case "seccomp":
      return 159;
    case "disk_limit":
    case "signal":
      return r.exitCode ?? 128 + (r.signal ?? 9);
    case "worker_lost":
      return 125;
    case "error":
      return r.exitCode ?? 125;
    default:
      return r.exitCode ?? (r.signal !== null ? 128 + r.signal : 1);
  }
}

/** The exit code of a background process that ended: its code, or 128 + the signal. */
export function processExitCode(exitCode: number | null, signal: number | null): number {
  if (exitCode !== null) return exitCode;
  if (signal !== null) return 128 + signal;
  return 1;
}

/**
 * Keep the newest `maxBytes` bytes of `data` (Mastra's `maxRetainedBytes`: oldest output dropped),
 * cut at a UTF-8 character boundary. Returns the text and how many bytes were dropped.
 */
export function retainNewest(data: Buffer, maxBytes: number | undefined): { text: string; dropped: number } {
  if (maxBytes === undefined || maxBytes === Infinity || data.length <= maxBytes) {
    return { text: data.toString("utf8"), dropped: 0 };
  }
  let start = data.length - Math.max(0, Math.floor(maxBytes));
  // A UTF-8 continuation byte is 10xxxxxx: step forward to the start of a character.
  while (start < data.length && ((data[start] ?? 0) & 0xc0) === 0x80) start++;
  return { text: data.subarray(start).toString("utf8"), dropped: start };
}

/** Turns chunks of bytes into text without splitting multi-byte characters. */
export class TextChunks {
  private readonly decoder = new StringDecoder("utf8");
  constructor(private readonly sink: ((text: string) => void) | undefined) {}

  write(chunk: Buffer): void {
    const t = this.decoder.write(chunk);
    if (t) this.sink?.(t);
  }

  end(): void {
    const t = this.decoder.end();
    if (t) this.sink?.(t);
  }
}

/** A Mastra CommandResult for a sandpool job result. */
export function commandResultOf(
  r: Result,
  opts: { command: string; args: string[]; startedAt: number; maxRetainedBytes?: number | undefined },
): CommandResult {
  const exitCode = exitCodeOf(r);
  const out = retainNewest(r.stdout, opts.maxRetainedBytes);
  const err = retainNewest(r.stderr, opts.maxRetainedBytes);
  let stderr = err.text;
  // A command that could not run (exec_failed, a rejected request...) says why in the error.
  if (r.outcome === "error" && r.error !== null && stderr === "") stderr = `${r.error.code}: ${r.error.message}\n`;
  const result: CommandResult = {
    success: exitCode === 0,
    exitCode,
    stdout: out.text,
    stderr,
    executionTimeMs: r.execTimeUs > 0 ? Math.round(r.execTimeUs / 1000) : Date.now() - opts.startedAt,
    command: opts.command,
    args: opts.args,
  };
  if (r.timedOut || r.outcome === "timeout") result.timedOut = true;
  if (r.killed || r.outcome === "cancelled" || r.outcome === "timeout") result.killed = true;
  const stdoutDropped = r.stdoutDroppedBytes + out.dropped;
  const stderrDropped = r.stderrDroppedBytes + err.dropped;
  if (r.stdoutTruncated || out.dropped > 0) {
    result.stdoutTruncated = true;
    result.stdoutDroppedBytes = stdoutDropped;
  }
  if (r.stderrTruncated || err.dropped > 0) {
    result.stderrTruncated = true;
    result.stderrDroppedBytes = stderrDropped;
  }
  return result;
}

const SAFE_ARG = /^[A-Za-z0-9._\-/=:@]+$/;

/** Quote an argument for `/bin/sh` (safe characters pass through, else single quotes). */
export function shellQuote(arg: string): string {
  if (arg !== "" && SAFE_ARG.test(arg)) return arg;
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** A command line from a command and its arguments, each argument quoted. */
export function commandLine(command: string, args: readonly string[] = []): string {
  return args.length > 0 ? `${command} ${args.map(shellQuote).join(" ")}` : command;
}

/** Merge environment overlays (later wins), dropping undefined values. */
export function mergeEnv(...layers: (Record<string, string | undefined> | NodeJS.ProcessEnv | undefined)[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const layer of layers) {
    if (!layer) continue;
    for (const [k, v] of Object.entries(layer)) {
      if (v === undefined) delete out[k];
      else out[k] = v;
    }
  }
  return out;
}

/** An absolute path in the session: relative ones resolve against `base`. */
export function resolveIn(base: string, path: string): string {
  return posix.resolve(base, path);
}

/** A snapshot (template) name from any string: `[A-Za-z0-9._-]{1,64}`. */
export function templateNameFrom(s: string): string {
  const name = s.replace(/[^A-Za-z0-9._-]/g, "-").slice(0, 64);
  return name === "" ? "checkpoint" : name;
}
