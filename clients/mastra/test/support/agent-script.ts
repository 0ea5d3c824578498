/**
 * The scripted run of the README's agent: the tool calls a model would make for
 * EXAMPLE_PROMPT (examples/agent.ts), each step reading the previous tool result where it needs
 * to (the background server's pid).
 */

import type { Step } from "./scripted-model.js";

export const PORT = 8123;
export const GREETING = "hello from the agent\n";

/** The pid in execute_command's answer to a background start ("Started background process (PID: p3)"). */
export function pidIn(text: string | null): string {
  const m = /PID:\s*([^\s)]+)/.exec(text ?? "");
  if (!m?.[1]) throw new Error(`no PID in tool result: ${text}`);
  return m[1];
}

const FETCH =
  `for i in $(seq 1 100); do python3 -c "import urllib.request as u; ` +
  `print(u.urlopen('http://127.0.0.1:${PORT}/greeting.txt').read().decode(), end='')" 2>/dev/null && break; sleep 0.1; done`;

let serverPid = "";

export const AGENT_STEPS: Step[] = [
  () => ({ tool: "write_file", input: { path: "greeting.txt", content: GREETING } }),
  () => ({ tool: "execute_command", input: { command: "cat greeting.txt | tr a-z A-Z" } }),
  () => ({
    tool: "execute_command",
    input: { command: `python3 -u -m http.server ${PORT} --bind 127.0.0.1`, background: true },
  }),
  (ctx) => {
    serverPid = pidIn(ctx.lastToolResult);
    return { tool: "execute_command", input: { command: FETCH, timeout: 30 } };
  },
  () => ({ tool: "get_process_output", input: { pid: serverPid } }),
  () => ({ tool: "kill_process", input: { pid: serverPid } }),
  () => ({ text: "Done: greeting written, served, fetched, and the server stopped." }),
];

/** The pid the script found for the server (after step 3). */
export function scriptServerPid(): string {
  return serverPid;
}
