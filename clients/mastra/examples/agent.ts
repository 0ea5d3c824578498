/**
 * A Mastra agent whose workspace is a sandpool session: file tools and commands on the same
 * files, background processes included. This is the README's example; test/agent.test.ts runs it
 * with a scripted model.
 *
 * Run it with a real model (after `npm run build`):
 *
 *     SANDPOOL_REDIS_URL=redis://127.0.0.1:6379 MODEL=openai/gpt-5.4 OPENAI_API_KEY=... \
 *       node build-test/examples/agent.js
 */

import { Agent } from "@mastra/core/agent";
import { Workspace } from "@mastra/core/workspace";
import { SandpoolFilesystem, SandpoolSandbox } from "@sandpool/mastra";

export interface SandpoolAgentOptions {
  /** Any model Mastra accepts: a "provider/model" id, or an AI SDK model object. */
  model: ConstructorParameters<typeof Agent>[0]["model"];
  /** The session to live in: the same id finds the same files later, from any process. */
  sessionId?: string;
  /** The sandpool deployment's Redis (default $SANDPOOL_REDIS_URL). */
  redisUrl?: string;
}

export function createSandpoolAgent(options: SandpoolAgentOptions) {
  const sandbox = new SandpoolSandbox({
    id: options.sessionId,
    redisUrl: options.redisUrl,
    labels: { app: "example-agent" },
    timeout: 120_000, // per command, unless the agent asks for another
  });
  const workspace = new Workspace({
    sandbox,
    // The agent's file tools read and write the session's own files: what commands see.
    filesystem: new SandpoolFilesystem({ sandbox }),
  });
  const agent = new Agent({
    id: "sandpool-agent",
    name: "Sandpool agent",
    instructions:
      "You are a careful engineer working in an isolated Linux sandbox. Use the file tools for files " +
      "and execute_command for commands; start servers with background: true and stop them when done.",
    model: options.model,
    workspace,
  });
  return { agent, sandbox, workspace };
}

export const EXAMPLE_PROMPT =
  "Write greeting.txt saying hello, print it in capitals, serve the directory over HTTP on port 8123 " +
  "in the background, fetch greeting.txt from it, show the server's log, then stop the server.";

async function main(): Promise<void> {
  const { agent, sandbox } = createSandpoolAgent({ model: process.env.MODEL ?? "openai/gpt-5.4", sessionId: process.env.SESSION_ID });
  try {
    const result = await agent.generate(EXAMPLE_PROMPT, { maxSteps: 12 });
    console.log(result.text);
  } finally {
    await sandbox.close(); // keep the session; destroy() would remove it
  }
}

if (process.argv[1] !== undefined && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  main().catch((e: unknown) => {
    console.error(e);
    process.exitCode = 1;
  });
}
