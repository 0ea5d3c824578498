/**
 * Mastra workspace provider for sandpool.
 *
 *     import { Workspace } from "@mastra/core/workspace";
 *     import { SandpoolFilesystem, SandpoolSandbox } from "@sandpool/mastra";
 *
 *     const sandbox = new SandpoolSandbox({ id: "agent-1", redisUrl: "redis://127.0.0.1:6379" });
 *     const workspace = new Workspace({ sandbox, filesystem: new SandpoolFilesystem({ sandbox }) });
 *
 * `SandpoolSandbox` (a `MastraSandbox`) runs commands and background processes in a sandpool
 * session; `SandpoolFilesystem` (a `MastraFilesystem`) reads and writes the same session's files.
 */

export { SandpoolFilesystem, type SandpoolFilesystemOptions } from "./filesystem.js";
export { SandpoolProcessHandle, SandpoolProcessManager } from "./processes.js";
export { commandLine, exitCodeOf, processExitCode, shellQuote } from "./results.js";
export { SandpoolSandbox, type SandpoolSandboxOptions } from "./sandbox.js";
