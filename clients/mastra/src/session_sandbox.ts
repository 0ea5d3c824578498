/**
 * What the process manager (processes.ts) uses of its sandbox: the session behind it and the
 * working directory. Its own module so that imports go one way: sandbox.ts makes the process
 * manager (it imports processes.ts) and implements this interface; processes.ts knows the
 * sandbox only through it.
 */

import type { MastraSandbox } from "@mastra/core/workspace";
import type { Session } from "sandpool";

/** A Mastra sandbox on a sandpool session (`SandpoolSandbox` is one). */
export interface SessionSandbox extends MastraSandbox {
  /**
   * Run `fn` on the session, started first if need be; a session stopped or removed from outside
   * is started again and `fn` runs once more.
   */
  withSession<T>(fn: (session: Session) => Promise<T>): Promise<T>;
  /** `cwd` resolved against the sandbox's working directory (that directory when not given). */
  resolveCwd(cwd: string | undefined): string;
}
